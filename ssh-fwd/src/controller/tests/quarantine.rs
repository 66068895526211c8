//! A freed port is not handed straight to someone else: the reservation of
//! a job that ended is quarantined (`--port-reuse-after`) on the API
//! server, so another controller sees it too, and gives way only when no
//! other port is free, telling the pod.

use super::*;
use crate::{controller::reservation, vocabulary::reason};

/// Whether the reservation of `port` is quarantined.
fn quarantined(bed: &Bed, port: u16) -> bool {
    let name = reservation::name("198.18.0.10".parse().unwrap(), port);
    bed.api
        .get(Kind::Lease, "ssh-fwd", &name)
        .is_some_and(|l| l["metadata"]["annotations"][vocabulary::RELEASED_AT].is_string())
}

#[tokio::test]
async fn with_two_ports_free_a_job_that_ends_and_a_new_one_get_different_ports_across_a_failover() {
    let bed = Bed::new();
    let range = ["--port-range", "9000-9001", "--port-reuse-after", "10m"];
    let first = bed.controller("a", &range);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let freed = bed.port_of("job-1").unwrap();
    bed.api.delete(Kind::Pod, "jobs", "job-1");
    eventually("job-1's port is quarantined", || quarantined(&bed, freed)).await;
    // The leader crashes; another takes over with nothing in memory.
    first.abort();
    let second = bed.controller("b", &range);
    bed.pod("job-2");
    bed.annotated("job-2").await;
    let other = bed.port_of("job-2").unwrap();
    assert_ne!(other, freed, "job-2 got the port job-1 just left");
    assert!(quarantined(&bed, freed), "the quarantine was cut short");
    let cut = reason::PORT_QUARANTINE_CUT;
    assert!(bed.notes("job-2", cut, "Warning").is_empty());
    bed.assert_requests_listed();
    second.abort();
}

#[tokio::test]
async fn with_one_port_free_the_new_job_gets_it_and_is_told_the_quarantine_gave_way() {
    let bed = Bed::new();
    let controller = bed.controller("a", &["--port-range", "9000-9000"]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    bed.api.delete(Kind::Pod, "jobs", "job-1");
    eventually("job-1's port is quarantined", || quarantined(&bed, 9000)).await;
    bed.pod("job-2");
    bed.annotated("job-2").await;
    assert_eq!(bed.port_of("job-2"), Some(9000));
    let cut = reason::PORT_QUARANTINE_CUT;
    eventually("job-2 is told", || {
        !bed.notes("job-2", cut, "Warning").is_empty()
    })
    .await;
    let notes = bed.notes("job-2", cut, "Warning");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("quarantine of port 9000 gave way"),
        "{notes:?}"
    );
    // The port is job-2's now: its reservation is no longer quarantined.
    assert!(!quarantined(&bed, 9000));
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn with_the_quarantine_off_a_freed_port_is_released_at_once() {
    let bed = Bed::new();
    let controller = bed.controller(
        "a",
        &["--port-range", "9000-9000", "--port-reuse-after", "0"],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    bed.api.delete(Kind::Pod, "jobs", "job-1");
    let name = reservation::name("198.18.0.10".parse().unwrap(), 9000);
    eventually("job-1's reservation is released", || {
        bed.api.get(Kind::Lease, "ssh-fwd", &name).is_none()
    })
    .await;
    bed.pod("job-2");
    bed.annotated("job-2").await;
    assert!(
        bed.notes("job-2", reason::PORT_QUARANTINE_CUT, "Warning")
            .is_empty()
    );
    controller.abort();
}

#[tokio::test]
async fn an_admission_takes_the_last_port_from_its_quarantine_and_the_pod_is_told_once_it_exists() {
    use super::webhook::{
        create_pod, free_port, patched, post, review, serving, told_port, webhook_args, write_pair,
    };
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let port = free_port();
    let mut args = webhook_args(port, certs.path());
    args.extend(["--port-range", "9000-9000"].map(str::to_owned));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = bed.controller("a", &argv);
    serving(port, &ca).await;
    let pod = crate::controller::webhook::mutate::tests::job_pod();
    let (_, answer) = post(port, &ca, &review("u-1", &pod)).await.unwrap();
    let first = patched(&answer, &pod);
    assert_eq!(told_port(&first), Some(9000), "{answer}");
    create_pod(&bed, &first, "job-1");
    eventually("job-1 has its Service", || {
        bed.api.get(Kind::Service, "jobs", "ssh-job-1").is_some()
    })
    .await;
    bed.api.delete(Kind::Pod, "jobs", "job-1");
    eventually("job-1's port is quarantined", || quarantined(&bed, 9000)).await;
    // Admitted once the webhook's watch shows the quarantine (before, the
    // port reads as held and the pod is admitted without one).
    let start = tokio::time::Instant::now();
    let second = loop {
        let (_, answer) = post(port, &ca, &review("u-2", &pod)).await.unwrap();
        let second = patched(&answer, &pod);
        if told_port(&second).is_some() {
            break second;
        }
        assert!(
            start.elapsed() < LIMIT,
            "never admitted with a port: {answer}"
        );
        // Paces the admission retries of this poll (its deadline: LIMIT).
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(told_port(&second), Some(9000));
    assert!(
        !quarantined(&bed, 9000),
        "the quarantined reservation was taken"
    );
    create_pod(&bed, &second, "job-2");
    let cut = reason::PORT_QUARANTINE_CUT;
    eventually("job-2 is told", || {
        !bed.notes("job-2", cut, "Warning").is_empty()
    })
    .await;
    eventually("job-2 has its Service on the port", || {
        bed.api
            .get(Kind::Service, "jobs", "ssh-job-2")
            .is_some_and(|s| s["spec"]["ports"][0]["port"] == 9000)
    })
    .await;
    let notes = bed.notes("job-2", cut, "Warning");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("quarantine of port 9000 gave way"),
        "{notes:?}"
    );
    bed.assert_requests_listed();
    controller.abort();
}
