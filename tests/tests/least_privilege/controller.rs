//! The controller's token and a tenant's against the enforcing fake.

use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::fake_api::Kind;

use super::{LEASES, NS, call, cluster, denied_by, lease, refused, taken};

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "job", "namespace": "jobs",
                        "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED},
                        "annotations": {"team": "a"}},
           "spec": {"containers": [{"name": "job", "image": "hpc-job"}]}})
}

/// A Service as the controller makes one.
fn ours(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": namespace,
                        "labels": {vocabulary::MANAGED_BY_LABEL: vocabulary::CONTROLLER},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "job",
                                             "uid": "u1", "controller": true}]},
           "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                    "allocateLoadBalancerNodePorts": false,
                    "selector": {vocabulary::SERVICE: name},
                    "ports": [{"name": "ssh", "port": 9000, "targetPort": 22, "protocol": "TCP"}]}})
}

#[test]
fn the_controllers_token_writes_only_its_own_pod_metadata_services_and_ca_bundle() {
    let api = cluster();
    api.apply(Kind::Pod, pod());
    api.apply(
        Kind::Service,
        json!({"metadata": {"name": "kube-dns", "namespace": "kube-system"},
               "spec": {"selector": {"k8s-app": "kube-dns"}, "ports": [{"port": 53}]}}),
    );
    api.apply(
        Kind::Service,
        json!({"metadata": {"name": "web", "namespace": "jobs"},
               "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    );
    let controller = api.service_account_token("ssh-fwd", "ssh-fwd-controller", None);
    let pod_at = "/api/v1/namespaces/jobs/pods/job";
    let image = json!({"spec": {"containers": [{"name": "job", "image": "attacker/miner"}]}});
    denied_by(
        call(&api, &controller, "PATCH", pod_at, Some(&image)),
        "ssh-fwd-controller-pods",
    );
    let annotation = json!({"metadata": {"annotations": {"team": "b"}}});
    denied_by(
        call(&api, &controller, "PATCH", pod_at, Some(&annotation)),
        "ssh-fwd-controller-pods",
    );
    let ours_only = json!({"metadata": {"annotations": {vocabulary::ENDPOINT: "ssh.example.org:9000"},
                                        "labels": {vocabulary::SERVICE: "ssh-job"}}});
    taken(call(&api, &controller, "PATCH", pod_at, Some(&ours_only)));

    // Services not of its making, anywhere: refused.
    let system = "/api/v1/namespaces/kube-system/services";
    let rogue = json!({"metadata": {"name": "rogue"}, "spec": {"selector": {"k8s-app": "kube-dns"}, "ports": [{"port": 53}]}});
    let policy = "ssh-fwd-controller-services";
    denied_by(
        call(&api, &controller, "POST", system, Some(&rogue)),
        policy,
    );
    denied_by(
        call(
            &api,
            &controller,
            "DELETE",
            &format!("{system}/kube-dns"),
            None,
        ),
        policy,
    );
    let port = json!({"spec": {"ports": [{"port": 9000}]}});
    let web = "/api/v1/namespaces/jobs/services/web";
    denied_by(call(&api, &controller, "PATCH", web, Some(&port)), policy);
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}}});
    denied_by(
        call(
            &api,
            &controller,
            "PATCH",
            &format!("{web}/status"),
            Some(&status),
        ),
        policy,
    );
    // Its own: taken, from create to delete, status included.
    let jobs = "/api/v1/namespaces/jobs/services";
    taken(call(
        &api,
        &controller,
        "POST",
        jobs,
        Some(&ours("jobs", "ssh-job")),
    ));
    taken(call(
        &api,
        &controller,
        "PATCH",
        &format!("{jobs}/ssh-job/status"),
        Some(&status),
    ));
    let widened = json!({"spec": {"selector": {vocabulary::SERVICE: "ssh-job", "app": "web"}}});
    denied_by(
        call(
            &api,
            &controller,
            "PATCH",
            &format!("{jobs}/ssh-job"),
            Some(&widened),
        ),
        policy,
    );
    taken(call(
        &api,
        &controller,
        "DELETE",
        &format!("{jobs}/ssh-job"),
        None,
    ));

    // The webhook: the caBundle and nothing else.
    let at = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/ssh-fwd";
    let config = api
        .get(Kind::MutatingWebhookConfiguration, "", "ssh-fwd")
        .unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = api
            .get(Kind::MutatingWebhookConfiguration, "", "ssh-fwd")
            .unwrap();
        f(&mut c);
        c
    };
    let everything = with(&|c| c["webhooks"][0]["rules"][0]["resources"] = json!(["*"]));
    let webhook = "ssh-fwd-controller-webhook";
    denied_by(
        call(&api, &controller, "PUT", at, Some(&everything)),
        webhook,
    );
    let elsewhere = with(&|c| {
        c["webhooks"][0]["clientConfig"] = json!({"url": "https://attacker.example/mutate"})
    });
    denied_by(
        call(&api, &controller, "PUT", at, Some(&elsewhere)),
        webhook,
    );
    let ca = with(&|c| c["webhooks"][0]["clientConfig"]["caBundle"] = json!("Q0E="));
    taken(call(&api, &controller, "PUT", at, Some(&ca)));
    assert_eq!(
        api.get(Kind::MutatingWebhookConfiguration, "", "ssh-fwd")
            .unwrap()["webhooks"][0]["rules"],
        config["webhooks"][0]["rules"]
    );
}

