//! Least privilege as the API server enforces it (issue 43, findings 2 and
//! 3): the fake API server authenticates each client's token, authorizes
//! with deploy/base's RBAC and Kubernetes' bootstrap roles, and admits with
//! deploy/base's ValidatingAdmissionPolicies. One node's agent may write
//! only its own node's activity ConfigMap, the announcement Leases (held
//! by itself or nobody) and the cross-node key; the controller only its
//! own ssh-fwd.io/ pod metadata, Services of its own shape, its leader and
//! reservation Leases, and its webhook's caBundle; a tenant with `edit`
//! neither a Service's status, nor EndpointSlices, nor anything in
//! `ssh-fwd`. `least_privilege/running.rs` runs the real agent and
//! controller with their own tokens against that server, and shows the
//! controller ignoring a report from the future.
//!
//! These tests talk HTTP to the fake themselves, with each party's token,
//! so every refusal is checked as the API server words it.

mod controller;
mod running;

use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::fake_api::{FakeApi, Kind};

/// One HTTP/1.1 request with `token`; the status code and the JSON answer.
fn call(
    api: &FakeApi,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    api.call(token, method, path, body)
}

/// Expects a refusal of `code`; returns its message.
fn refused(answer: (u16, Value), code: u16) -> String {
    let (got, status) = answer;
    assert_eq!(got, code, "expected {code}, got {got}: {status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], code, "{status}");
    status["message"].as_str().unwrap().to_owned()
}

/// Expects the write to be taken.
fn taken(answer: (u16, Value)) {
    let (code, body) = answer;
    assert!((200..300).contains(&code), "refused ({code}): {body}");
}

/// Expects a denial by the policy `policy`.
fn denied_by(answer: (u16, Value), policy: &str) -> String {
    let message = refused(answer, 403);
    assert!(
        message.contains(&format!(
            "ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request"
        )),
        "{message}"
    );
    message
}

const NS: &str = "/api/v1/namespaces/ssh-fwd";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ssh-fwd/leases";

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "ssh-fwd",
                        "labels": {vocabulary::ACTIVITY: vocabulary::ACTIVITY_FROM}},
           "data": {}})
}

fn lease(name: &str, label: Option<&str>, holder: &str) -> Value {
    let labels = label.map_or(json!({}), |l| json!({l: "198-18-0-10"}));
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": "ssh-fwd", "labels": labels},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
}

/// A lease as stored, with `holder`: the body of an update.
fn holding(api: &FakeApi, name: &str, holder: &str) -> Value {
    let mut lease = api.get(Kind::Lease, "ssh-fwd", name).unwrap();
    lease["spec"]["holderIdentity"] = json!(holder);
    lease
}

/// A server enforcing deploy/ with ssh-fwd's objects as a running cluster
/// has them.
fn cluster() -> FakeApi {
    let api = FakeApi::start_on_loopback().unwrap();
    api.enforce_deploy();
    for doc in ssh_fwd_tests::fake_api::deploy_base().unwrap() {
        let kind = match doc["kind"].as_str().unwrap() {
            "ConfigMap" => Kind::ConfigMap,
            "MutatingWebhookConfiguration" => Kind::MutatingWebhookConfiguration,
            _ => continue,
        };
        api.apply(kind, doc);
    }
    for node in ["node1", "node2"] {
        api.apply(
            Kind::ConfigMap,
            config_map(&format!("ssh-fwd-activity-{node}")),
        );
    }
    api.apply(
        Kind::Lease,
        lease("ssh-fwd-controller", None, "controller-a"),
    );
    let reservation = "ssh-port-198-18-0-10-9000";
    api.apply(
        Kind::Lease,
        lease(reservation, Some(vocabulary::PORT_RESERVATION), ""),
    );
    let announce = "ssh-fwd-announce-198-18-0-10";
    api.apply(
        Kind::Lease,
        lease(announce, Some(vocabulary::ANNOUNCE), "node2"),
    );
    api
}

