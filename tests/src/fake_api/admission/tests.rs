//! deploy/base's policies on sample requests: what they refuse and what
//! they let through, for each service account.

use serde_json::{Value, json};

use super::{Policies, Target};
use crate::fake_api::{auth::UserInfo, cluster::Cluster};

fn deploy() -> Policies {
    Cluster::deploy().expect("deploy/base loads").policies
}

fn agent(node: Option<&str>) -> UserInfo {
    UserInfo::service_account("ssh-fwd", "ssh-fwd-agent", node, 1)
}

fn controller() -> UserInfo {
    UserInfo::service_account("ssh-fwd", "ssh-fwd-controller", None, 2)
}

struct Write<'a> {
    group: &'a str,
    resource: &'a str,
    subresource: &'a str,
    namespace: &'a str,
    name: &'a str,
    old: Option<Value>,
    new: Option<Value>,
}

impl Write<'_> {
    fn by(&self, policies: &Policies, user: &UserInfo) -> Result<(), String> {
        let operation = match (&self.old, &self.new) {
            (None, _) => "CREATE",
            (Some(_), Some(_)) => "UPDATE",
            (Some(_), None) => "DELETE",
        };
        let target = Target {
            group: self.group,
            resource: self.resource,
            subresource: self.subresource,
            operation,
            namespace: self.namespace,
            name: self.name,
            object: self.new.as_ref(),
            old: self.old.as_ref(),
        };
        policies.admit(&target, user).map_err(|e| {
            assert!(matches!(e.code, 403 | 422), "{}", e.message);
            e.message
        })
    }
}

fn config_map(name: &str) -> Write<'_> {
    let cm = json!({"metadata": {"name": name, "namespace": "ssh-fwd"}, "data": {}});
    Write {
        group: "",
        resource: "configmaps",
        subresource: "",
        namespace: "ssh-fwd",
        name,
        old: Some(cm.clone()),
        new: Some(cm),
    }
}

fn lease(name: &str, labels: Value, holder: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ssh-fwd", "labels": labels},
           "spec": {"holderIdentity": holder}})
}

fn lease_write(name: &str, old: Option<Value>, new: Option<Value>) -> Write<'_> {
    Write {
        group: "coordination.k8s.io",
        resource: "leases",
        subresource: "",
        namespace: "ssh-fwd",
        name,
        old,
        new,
    }
}

#[test]
fn every_deploy_policy_compiles_and_is_bound() {
    let (pairs, unbound, dangling) = deploy().bound();
    assert!(pairs.len() >= 7, "{pairs:?}");
    assert!(
        unbound.is_empty() && dangling.is_empty(),
        "{unbound:?} {dangling:?}"
    );
}

#[test]
fn an_agent_writes_only_its_own_nodes_activity_config_map() {
    let p = deploy();
    let node1 = agent(Some("node1"));
    assert_eq!(config_map("ssh-fwd-activity-node1").by(&p, &node1), Ok(()));
    let other = config_map("ssh-fwd-activity-node2")
        .by(&p, &node1)
        .unwrap_err();
    assert_eq!(
        other,
        "configmaps \"ssh-fwd-activity-node2\" is forbidden: ValidatingAdmissionPolicy 'ssh-fwd-agent-activity' with binding 'ssh-fwd-agent-activity' denied request: the agent of node node1 may write only ConfigMaps ssh-fwd-activity-node1 and ssh-fwd-served-node1, not ssh-fwd-activity-node2"
    );
    assert!(config_map("ssh-fwd-config").by(&p, &node1).is_err());
    let unbound = config_map("ssh-fwd-activity-node1")
        .by(&p, &agent(None))
        .unwrap_err();
    assert!(unbound.contains("names no node"), "{unbound}");
    // Others are not this policy's business.
    assert_eq!(
        config_map("ssh-fwd-config").by(&p, &UserInfo::person("alice", &[])),
        Ok(())
    );
}

