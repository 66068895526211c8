//! The grace of a reservation whose pod never came into existence, across
//! a change of leader and a restart: it is counted from the reservation's
//! making, not from when the current leader first saw it.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{
    failover::lease_holder,
    webhook::{
        free_port, patched, post, reservation_count, review, serving, told_port, webhook_args,
        write_pair,
    },
    *,
};
use crate::controller::{
    reservation::{self, Holder},
    webhook::mutate::tests::job_pod,
};

/// A replica's webhook arguments with this reservation grace.
fn with_grace(port: u16, certs: &std::path::Path, grace: &str) -> Vec<String> {
    let mut args = webhook_args(port, certs);
    let at = args
        .iter()
        .position(|a| a == "--reservation-grace")
        .unwrap();
    args[at + 1] = grace.into();
    args
}

#[tokio::test]
async fn a_standby_that_takes_over_counts_the_grace_from_the_reservations_making_not_its_term() {
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let grace = Duration::from_secs(4);
    let ports = [free_port(), free_port()];
    let args_a = with_grace(ports[0], certs.path(), "4s");
    let a = bed.controller("a", &args_a.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("a leads", || lease_holder(&bed).as_deref() == Some("a")).await;
    let args_b = with_grace(ports[1], certs.path(), "4s");
    let b = bed.controller("b", &args_b.iter().map(String::as_str).collect::<Vec<_>>());
    serving(ports[0], &ca).await;
    serving(ports[1], &ca).await;
    // Admitted by the standby's webhook; the pod is never created (refused
    // by a later admission step).
    let made = tokio::time::Instant::now();
    let pod = job_pod();
    let (_, answer) = post(ports[1], &ca, &review("u-1", &pod)).await.unwrap();
    assert!(told_port(&patched(&answer, &pod)).is_some(), "{answer}");
    assert_eq!(reservation_count(&bed), 1);
    // The leader dies shortly before the grace ends.
    tokio::time::sleep_until(made + grace - Duration::from_millis(500)).await;
    assert_eq!(reservation_count(&bed), 1, "kept within its grace");
    a.abort();
    // The standby takes over once the 2 s Lease has expired, and releases
    // it at once: it has watched the reservation since it was made.
    let bound = grace + Duration::from_secs(2) + Duration::from_millis(1500);
    while reservation_count(&bed) != 0 {
        assert!(
            made.elapsed() < bound + Duration::from_secs(6),
            "never released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let released = made.elapsed();
    assert!(
        released <= bound,
        "released {released:?} after it was made, past the grace ({grace:?}) and the takeover"
    );
    assert_eq!(lease_holder(&bed).as_deref(), Some("b"));
    bed.assert_requests_listed();
    b.abort();
}

/// A reservation made `age` ago for a pod that never came, as a restarted
/// controller finds it.
fn orphan(bed: &Bed, port: u16, age: Duration) {
    let holder = Holder::Admitted {
        namespace: "jobs".into(),
        name: "job-".into(),
        token: format!("token-{port}"),
    };
    let mut lease = serde_json::to_value(reservation::build(
        "198.18.0.10".parse().unwrap(),
        port,
        &holder,
    ))
    .unwrap();
    let made = Timestamp::now() - SignedDuration::try_from(age).unwrap();
    lease["metadata"]["namespace"] = json!("ssh-fwd");
    lease["metadata"]["creationTimestamp"] = json!(made.to_string());
    bed.api.apply(Kind::Lease, lease);
}

#[tokio::test]
async fn a_restarted_controller_releases_an_orphan_made_long_ago_without_waiting_the_grace_again() {
    let bed = Bed::new();
    // Made 150 s ago, while no controller ran (or one crash-looped): past
    // any grace even with the clocks 20 s apart. Made 5 s ago: its pod may
    // still be on its way.
    orphan(&bed, 9050, Duration::from_secs(150));
    orphan(&bed, 9051, Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let controller = bed.controller("a", &["--reservation-grace", "20s"]);
    let gone = |port| {
        let name = reservation::name("198.18.0.10".parse().unwrap(), port);
        bed.api.get(Kind::Lease, "ssh-fwd", &name).is_none()
    };
    while !gone(9050) {
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "the old orphan is kept as if it had just been made"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!gone(9051), "the young one keeps its grace");
    bed.assert_requests_listed();
    controller.abort();
}
