//! Restart and leader election: ports and announcements survive a restart,
//! and only the Lease holder watches or writes.

use super::*;

fn lease_holder(bed: &Bed) -> Option<String> {
    let lease = bed.api.get(Kind::Lease, "ssh-fwd", "ssh-fwd-controller")?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn a_restarted_controller_keeps_ports_and_does_not_announce_twice() {
    let bed = Bed::new();
    let first = bed.controller("a", &["--port-range", "9000-9001"]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let port = bed.port_of("job-1").unwrap();
    first.abort();
    let _ = first.await;
    let before_restart = bed.api.requests().len();
    let second = bed.controller("a", &["--port-range", "9000-9001"]);
    bed.pod("job-2");
    bed.annotated("job-2").await;
    // The only other port in the range, whatever the random pick.
    assert_eq!(
        bed.port_of("job-2").unwrap(),
        if port == 9000 { 9001 } else { 9000 }
    );
    assert_eq!(bed.port_of("job-1"), Some(port));
    assert_eq!(bed.notes("job-1", "SSHReady", "Normal").len(), 1);
    assert_eq!(bed.our_services().len(), 2);
    // Kept because it was never touched, not deleted and re-created.
    let deletes: Vec<Request> = bed.api.requests()[before_restart..]
        .iter()
        .filter(|r| r.resource == "services" && r.verb == "delete")
        .cloned()
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    bed.assert_requests_listed();
    second.abort();
}

#[tokio::test]
async fn only_the_leader_acts_and_a_standby_takes_over_when_it_dies() {
    let bed = Bed::new();
    let a = bed.controller("a", &[]);
    eventually("a leads", || lease_holder(&bed).as_deref() == Some("a")).await;
    let b = bed.controller("b", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    eventually("b has read the Lease", || !bed.requests_of("b").is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(bed.our_services().len(), 1);
    assert_eq!(bed.notes("job-1", "SSHReady", "Normal").len(), 1);
    // The standby only reads the Lease: it watches nothing and writes
    // nothing while another replica leads (besides having the API server
    // check its --selector once at start-up).
    let standby = bed.requests_of("b");
    let checks = standby.iter().filter(|r| r.resource == "services").count();
    assert!(
        checks == 1
            && standby
                .iter()
                .all(|r| r.resource == "leases" && r.verb == "get"
                    || r.resource == "services" && r.verb == "list"),
        "{standby:?}"
    );
    a.abort();
    eventually("b leads", || lease_holder(&bed).as_deref() == Some("b")).await;
    bed.pod("job-2");
    eventually("job-2 is annotated by b", || {
        bed.endpoint("job-2").is_some()
    })
    .await;
    assert_ne!(bed.port_of("job-1"), bed.port_of("job-2"));
    let writes_by_b = bed
        .requests_of("b")
        .iter()
        .filter(|r| r.resource == "services" && r.verb == "create")
        .count();
    assert_eq!(writes_by_b, 1, "b created job-2's Service");
    bed.assert_requests_listed();
    b.abort();
}

#[tokio::test]
async fn a_leader_whose_api_stalls_stops_writing_before_its_lease_could_expire() {
    let bed = Bed::new();
    let a = bed.controller("a", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let lease_writes = |bed: &Bed| {
        bed.requests_of("a")
            .into_iter()
            .filter(|r| r.resource == "leases" && matches!(r.verb, "create" | "update"))
            .count()
    };
    let before = lease_writes(&bed);
    eventually("a renews", || lease_writes(&bed) > before).await;
    // The connection stalls mid-term, with work waiting: a pod the leader
    // will only hear of once the API answers again.
    bed.api.stall();
    let stalled = std::time::Instant::now();
    bed.pod("job-2");
    tokio::time::sleep(Duration::from_secs(4)).await; // twice the Lease duration
    bed.api.resume();
    let resumed = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = bed.requests_of("a");
    let renewed = requests
        .iter()
        .filter(|r| r.resource == "leases" && matches!(r.verb, "create" | "update"))
        .filter(|r| r.at < stalled)
        .map(|r| r.at)
        .max()
        .expect("the leader renewed before the stall");
    // A standby seeing that renewal would take over 2 s later.
    let expired = renewed + Duration::from_secs(2);
    let writes = || {
        requests
            .iter()
            .filter(|r| !matches!(r.verb, "get" | "list" | "watch"))
    };
    let late: Vec<&Request> = writes()
        .filter(|r| r.at >= expired && r.at < resumed)
        .collect();
    assert!(
        late.is_empty(),
        "writes after the Lease could have expired: {late:?}"
    );
    // Once the API answers, the first write is the Lease taken anew.
    let first = writes().filter(|r| r.at >= resumed).min_by_key(|r| r.at);
    assert_eq!(
        first.map(|r| r.resource.as_str()),
        Some("leases"),
        "{first:?}"
    );
    // It stopped leading, not running: with the API back and nobody else
    // standing, it takes the Lease again and serves job-2.
    bed.annotated("job-2").await;
    assert!(!a.is_finished(), "the replica keeps running");
    assert_eq!(lease_holder(&bed).as_deref(), Some("a"));
    a.abort();
}

#[tokio::test]
async fn a_replica_that_loses_its_lease_goes_on_admitting() {
    use super::webhook::{free_port, patched, post, review, write_pair};
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let dir = certs.path().display().to_string();
    let a = bed.controller(
        "a",
        &[
            "--webhook-addr",
            &addr,
            "--webhook-cert-dir",
            &dir,
            "--image",
            "ssh-fwd:test",
        ],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    // The API stalls past the Lease's term: the leader steps down.
    bed.api.stall();
    tokio::time::sleep(Duration::from_secs(4)).await;
    bed.api.resume();
    let pod = crate::controller::webhook::mutate::tests::job_pod();
    let (status, answer) = post(port, &ca, &review("after-the-stall", &pod))
        .await
        .expect("the webhook still serves");
    assert_eq!(status, 200, "{answer}");
    let admitted = patched(&answer, &pod);
    assert!(
        admitted["metadata"]["annotations"]["ssh-fwd.io/endpoint"].is_string(),
        "a port, once the API answers again: {answer}"
    );
    assert!(!a.is_finished());
    a.abort();
}