#[test]
fn an_agent_writes_only_announcement_leases_held_by_itself_or_nobody() {
    let p = deploy();
    let node1 = agent(Some("node1"));
    let announce = json!({"ssh-fwd.io/announce": "198.18.0.10"});
    let fresh = lease("ssh-ip-198.18.0.10", announce.clone(), "node1");
    assert_eq!(
        lease_write("ssh-ip-198.18.0.10", None, Some(fresh.clone())).by(&p, &node1),
        Ok(())
    );
    let released = lease("ssh-ip-198.18.0.10", announce.clone(), "");
    let renew = lease_write("ssh-ip-198.18.0.10", Some(fresh.clone()), Some(released));
    assert_eq!(renew.by(&p, &node1), Ok(()));
    let for_node2 = lease("ssh-ip-198.18.0.10", announce.clone(), "node2");
    let forged = lease_write("ssh-ip-198.18.0.10", Some(fresh), Some(for_node2));
    assert!(
        forged
            .by(&p, &node1)
            .unwrap_err()
            .contains("not name node2")
    );
    let leader = lease("ssh-fwd-controller", json!({}), "node1");
    let taken = lease_write("ssh-fwd-controller", Some(leader.clone()), Some(leader));
    assert!(taken.by(&p, &node1).unwrap_err().contains("leader Lease"));
    let reservation = lease(
        "ssh-port-198.18.0.10-9000",
        json!({"ssh-fwd.io/port-reservation": "198.18.0.10"}),
        "",
    );
    let squat = lease_write("ssh-port-198.18.0.10-9000", None, Some(reservation));
    assert!(squat.by(&p, &node1).is_err());
}

#[test]
fn an_agent_writes_only_its_own_nodes_lease_of_macs() {
    let p = deploy();
    let node1 = agent(Some("node1"));
    let labels = json!({"ssh-fwd.io/announce": "node"});
    let own = lease("ssh-fwd-announce-node-node1", labels.clone(), "node1");
    assert_eq!(
        lease_write("ssh-fwd-announce-node-node1", None, Some(own)).by(&p, &node1),
        Ok(())
    );
    // Another node's, even held by itself: the MACs there are node2's to
    // say, and the other agents give way to them.
    let theirs = lease("ssh-fwd-announce-node-node2", labels.clone(), "node2");
    let mine_now = lease("ssh-fwd-announce-node-node2", labels, "node1");
    let taken = lease_write("ssh-fwd-announce-node-node2", Some(theirs), Some(mine_now));
    assert!(
        taken
            .by(&p, &node1)
            .unwrap_err()
            .contains("only its own node Lease"),
    );
}

#[test]
fn the_controller_patches_only_its_own_pod_labels_and_annotations() {
    let p = deploy();
    let pod = json!({"metadata": {"name": "job", "namespace": "jobs",
                     "labels": {"app": "x"}, "annotations": {"note": "n"}},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let patched = |f: &dyn Fn(&mut Value)| {
        let mut new = pod.clone();
        f(&mut new);
        Write {
            group: "",
            resource: "pods",
            subresource: "",
            namespace: "jobs",
            name: "job",
            old: Some(pod.clone()),
            new: Some(new),
        }
        .by(&p, &controller())
    };
    assert_eq!(
        patched(&|p| {
            p["metadata"]["labels"]["ssh-fwd.io/service"] = json!("ssh-job");
            p["metadata"]["annotations"]["ssh-fwd.io/endpoint"] = json!("h:9000");
        }),
        Ok(())
    );
    assert!(patched(&|p| p["metadata"]["annotations"]["note"] = json!("changed")).is_err());
    assert!(patched(&|p| p["metadata"]["labels"]["evil"] = json!("1")).is_err());
    assert!(patched(&|p| p["spec"]["containers"][0]["image"] = json!("evil")).is_err());
    assert!(patched(&|p| p["metadata"]["labels"] = Value::Null).is_err());
}

fn our_service(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "jobs",
                        "labels": {"app.kubernetes.io/managed-by": "ssh-fwd-controller"},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "job", "uid": "u", "controller": true}]},
           "spec": {"type": "LoadBalancer", "loadBalancerClass": "ssh-fwd.io/ssh",
                    "selector": {"ssh-fwd.io/service": name}, "ports": [{"port": 9000}]}})
}