#[test]
fn one_agents_token_writes_its_own_nodes_objects_and_nothing_of_another_or_the_control_plane() {
    let api = cluster();
    let agent = api.service_account_token("ssh-fwd", "ssh-fwd-agent", Some("node1"));
    let report = json!({"data": {"198.18.0.10_9000": r#"{"lastActivity":"2099-01-01T00:00:00Z","openConnections":9}"#}});
    // Another node's activity, the settings every job is told, the
    // leader's Lease, a port reservation, another Secret: refused.
    let at = |name: &str| format!("{NS}/configmaps/{name}");
    let other = call(
        &api,
        &agent,
        "PATCH",
        &at("ssh-fwd-activity-node2"),
        Some(&report),
    );
    let message = denied_by(other, "ssh-fwd-agent-activity");
    assert!(
        message.starts_with("configmaps \"ssh-fwd-activity-node2\" is forbidden: "),
        "{message}"
    );
    let hostname = json!({"data": {"ssh-hostname": "attacker.example"}});
    denied_by(
        call(
            &api,
            &agent,
            "PATCH",
            &at("ssh-fwd-config"),
            Some(&hostname),
        ),
        "ssh-fwd-agent-activity",
    );
    let fresh = config_map("ssh-fwd-activity-node3");
    denied_by(
        call(
            &api,
            &agent,
            "POST",
            &format!("{NS}/configmaps"),
            Some(&fresh),
        ),
        "ssh-fwd-agent-activity",
    );
    // Another node's served report: the controller would believe that
    // node maps a port it does not.
    let forged = config_map("ssh-fwd-served-node2");
    denied_by(
        call(
            &api,
            &agent,
            "POST",
            &format!("{NS}/configmaps"),
            Some(&forged),
        ),
        "ssh-fwd-agent-activity",
    );
    let leader = holding(&api, "ssh-fwd-controller", "node1");
    let leader_at = format!("{LEASES}/ssh-fwd-controller");
    denied_by(
        call(&api, &agent, "PUT", &leader_at, Some(&leader)),
        "ssh-fwd-agent-leases",
    );
    let reservation = holding(&api, "ssh-port-198-18-0-10-9000", "node1");
    let reservation_at = format!("{LEASES}/ssh-port-198-18-0-10-9000");
    denied_by(
        call(&api, &agent, "PUT", &reservation_at, Some(&reservation)),
        "ssh-fwd-agent-leases",
    );
    let secret = json!({"metadata": {"name": "loot"}, "data": {}});
    denied_by(
        call(
            &api,
            &agent,
            "POST",
            &format!("{NS}/secrets"),
            Some(&secret),
        ),
        "ssh-fwd-agent-secrets",
    );
    // An announcement Lease held for another node: refused too.
    let announce_at = format!("{LEASES}/ssh-fwd-announce-198-18-0-10");
    let for_node2 = holding(&api, "ssh-fwd-announce-198-18-0-10", "node2");
    let message = denied_by(
        call(&api, &agent, "PUT", &announce_at, Some(&for_node2)),
        "ssh-fwd-agent-leases",
    );
    assert!(message.contains("not name node2"), "{message}");
    assert_eq!(
        api.get(Kind::ConfigMap, "ssh-fwd", "ssh-fwd-config")
            .unwrap()["data"]["ssh-hostname"],
        "ssh.example.org"
    );

    // Its own: taken.
    let own = json!({"data": {"198.18.0.10_9000": r#"{"openConnections":1}"#}});
    taken(call(
        &api,
        &agent,
        "PATCH",
        &at("ssh-fwd-activity-node1"),
        Some(&own),
    ));
    taken(call(
        &api,
        &agent,
        "POST",
        &format!("{NS}/configmaps"),
        Some(&config_map("ssh-fwd-served-node1")),
    ));
    taken(call(
        &api,
        &agent,
        "PUT",
        &announce_at,
        Some(&holding(&api, "ssh-fwd-announce-198-18-0-10", "node1")),
    ));
    taken(call(
        &api,
        &agent,
        "PUT",
        &announce_at,
        Some(&holding(&api, "ssh-fwd-announce-198-18-0-10", "")),
    ));
    let key = json!({"metadata": {"name": "ssh-fwd-cross-node-key"}, "data": {}});
    taken(call(
        &api,
        &agent,
        "POST",
        &format!("{NS}/secrets"),
        Some(&key),
    ));
}

#[test]
fn a_token_that_names_no_node_or_that_the_server_did_not_issue_gets_nowhere() {
    let api = cluster();
    let unbound = api.service_account_token("ssh-fwd", "ssh-fwd-agent", None);
    let own = json!({"data": {}});
    let path = format!("{NS}/configmaps/ssh-fwd-activity-node1");
    let message = denied_by(
        call(&api, &unbound, "PATCH", &path, Some(&own)),
        "ssh-fwd-agent-activity",
    );
    assert!(message.contains("names no node"), "{message}");
    let message = refused(
        call(&api, "forged", "GET", &format!("{NS}/configmaps"), None),
        401,
    );
    assert_eq!(message, "Unauthorized");
}
