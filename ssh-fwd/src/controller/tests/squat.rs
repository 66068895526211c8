//! Admission cannot be used to squat ports: a pod that copies another's
//! reservation token neither takes nor holds its port.

use super::*;
use crate::controller::reservation::{self, Holder};

/// A pod in namespace jobs carrying `token` and told `port`, made at
/// `created` with `uid` (as the API server would have made it).
fn carrier(name: &str, uid: &str, created: &str, token: &str, port: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "jobs", "uid": uid,
                        "creationTimestamp": created,
                        "labels": {vocabulary::SSH: "enabled"},
                        "annotations": {vocabulary::RESERVATION: token,
                                        vocabulary::ENDPOINT: format!("ssh.example.org:{port}")}},
           "spec": {"containers": [{"name": "main", "image": "sshd"}]},
           "status": {"phase": "Running", "podIP": "10.244.0.5"}})
}

#[tokio::test]
async fn a_pod_copying_another_pods_token_neither_takes_nor_holds_its_port() {
    let bed = Bed::new();
    let ip = "198.18.0.10".parse().unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let holder = Holder::Admitted {
        namespace: "jobs".into(),
        name: "job-".into(),
        token: token.into(),
    };
    let mut lease = serde_json::to_value(reservation::build(ip, 9042, &holder)).unwrap();
    lease["metadata"]["namespace"] = json!("ssh-fwd");
    bed.api.apply(Kind::Lease, lease);
    // The victim was admitted and created; a tenant of its namespace read
    // its annotations and made a pod with them a moment later, whose uid
    // happens to sort first.
    bed.api.apply(
        Kind::Pod,
        carrier("victim", "u-victim", "2026-01-01T00:00:00Z", token, 9042),
    );
    bed.api.apply(
        Kind::Pod,
        carrier("copier", "u-copier", "2026-01-01T00:00:01Z", token, 9042),
    );
    let controller = bed.controller("a", &["--port-range", "9000-9099"]);
    let service_port = |pod: &str| {
        let svc = bed.api.get(Kind::Service, "jobs", &format!("ssh-{pod}"))?;
        svc["spec"]["ports"][0]["port"].as_u64()
    };
    eventually("both pods have their Service", || {
        service_port("victim").is_some() && service_port("copier").is_some()
    })
    .await;
    assert_eq!(
        (
            service_port("victim"),
            service_port("copier").map(|p| p == 9042)
        ),
        (Some(9042), Some(false)),
        "the oldest pod carrying the token gets its port; the copier another"
    );
    let name = reservation::name(ip, 9042);
    eventually("the reservation is bound to the victim's uid", || {
        bed.api
            .get(Kind::Lease, "ssh-fwd", &name)
            .is_some_and(|l| l["metadata"]["annotations"][vocabulary::POD_UID] == "u-victim")
    })
    .await;
    // The victim ends; the copier, still carrying the token, does not
    // keep the port reserved, nor move onto it.
    let copier_port = service_port("copier");
    bed.api.delete(Kind::Pod, "jobs", "victim");
    eventually("the victim's reservation is released", || {
        bed.api.get(Kind::Lease, "ssh-fwd", &name).is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(service_port("copier"), copier_port);
    let ours: Vec<u64> = (bed.our_services().iter())
        .filter_map(|s| s["spec"]["ports"][0]["port"].as_u64())
        .collect();
    assert_eq!(ours, copier_port.into_iter().collect::<Vec<_>>());
    bed.assert_requests_listed();
    controller.abort();
}
