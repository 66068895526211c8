//! Restart and leader election: ports and announcements survive a restart,
//! and only the Lease holder watches or writes.

use super::*;

/// Who holds the controller's Lease now.
pub(super) fn lease_holder(bed: &Bed) -> Option<String> {
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
    assert_eq!(
        bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")
            .len(),
        1
    );
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
    assert_eq!(
        bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")
            .len(),
        1
    );
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

/// A leader's own connection stalls with a write in flight (its Service
/// for job-2), and a standby is waiting. The fake records each request as
/// it arrives and notes when the client gives it up, and carries out after
/// the stall whatever its client still waits for: so a leader that kept
/// waiting would have its write land after the standby took over.
#[tokio::test]
async fn a_leader_whose_api_stalls_gives_up_its_calls_before_a_standby_may_take_over() {
    let bed = Bed::new();
    let a = bed.controller("a", &[]);
    eventually("a leads", || lease_holder(&bed).as_deref() == Some("a")).await;
    let b = bed.controller("b", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    eventually("b has read the Lease", || !bed.requests_of("b").is_empty()).await;
    bed.api.stall_user_at("a", Kind::Service, "create");
    let stalled = std::time::Instant::now();
    bed.pod("job-2");
    eventually("b leads", || lease_holder(&bed).as_deref() == Some("b")).await;
    // Long enough for a call a still waited for to be carried out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    bed.api.resume();
    let resumed = std::time::Instant::now();
    bed.annotated("job-2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = bed.api.requests();
    let lease_write =
        |r: &&Request| r.resource == "leases" && matches!(r.verb, "create" | "update");
    let in_flight = requests
        .iter()
        .filter(|r| r.user == "a" && r.resource == "services" && r.verb == "create")
        .find(|r| r.at >= stalled)
        .expect("a sent job-2's Service");
    // a's term ran from its last Lease write before the stall (sent no
    // later than it arrived): two thirds of the 2 s duration.
    let renewed = requests
        .iter()
        .filter(|r| r.user == "a" && r.handled.is_some() && r.at < in_flight.at)
        .filter(lease_write)
        .map(|r| r.at)
        .max()
        .expect("a renewed before the stall");
    let deadline = renewed + Duration::from_millis(1333);
    let given_up = in_flight.given_up.expect("a gave up its stalled write");
    assert!(
        given_up <= deadline + Duration::from_millis(250),
        "a gave up its write {:?} after its renew deadline",
        given_up - deadline
    );
    assert_eq!(in_flight.handled, None, "{in_flight:?}");
    // Nothing of a's term is carried out once b has taken the Lease.
    let taken = requests
        .iter()
        .filter(|r| r.user == "b")
        .filter(lease_write)
        .filter_map(|r| r.handled)
        .min()
        .expect("b wrote the Lease");
    let late: Vec<&Request> = requests
        .iter()
        .filter(|r| r.user == "a" && !matches!(r.verb, "get" | "list" | "watch"))
        .filter(|r| r.handled.is_some_and(|handled| handled >= taken))
        .collect();
    assert!(late.is_empty(), "a's writes after b took over: {late:?}");
    // Nor did a write at all once its Lease could have expired.
    let expired = renewed + Duration::from_secs(2);
    let after: Vec<&Request> = requests
        .iter()
        .filter(|r| r.user == "a" && !matches!(r.verb, "get" | "list" | "watch"))
        .filter(|r| r.at >= expired && r.at < resumed)
        .collect();
    assert!(
        after.is_empty(),
        "writes after a's Lease could have expired: {after:?}"
    );
    // a stopped leading, not running: it stands by behind b, which serves
    // job-2.
    assert!(!a.is_finished(), "the replica keeps running");
    assert_eq!(lease_holder(&bed).as_deref(), Some("b"));
    bed.assert_requests_listed();
    a.abort();
    b.abort();
}

/// One refused renewal (a 500, a 429) is retried at once, well within the
/// term: the leader neither steps down nor relists.
#[tokio::test]
async fn a_leader_whose_renewal_is_refused_once_retries_and_keeps_leading() {
    let bed = Bed::new();
    let a = bed.controller("a", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let lists = |bed: &Bed| {
        bed.requests_of("a")
            .iter()
            .filter(|r| r.resource == "pods" && r.verb == "list")
            .count()
    };
    let before = lists(&bed);
    bed.api.fail_updates(Kind::Lease, &[500]);
    eventually("the renewal is refused", || {
        bed.api.failures_left(Kind::Lease, "update") == 0
    })
    .await;
    let refused = std::time::Instant::now();
    // A renewal carried out after the term the refused one would have
    // ended (two thirds of the 2 s Lease): a kept its term by retrying.
    eventually("a renews past the end of its term", || {
        bed.requests_of("a").iter().any(|r| {
            r.resource == "leases"
                && r.verb == "update"
                && r.handled.is_some()
                && r.at > refused + Duration::from_millis(1400)
        })
    })
    .await;
    assert_eq!(lists(&bed), before, "a relisted: it stopped leading");
    bed.pod("job-2");
    bed.annotated("job-2").await;
    assert_eq!(lists(&bed), before, "a relisted: it stopped leading");
    assert_eq!(lease_holder(&bed).as_deref(), Some("a"));
    bed.assert_requests_listed();
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
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
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
            "--metrics-addr",
            &metrics_addr,
        ],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let leader = "ssh_fwd_controller_leader";
    metric_until(metrics_port, leader, "a leads", |v| v == 1.0).await;
    // The API stalls past the Lease's term: the leader steps down (its
    // renewals go unanswered), and the process stays up.
    bed.api.stall();
    metric_until(metrics_port, leader, "a stepped down", |v| v == 0.0).await;
    assert!(!a.is_finished(), "the replica keeps running");
    bed.api.resume();
    let pod = crate::controller::webhook::mutate::tests::job_pod();
    let (status, answer) = post(port, &ca, &review("after-the-stall", &pod))
        .await
        .expect("the webhook still serves");
    assert_eq!(status, 200, "{answer}");
    let admitted = patched(&answer, &pod);
    assert!(
        admitted["metadata"]["annotations"][vocabulary::ENDPOINT].is_string(),
        "a port, once the API answers again: {answer}"
    );
    assert!(!a.is_finished());
    a.abort();
}
