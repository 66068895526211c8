//! Pods that cannot be served are told why, once, with a Warning event, and
//! are served as soon as the cause is gone.

use super::*;

#[tokio::test]
async fn a_full_range_warns_the_pod_and_a_freed_port_goes_to_it() {
    let bed = Bed::new();
    let controller = bed.controller("a", &["--port-range", "9000-9000"]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    bed.pod("job-2");
    eventually("job-2 is told", || {
        !bed.notes("job-2", vocabulary::reason::NO_FREE_PORT, "Warning")
            .is_empty()
    })
    .await;
    assert!(
        bed.notes("job-2", vocabulary::reason::NO_FREE_PORT, "Warning")[0].contains("9000-9000")
    );
    bed.api.delete(Kind::Pod, "jobs", "job-1");
    eventually("job-2 gets the freed port", || {
        bed.port_of("job-2") == Some(9000)
    })
    .await;
    assert!(bed.api.get(Kind::Service, "jobs", "ssh-job-1").is_none());
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn an_invalid_target_port_warns_the_pod_once_and_a_fixed_one_is_served() {
    let bed = Bed::new();
    let controller = bed.controller("a", &[]);
    bed.pod_with("job-1", json!({vocabulary::TARGET_PORT: "99999"}));
    eventually("job-1 is told", || {
        !bed.notes("job-1", vocabulary::reason::INVALID_TARGET_PORT, "Warning")
            .is_empty()
    })
    .await;
    // More passes (another pod's writes) do not repeat it.
    bed.pod("job-2");
    bed.annotated("job-2").await;
    let notes = bed.notes("job-1", vocabulary::reason::INVALID_TARGET_PORT, "Warning");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!("{} is `99999`", vocabulary::TARGET_PORT)),
        "{}",
        notes[0]
    );
    assert!(bed.api.get(Kind::Service, "jobs", "ssh-job-1").is_none());
    bed.api.patch(
        Kind::Pod,
        "jobs",
        "job-1",
        &json!({"metadata": {"annotations": {vocabulary::TARGET_PORT: "2222"}}}),
    );
    bed.annotated("job-1").await;
    let svc = bed.api.get(Kind::Service, "jobs", "ssh-job-1").unwrap();
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 2222);
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn a_service_name_taken_by_someone_else_warns_the_pod_and_is_left_alone() {
    let bed = Bed::new();
    let theirs = json!({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": "ssh-job-1", "namespace": "jobs"},
                        "spec": {"ports": [{"port": 80}]}});
    bed.api.apply(Kind::Service, theirs);
    let controller = bed.controller("a", &[]);
    bed.pod("job-1");
    eventually("job-1 is told", || {
        !bed.notes("job-1", vocabulary::reason::SERVICE_NAME_TAKEN, "Warning")
            .is_empty()
    })
    .await;
    bed.pod("job-2");
    bed.annotated("job-2").await;
    let notes = bed.notes("job-1", vocabulary::reason::SERVICE_NAME_TAKEN, "Warning");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Service jobs/ssh-job-1 exists"),
        "{}",
        notes[0]
    );
    let svc = bed.api.get(Kind::Service, "jobs", "ssh-job-1").unwrap();
    assert_eq!(svc["spec"]["ports"][0]["port"], 80, "theirs is untouched");
    bed.api.delete(Kind::Service, "jobs", "ssh-job-1");
    bed.annotated("job-1").await;
    bed.assert_requests_listed();
    controller.abort();
}