#[test]
fn a_tenant_with_edit_writes_neither_service_status_nor_endpoint_slices_nor_ssh_fwd() {
    let api = cluster();
    api.apply(Kind::Service, ours("jobs", "ssh-job"));
    let tenant = api.tenant_token("jobs");
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10", "ports": [{"port": 9001, "protocol": "TCP"}]}]}}});
    let at = "/api/v1/namespaces/jobs/services/ssh-job";
    let message = refused(
        call(
            &api,
            &tenant,
            "PATCH",
            &format!("{at}/status"),
            Some(&status),
        ),
        403,
    );
    assert_eq!(
        message,
        "services \"ssh-job\" is forbidden: User \"tenant:jobs\" cannot patch resource \"services/status\" in API group \"\" in the namespace \"jobs\""
    );
    let slice = json!({"metadata": {"name": "ssh-job-forged", "labels": {"kubernetes.io/service-name": "ssh-job"}},
                       "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.9.9"]}]});
    let message = refused(
        call(
            &api,
            &tenant,
            "POST",
            "/apis/discovery.k8s.io/v1/namespaces/jobs/endpointslices",
            Some(&slice),
        ),
        403,
    );
    assert!(
        message.starts_with(
            "endpointslices.discovery.k8s.io is forbidden: User \"tenant:jobs\" cannot create"
        ),
        "{message}"
    );
    let hostname = json!({"data": {"ssh-hostname": "attacker.example"}});
    refused(
        call(
            &api,
            &tenant,
            "PATCH",
            &format!("{NS}/configmaps/ssh-fwd-config"),
            Some(&hostname),
        ),
        403,
    );
    refused(
        call(
            &api,
            &tenant,
            "POST",
            LEASES,
            Some(&lease("x", Some(vocabulary::ANNOUNCE), "me")),
        ),
        403,
    );
    // What edit does give, in its own namespace: the Service's spec.
    taken(call(
        &api,
        &tenant,
        "PATCH",
        at,
        Some(&json!({"metadata": {"labels": {"team": "a"}}})),
    ));
    // The administrator may do anything the policies leave alone.
    let admin = api.admin_token();
    taken(call(
        &api,
        &admin,
        "PATCH",
        &format!("{at}/status"),
        Some(&status),
    ));
}

/// A pod's host key Secret as the controller makes one.
fn host_key_secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "job",
                                             "uid": "u1", "controller": true}]},
           "type": vocabulary::HOST_KEY_SECRET_TYPE,
           "data": {"ssh_host_ed25519_key": "a2V5"}})
}

