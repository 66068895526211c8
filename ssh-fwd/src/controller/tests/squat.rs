//! Admission cannot be used to squat ports: a flood of forged
//! AdmissionReviews holds at most the provisional cap, each for the lapse
//! only, and a real pod still gets its port; a pod that copies another's
//! reservation token neither takes nor holds its port.
//!
//! The flood comes over real TLS connections from this process. The
//! webhook does not look at where a review comes from (only a
//! NetworkPolicy or a client certificate can), so sending it from a pod's
//! network namespace would add nothing but set-up.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use super::{
    webhook::{
        Connection, create_pod, free_port, patched, post, reservation_count, review, serving,
        told_port, trusting, write_pair,
    },
    *,
};
use crate::controller::{
    reservation::{self, Holder},
    webhook::mutate::tests::job_pod,
};

/// The provisional cap of a controller with the default flags and a range
/// of 200 ports: `--provisional-cap-total` (256) is held to half the
/// range, so that a flood leaves the other half to the pods the leader
/// serves.
const CAP: usize = 100;

/// A review of a labelled pod in `namespace` that will never be created:
/// anyone who can reach the webhook can send one, naming any namespace.
fn forged(uid: &str, namespace: &str) -> Value {
    let mut pod = job_pod();
    pod["metadata"]["namespace"] = json!(namespace);
    pod["metadata"]["generateName"] = json!("forged-");
    let mut body = review(uid, &pod);
    body["request"]["namespace"] = json!(namespace);
    body
}

/// Whether a Lease is a reservation made at admission that no pod was
/// bound to yet.
fn is_provisional(lease: &Value) -> bool {
    let annotations = &lease["metadata"]["annotations"];
    lease["metadata"]["labels"][vocabulary::PORT_RESERVATION] == "198.18.0.10"
        && annotations[vocabulary::TOKEN].is_string()
        && annotations[vocabulary::POD_UID].is_null()
}

/// The most provisional reservations held at once so far, from every
/// change the API server made to Leases (not a sample).
fn most_provisional_held(bed: &Bed) -> usize {
    let (changes, _) = bed.api.changes_after(Kind::Lease, 0);
    let mut held = BTreeSet::new();
    let mut most = 0;
    for change in changes {
        let name = |l: &Value| l["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Some(old) = &change.old {
            held.remove(&name(old));
        }
        if let Some(new) = change.new.as_deref().filter(|l| is_provisional(l)) {
            held.insert(name(new));
        }
        most = most.max(held.len());
    }
    most
}

fn provisional_now(bed: &Bed) -> usize {
    bed.api.count(Kind::Lease, is_provisional)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_forged_reviews_hold_at_most_the_cap_and_a_real_pod_gets_its_port_in_10_s() {
    flood(1).await;
}

/// Each replica counts the others' reservations once its watch shows
/// them: for that delay, two may hold up to twice the cap between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_a_flood_holds_at_most_twice_the_cap_and_a_real_pod_gets_its_port() {
    flood(2).await;
}