fn service_write<'a>(
    namespace: &'a str,
    subresource: &'a str,
    old: Option<Value>,
    new: Option<Value>,
) -> Write<'a> {
    Write {
        group: "",
        resource: "services",
        subresource,
        namespace,
        name: "ssh-job",
        old,
        new,
    }
}

#[test]
fn the_controller_writes_only_services_of_its_shape() {
    let p = deploy();
    let c = controller();
    let ours = our_service("ssh-job");
    assert_eq!(
        service_write("jobs", "", None, Some(ours.clone())).by(&p, &c),
        Ok(())
    );
    assert_eq!(
        service_write("jobs", "status", Some(ours.clone()), Some(ours.clone())).by(&p, &c),
        Ok(())
    );
    assert_eq!(
        service_write("jobs", "", Some(ours.clone()), None).by(&p, &c),
        Ok(())
    );
    let mut external = ours.clone();
    external["spec"] = json!({"type": "ClusterIP", "externalIPs": ["198.18.0.10"],
                              "selector": {"ssh-fwd.io/service": "ssh-job"}});
    assert_eq!(
        service_write("jobs", "", None, Some(external)).by(&p, &c),
        Ok(())
    );
    let dns = json!({"metadata": {"name": "kube-dns", "namespace": "kube-system"},
                     "spec": {"selector": {"k8s-app": "kube-dns"}}});
    let refused = service_write("kube-system", "", Some(dns.clone()), None)
        .by(&p, &c)
        .unwrap_err();
    assert!(refused.starts_with("services \"ssh-job\" is forbidden: ValidatingAdmissionPolicy 'ssh-fwd-controller-services'"), "{refused}");
    // A tenant's Service cannot be patched into shape, nor ours out of it.
    assert!(
        service_write("jobs", "", Some(dns), Some(ours.clone()))
            .by(&p, &c)
            .is_err()
    );
    let mut wide = ours.clone();
    wide["spec"]["selector"]["app"] = json!("other");
    assert!(
        service_write("jobs", "", Some(ours.clone()), Some(wide.clone()))
            .by(&p, &c)
            .is_err()
    );
    // One of ours that a tenant changed is put back, granted and deleted,
    // and so is one whose label the tenant took off but whose grant stays.
    assert_eq!(
        service_write("jobs", "", Some(wide.clone()), Some(ours.clone())).by(&p, &c),
        Ok(())
    );
    assert_eq!(
        service_write("jobs", "status", Some(wide.clone()), Some(wide.clone())).by(&p, &c),
        Ok(())
    );
    assert_eq!(
        service_write("jobs", "", Some(wide.clone()), None).by(&p, &c),
        Ok(())
    );
    let mut unlabelled = wide;
    unlabelled["metadata"]["labels"] = json!({});
    assert!(
        service_write("jobs", "", Some(unlabelled.clone()), Some(ours.clone()))
            .by(&p, &c)
            .is_err(),
        "neither label nor grant: not ours"
    );
    unlabelled["status"] =
        json!({"conditions": [{"type": "ssh-fwd.io/Granted", "status": "True"}]});
    assert_eq!(
        service_write("jobs", "", Some(unlabelled), Some(ours)).by(&p, &c),
        Ok(())
    );
    // A tenant's Service owned by a pod but not named as ours is not ours.
    let mut theirs = our_service("web");
    theirs["spec"]["selector"] = json!({"app": "web"});
    let mut into_shape = our_service("web");
    into_shape["metadata"]["name"] = json!("web");
    assert!(
        service_write("jobs", "", Some(theirs), Some(into_shape))
            .by(&p, &c)
            .is_err()
    );
}

