//! The webhook's configuration, its NetworkPolicy and the cert-manager
//! component against the controller's flags.

use std::path::Path;

use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration, core::v1::Service,
    networking::v1::NetworkPolicy,
};
use serde_json::Value;

use super::{NAMESPACE, base, controller_cli, find, render, typed};
use ssh_fwd::vocabulary;

#[test]
fn the_webhook_configuration_sends_only_ssh_pods_to_the_controllers_webhook_port() {
    let docs = base();
    let config: MutatingWebhookConfiguration =
        typed(find(&docs, "MutatingWebhookConfiguration", "ssh-fwd")).unwrap();
    let [hook] = config.webhooks.as_deref().unwrap() else {
        panic!("one webhook")
    };
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.side_effects, "NoneOnDryRun");
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));
    let timeout = u64::try_from(hook.timeout_seconds.unwrap()).unwrap();
    assert_eq!(timeout, 5);
    let objects = hook.object_selector.as_ref().unwrap();
    assert_eq!(
        objects.match_labels.as_ref().unwrap(),
        &[(
            vocabulary::SSH.to_owned(),
            vocabulary::SSH_ENABLED.to_owned()
        )]
        .into()
    );
    let namespaces = &hook
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .as_ref()
        .unwrap()[0];
    assert_eq!(namespaces.key, "kubernetes.io/metadata.name");
    assert_eq!(namespaces.operator, "NotIn");
    assert_eq!(
        namespaces.values.as_deref().unwrap(),
        ["kube-system", NAMESPACE]
    );
    let rules = hook.rules.as_deref().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].operations.as_deref().unwrap(), ["CREATE"]);
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["pods"]);
    // The Service it calls leads to the controller's --webhook-addr.
    let target = hook.client_config.service.as_ref().unwrap();
    assert_eq!(
        (target.namespace.as_str(), target.path.as_deref()),
        (NAMESPACE, Some("/mutate"))
    );
    let service: Service = typed(find(&docs, "Service", &target.name)).unwrap();
    let spec = service.spec.unwrap();
    let port = &spec.ports.as_deref().unwrap()[0];
    assert_eq!(Some(port.port), target.port);
    let (args, deployment) = controller_cli(&docs);
    // The API server waits 5 s; the webhook answers, port or not, after 4.
    assert_eq!(
        args.admission.webhook_deadline,
        std::time::Duration::from_secs(4)
    );
    assert!(args.admission.webhook_deadline < std::time::Duration::from_secs(timeout));
    let addr = args.admission.webhook_addr.expect("--webhook-addr");
    assert_eq!(
        port.target_port,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(addr.port()))
        )
    );
    let pod_labels = deployment
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .labels
        .unwrap();
    assert!(
        spec.selector
            .unwrap()
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
    );
    assert!(args.admission.webhook_self_signed);
    assert_eq!(args.admission.webhook_service, target.name);
    assert_eq!(args.admission.webhook_configuration, "ssh-fwd");
    assert_eq!(args.admission.check(), Ok(()));
}

#[test]
fn the_network_policy_admits_the_webhook_port_only_from_the_api_servers_addresses() {
    // The component as shipped (a documentation range), and as the kind
    // overlay patches it (kind's docker network): the patch keeps both
    // rules.
    let shipped = render::render_kustomization(
        "webhook-network-policy",
        "resources: [DEPLOY/base]\ncomponents: [DEPLOY/components/webhook-network-policy]\n",
    )
    .unwrap();
    for (docs, cidr) in [
        (shipped, "192.0.2.0/24"),
        (render("overlays/kind"), "172.18.0.0/16"),
    ] {
        check_network_policy(&docs);
        let policy = find(&docs, "NetworkPolicy", "ssh-fwd-controller");
        assert_eq!(
            policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
            cidr
        );
    }
}

