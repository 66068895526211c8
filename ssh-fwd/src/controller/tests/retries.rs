//! Failed writes are retried until the API agrees with the plan.

use super::*;

#[tokio::test]
async fn failed_creates_are_retried() {
    let bed = Bed::new();
    bed.api.fail_creates(Kind::Service, &[500, 503]);
    let controller = bed.controller("a", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    assert_eq!(bed.our_services().len(), 1);
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn a_failed_endpoint_withdrawal_keeps_the_service_until_it_is_retried() {
    let bed = Bed::new();
    let controller = bed.controller("a", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let patches = || {
        bed.api
            .requests()
            .iter()
            .filter(|r| r.resource == "pods" && r.verb == "patch")
            .count()
    };
    let before = patches();
    // The first withdrawal fails; the Service must outlive it, or nothing
    // would be left to retry it from.
    bed.api.fail_patches(Kind::Pod, &[500]);
    bed.api.patch(
        Kind::Pod,
        "jobs",
        "job-1",
        &json!({"metadata": {"labels": {vocabulary::SSH: null}}}),
    );
    eventually("the endpoint is withdrawn", || {
        bed.endpoint("job-1").is_none()
    })
    .await;
    eventually("the Service is deleted", || {
        bed.api.get(Kind::Service, "jobs", "ssh-job-1").is_none()
    })
    .await;
    assert!(patches() >= before + 2, "the failed withdrawal was retried");
    let pod = bed.api.get(Kind::Pod, "jobs", "job-1").unwrap();
    assert!(pod["metadata"]["labels"][vocabulary::SERVICE].is_null());
    bed.assert_requests_listed();
    controller.abort();
}