#[test]
fn the_controller_writes_leader_and_reservation_leases_only() {
    let p = deploy();
    let c = controller();
    let leader = lease("ssh-fwd-controller", json!({}), "a");
    assert_eq!(
        lease_write("ssh-fwd-controller", Some(leader.clone()), Some(leader)).by(&p, &c),
        Ok(())
    );
    let reservation = lease(
        "ssh-port-x-9000",
        json!({"ssh-fwd.io/port-reservation": "x"}),
        "",
    );
    assert_eq!(
        lease_write("ssh-port-x-9000", None, Some(reservation.clone())).by(&p, &c),
        Ok(())
    );
    assert_eq!(
        lease_write("ssh-port-x-9000", Some(reservation), None).by(&p, &c),
        Ok(())
    );
    let announce = lease("ssh-ip-x", json!({"ssh-fwd.io/announce": "x"}), "node1");
    assert!(
        lease_write("ssh-ip-x", Some(announce.clone()), Some(announce))
            .by(&p, &c)
            .is_err()
    );
    let other = lease("kube-scheduler", json!({}), "x");
    assert!(
        lease_write("kube-scheduler", Some(other.clone()), Some(other))
            .by(&p, &c)
            .is_err()
    );
}

#[test]
fn the_controller_changes_only_the_ca_bundle_of_its_webhook() {
    let p = deploy();
    let docs = crate::fake_api::cluster::deploy_base().unwrap();
    let config = docs
        .into_iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    let write = |f: &dyn Fn(&mut Value)| {
        let mut new = config.clone();
        f(&mut new);
        Write {
            group: "admissionregistration.k8s.io",
            resource: "mutatingwebhookconfigurations",
            subresource: "",
            namespace: "",
            name: "ssh-fwd",
            old: Some(config.clone()),
            new: Some(new),
        }
        .by(&p, &controller())
    };
    assert_eq!(
        write(&|c| c["webhooks"][0]["clientConfig"]["caBundle"] = json!("Q0E=")),
        Ok(())
    );
    assert!(write(&|c| c["webhooks"][0]["rules"][0]["operations"] = json!(["*"])).is_err());
    assert!(
        write(&|c| c["webhooks"][0]["clientConfig"] = json!({"url": "https://evil.example/"}))
            .is_err()
    );
    assert!(write(&|c| c["webhooks"][0]["failurePolicy"] = json!("Fail")).is_err());
}

#[test]
fn a_policy_that_does_not_compile_fails_loading_with_its_name() {
    let mut p = Policies::default();
    let bad = json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "broken"},
                     "spec": {"validations": [{"expression": "object.metadata.name =="}]}});
    let error = p.add(&bad).unwrap_err();
    assert!(
        error.starts_with("ValidatingAdmissionPolicy broken: validations[0]"),
        "{error}"
    );
}

#[test]
fn a_failing_validation_without_a_reason_is_invalid_and_an_error_denies_under_fail() {
    let mut p = Policies::default();
    p.add(
        &json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                 "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "validations": [{"expression": "object.data.x == 'y'"}]}}),
    )
    .unwrap();
    p.add(
        &json!({"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"]}}),
    )
    .unwrap();
    let user = UserInfo::person("alice", &[]);
    let write = |data: Value| {
        let cm = json!({"metadata": {"name": "c"}, "data": data});
        Write {
            group: "",
            resource: "configmaps",
            subresource: "",
            namespace: "ns",
            name: "c",
            old: None,
            new: Some(cm),
        }
    };
    assert_eq!(write(json!({"x": "y"})).by(&p, &user), Ok(()));
    let target_old = None;
    let cm = json!({"metadata": {"name": "c"}, "data": {"x": "z"}});
    let t = Target {
        group: "",
        resource: "configmaps",
        subresource: "",
        operation: "CREATE",
        namespace: "ns",
        name: "c",
        object: Some(&cm),
        old: target_old,
    };
    let e = p.admit(&t, &user).unwrap_err();
    assert_eq!((e.code, e.reason), (422, "Invalid"));
    assert!(
        e.message
            .ends_with("denied request: failed expression: object.data.x == 'y'"),
        "{}",
        e.message
    );
    let error = write(json!({})).by(&p, &user).unwrap_err();
    assert!(error.contains("resulted in error"), "{error}");
}