#[test]
fn the_controllers_token_creates_only_pods_host_key_secrets_outside_its_namespace() {
    let api = cluster();
    api.apply(
        Kind::Secret,
        json!({"metadata": {"name": "db-password", "namespace": "jobs"}, "data": {"p": "cA=="}}),
    );
    let controller = api.service_account_token("ssh-fwd", "ssh-fwd-controller", None);
    let jobs = "/api/v1/namespaces/jobs/secrets";
    taken(call(
        &api,
        &controller,
        "POST",
        jobs,
        Some(&host_key_secret("ssh-fwd-host-key-abc")),
    ));
    let policy = "ssh-fwd-controller-secrets";
    // Another name, another type (a service-account token the token
    // controller would fill in), no owner: refused.
    denied_by(
        call(
            &api,
            &controller,
            "POST",
            jobs,
            Some(&host_key_secret("db-password2")),
        ),
        policy,
    );
    let mut token = host_key_secret("ssh-fwd-host-key-tok");
    token["type"] = json!("kubernetes.io/service-account-token");
    token["metadata"]["annotations"] = json!({"kubernetes.io/service-account.name": "default"});
    denied_by(
        call(
            &api,
            &controller,
            "POST",
            "/api/v1/namespaces/kube-system/secrets",
            Some(&token),
        ),
        policy,
    );
    let mut orphan = host_key_secret("ssh-fwd-host-key-orphan");
    orphan["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    denied_by(call(&api, &controller, "POST", jobs, Some(&orphan)), policy);
    // Never read, changed or deleted there: RBAC.
    refused(
        call(
            &api,
            &controller,
            "GET",
            &format!("{jobs}/db-password"),
            None,
        ),
        403,
    );
    let change = json!({"data": {"p": "eA=="}});
    refused(
        call(
            &api,
            &controller,
            "PATCH",
            &format!("{jobs}/db-password"),
            Some(&change),
        ),
        403,
    );
    refused(
        call(
            &api,
            &controller,
            "DELETE",
            &format!("{jobs}/ssh-fwd-host-key-abc"),
            None,
        ),
        403,
    );
    // In its own namespace: its host CA, read; the published line, written.
    let ca = json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": vocabulary::HOST_CA_SECRET}, "data": {"k": "aw=="}});
    taken(call(
        &api,
        &controller,
        "POST",
        &format!("{NS}/secrets"),
        Some(&ca),
    ));
    taken(call(
        &api,
        &controller,
        "GET",
        &format!("{NS}/secrets/{}", vocabulary::HOST_CA_SECRET),
        None,
    ));
    let line = json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": vocabulary::HOST_CA_CONFIG_MAP},
                      "data": {"known_hosts": "@cert-authority [h]:* ssh-ed25519 AAAA\n"}});
    taken(call(
        &api,
        &controller,
        "POST",
        &format!("{NS}/configmaps"),
        Some(&line),
    ));
    // No other ConfigMap: an agent's served report is its word, not ours.
    let forged_report = json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "ssh-fwd-served-node9"}, "data": {}});
    denied_by(
        call(
            &api,
            &controller,
            "POST",
            &format!("{NS}/configmaps"),
            Some(&forged_report),
        ),
        "ssh-fwd-controller-config-maps",
    );
    // Every tenant reads the line, and writes neither it nor the CA.
    let tenant = api.tenant_token("jobs");
    let at = format!("{NS}/configmaps/{}", vocabulary::HOST_CA_CONFIG_MAP);
    taken(call(&api, &tenant, "GET", &at, None));
    let forged = json!({"data": {"known_hosts": "@cert-authority * ssh-ed25519 EVIL\n"}});
    refused(call(&api, &tenant, "PATCH", &at, Some(&forged)), 403);
    refused(
        call(
            &api,
            &tenant,
            "GET",
            &format!("{NS}/secrets/{}", vocabulary::HOST_CA_SECRET),
            None,
        ),
        403,
    );
}