/// 300 forged reviews to `replicas` controller replicas, taking turns;
/// once 250 are answered, a real pod is admitted and created.
async fn flood(replicas: usize) {
    let bed = Arc::new(Bed::new());
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let dir = certs.path().display().to_string();
    let ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
    let mut controllers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let addr = format!("127.0.0.1:{port}");
        // The production grace, caps and Lease (a 2 s Lease may change
        // hands on a loaded machine, and each new term costs seconds):
        // only the range is small, 200 ports for 300 reviews.
        let argv = [
            "--webhook-addr",
            &addr,
            "--webhook-cert-dir",
            &dir,
            "--image",
            "ssh-fwd:test",
            "--port-range",
            "9000-9199",
            "--lease-duration",
            "15s",
        ];
        controllers.push(bed.controller(&format!("r{i}"), &argv));
        serving(*port, &ca).await;
    }
    // 300 reviews over 20 connections, a third naming the real pod's
    // namespace, the rest spread over 40 others.
    let answered = Arc::new(AtomicUsize::new(0));
    let config = trusting(&ca).unwrap();
    let flood: Vec<_> = (0..20)
        .map(|c| {
            let (config, answered) = (config.clone(), answered.clone());
            let port = ports[c % replicas];
            tokio::spawn(async move {
                let mut connection = Connection::open(port, "localhost", config).await.unwrap();
                for i in 0..15 {
                    let n = c * 15 + i;
                    let namespace = match n % 3 {
                        0 => "jobs".to_owned(),
                        _ => format!("tenant-{}", n % 40),
                    };
                    let (status, _) = connection
                        .review(&forged(&format!("forged-{n}"), &namespace))
                        .await
                        .unwrap();
                    assert_eq!(status, 200);
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Once most of it is answered (more than the range holds), the API
    // server admits a real pod and stores it.
    eventually("most of the flood is answered", || {
        answered.load(Ordering::Relaxed) >= 250
    })
    .await;
    let pod = job_pod();
    let (_, answer) = post(ports[0], &ca, &review("real-1", &pod)).await.unwrap();
    let admitted = patched(&answer, &pod);
    create_pod(&bed, &admitted, "job-real");
    let created = tokio::time::Instant::now();
    for task in flood {
        task.await.unwrap();
    }
    let flood_over = tokio::time::Instant::now();
    let most = most_provisional_held(&bed);
    println!(
        "{replicas} replica(s): most provisional reservations held at once: {most}; the real pod was told {:?}",
        told_port(&admitted)
    );
    let bound = CAP * replicas;
    assert!(
        most <= bound,
        "{most} reservations made at admission were held at once, more than {bound} ({replicas} replica(s), a cap of {CAP})"
    );
    while bed.endpoint("job-real").is_none() {
        assert!(
            created.elapsed() < Duration::from_secs(10),
            "the real pod has no endpoint 10 s after it was created (told {:?}, {} reservations held)",
            told_port(&admitted),
            reservation_count(&bed)
        );
        // The poll's pace; the deadline is the assertion above.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let published = bed.port_of("job-real").unwrap();
    println!("the real pod was published in {:?}", created.elapsed());
    let svc = bed.api.get(Kind::Service, "jobs", "ssh-job-real").unwrap();
    assert_eq!(svc["spec"]["ports"][0]["port"], published);
    // The forged ones lapse: the grace (10 s) after the leader saw them,
    // and at most a second more (lapses are taken a second at a time).
    while provisional_now(&bed) > 0 {
        assert!(
            flood_over.elapsed() < Duration::from_secs(15),
            "{} forged reservations still held 15 s after the flood",
            provisional_now(&bed)
        );
        // The poll's pace; the deadline is the assertion above.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "the forged reservations lapsed {:?} after the flood",
        flood_over.elapsed()
    );
    assert_eq!(reservation_count(&bed), 1, "only the real pod's is left");
    bed.assert_requests_listed();
    for controller in controllers {
        controller.abort();
    }
}

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
           "status": {"phase": "Running", "podIP": "10.244.0.5",
                      "conditions": [{"type": "Ready", "status": "True"}]}})
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
    let argv = ["--port-range", "9000-9099", "--lease-duration", "15s"];
    let controller = bed.controller("a", &argv);
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
    eventually("the victim's reservation is released (quarantined)", || {
        bed.api.get(Kind::Lease, "ssh-fwd", &name).is_none_or(|l| {
            let annotations = &l["metadata"]["annotations"];
            annotations[vocabulary::RELEASED_AT].is_string()
                && annotations[vocabulary::POD_UID].is_null()
        })
    })
    .await;
    // A window in which the copier's port must not move: the leader's
    // passes after the release would move it if it took the victim's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(service_port("copier"), copier_port);
    let ours: Vec<u64> = (bed.our_services().iter())
        .filter_map(|s| s["spec"]["ports"][0]["port"].as_u64())
        .collect();
    assert_eq!(ours, copier_port.into_iter().collect::<Vec<_>>());
    bed.assert_requests_listed();
    controller.abort();
}