fn check_network_policy(docs: &[Value]) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let policy: NetworkPolicy = typed(find(docs, "NetworkPolicy", "ssh-fwd-controller")).unwrap();
    assert_eq!(
        policy.metadata.namespace.as_deref(),
        Some("ssh-fwd"),
        "the controller's namespace, whatever the overlay sets"
    );
    assert!(
        !base().iter().any(|d| d["kind"] == "NetworkPolicy"),
        "not in the base: its ipBlock must be set for the cluster first"
    );
    let spec = policy.spec.unwrap();
    let (args, deployment) = controller_cli(docs);
    let template = deployment.spec.unwrap().template;
    let labels = template.metadata.unwrap().labels.unwrap();
    let selected = spec.pod_selector.unwrap().match_labels.unwrap();
    assert!(!selected.is_empty() && selected.iter().all(|(k, v)| labels.get(k) == Some(v)));
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    // The named ports are the container's, on --webhook-addr and
    // --metrics-addr.
    let container = &template.spec.unwrap().containers[0];
    let number = |port: &IntOrString| {
        let IntOrString::String(name) = port else {
            panic!("{port:?}: name the container's port")
        };
        let found = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_ref() == Some(name));
        found
            .unwrap_or_else(|| panic!("no container port {name}"))
            .container_port
    };
    let rules = spec.ingress.unwrap();
    let [webhook, metrics] = rules.as_slice() else {
        panic!("two rules: the webhook's and the metrics'")
    };
    let port_of = |rule: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        let ports = rule.ports.as_deref().unwrap();
        assert_eq!(ports.len(), 1);
        number(ports[0].port.as_ref().unwrap())
    };
    let webhook_addr = args.admission.webhook_addr.expect("--webhook-addr");
    assert_eq!(port_of(webhook), i32::from(webhook_addr.port()));
    let from = webhook.from.as_deref().unwrap();
    assert!(
        from.len() == 1 && from[0].ip_block.is_some() && from[0].pod_selector.is_none(),
        "the webhook port only from an ipBlock: {from:?}"
    );
    assert_eq!(
        port_of(metrics),
        i32::from(args.metrics_addr.unwrap().port())
    );
    assert!(metrics.from.is_none(), "Prometheus scrapes from anywhere");
}

#[test]
fn the_cert_manager_overlay_serves_the_certificate_cainjector_vouches_for() {
    let docs = render("overlays/cert-manager");
    let (args, deployment) = controller_cli(&docs);
    // It changes settings, not arguments: the base's stay as they are, so
    // it composes with any other part.
    let arguments = |docs: &[Value]| {
        let deployment = find(docs, "Deployment", "ssh-fwd-controller");
        deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone()
    };
    assert_eq!(arguments(&docs), arguments(&base()));
    assert!(!args.admission.webhook_self_signed);
    let dir = args
        .admission
        .webhook_cert_dir
        .clone()
        .expect("--webhook-cert-dir");
    assert_eq!(args.admission.check(), Ok(()));
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Path::new(&m.mount_path) == dir)
        .expect("the certificate is mounted at --webhook-cert-dir");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    let secret = volume.secret.as_ref().unwrap().secret_name.clone().unwrap();
    let certificate = find(&docs, "Certificate", "ssh-fwd-webhook");
    assert_eq!(certificate["spec"]["secretName"], secret.as_str());
    // Signed by a CA of its own: a selfSigned Issuer makes the CA, a CA
    // Issuer signs with it. A serving certificate that were its own trust
    // anchor would leave caBundle trusting only a certificate not served
    // yet, from each renewal until the kubelet updates the mounted files.
    let issuer_of = |certificate: &Value| {
        let issuer = &certificate["spec"]["issuerRef"];
        find(
            &docs,
            issuer["kind"].as_str().unwrap(),
            issuer["name"].as_str().unwrap(),
        )
    };
    let ca_secret = issuer_of(certificate)["spec"]["ca"]["secretName"]
        .as_str()
        .expect("the serving certificate's Issuer is a CA Issuer");
    let ca = docs
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["spec"]["secretName"] == ca_secret)
        .expect("a Certificate makes the CA Issuer's Secret");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(issuer_of(ca)["spec"]["selfSigned"], serde_json::json!({}));
    // Renewed with the same key, the CA still vouches for what it signed.
    assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
    let service = format!("{}.{NAMESPACE}.svc", args.admission.webhook_service);
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| *n == service.as_str())
    );
    // cainjector puts the CA into caBundle, not the serving certificate.
    let config = find(&docs, "MutatingWebhookConfiguration", "ssh-fwd");
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/{}", ca["metadata"]["name"].as_str().unwrap())
    );
    let config: MutatingWebhookConfiguration = typed(config).unwrap();
    assert!(config.webhooks.unwrap()[0].client_config.service.is_some());
}
