//! `--webhook-self-signed` against the fake API: the first replica makes
//! the CA and serving certificate in a Secret and writes the CA into the
//! MutatingWebhookConfiguration; the second serves the same; a serving
//! certificate near its end is renewed from the same CA.

use base64::Engine as _;

use super::{
    webhook::{free_port, post_to, review},
    *,
};
use crate::controller::webhook::mutate::tests::job_pod;

const HOST: &str = "ssh-fwd-webhook.ssh-fwd.svc";

fn configuration(bed: &Bed) {
    bed.api.apply(
        Kind::MutatingWebhookConfiguration,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "ssh-fwd"},
               "webhooks": [{"name": "pods.ssh-fwd.io", "admissionReviewVersions": ["v1"],
                             "sideEffects": "NoneOnDryRun",
                             "clientConfig": {"service": {"name": "ssh-fwd-webhook", "namespace": "ssh-fwd", "path": "/mutate"}}}]}),
    );
}

fn ca_bundle(bed: &Bed) -> Option<String> {
    let config = bed
        .api
        .get(Kind::MutatingWebhookConfiguration, "", "ssh-fwd")?;
    let bundle = config["webhooks"][0]["clientConfig"]["caBundle"].as_str()?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .ok()?;
    String::from_utf8(pem).ok()
}

fn secret_field(bed: &Bed, key: &str) -> Option<String> {
    let secret = bed
        .api
        .get(Kind::Secret, "ssh-fwd", "ssh-fwd-webhook-tls")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(secret["data"][key].as_str()?)
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn args(port: u16) -> Vec<String> {
    [
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-self-signed",
        "--webhook-reload-interval",
        "100ms",
        "--image",
        "ssh-fwd:test",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn answers(port: u16, ca: &str) {
    let start = tokio::time::Instant::now();
    while post_to(port, HOST, ca, &review("probe", &job_pod()))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < LIMIT,
            "the webhook on {port} never answered with this CA"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn replicas_share_one_self_made_ca_which_the_configuration_trusts_and_renew_from_it() {
    let bed = Bed::new();
    configuration(&bed);
    let (port_a, port_b) = (free_port(), free_port());
    let args_a = args(port_a);
    let a = bed.controller("a", &args_a.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("the CA is in caBundle", || ca_bundle(&bed).is_some()).await;
    let ca = ca_bundle(&bed).unwrap();
    assert_eq!(secret_field(&bed, "ca.crt").as_deref(), Some(ca.as_str()));
    answers(port_a, &ca).await;
    let args_b = args(port_b);
    let b = bed.controller("b", &args_b.iter().map(String::as_str).collect::<Vec<_>>());
    answers(port_b, &ca).await;
    let creates = bed
        .api
        .requests()
        .iter()
        .filter(|r| r.resource == "secrets" && r.verb == "create")
        .count();
    assert_eq!(
        creates, 1,
        "the second replica reads the first one's Secret"
    );

    // The serving certificate is near its end: renewed, same CA.
    let old_cert = secret_field(&bed, "tls.crt").unwrap();
    bed.api.patch(
        Kind::Secret,
        "ssh-fwd",
        "ssh-fwd-webhook-tls",
        &json!({"metadata": {"annotations": {"ssh-fwd.io/not-after": "0"}}}),
    );
    eventually("the serving certificate is renewed", || {
        secret_field(&bed, "tls.crt").is_some_and(|c| c != old_cert)
    })
    .await;
    assert_eq!(ca_bundle(&bed).as_deref(), Some(ca.as_str()));
    answers(port_a, &ca).await;
    answers(port_b, &ca).await;
    // Someone empties caBundle: it is written back.
    configuration(&bed);
    eventually("caBundle is restored", || {
        ca_bundle(&bed).as_deref() == Some(ca.as_str())
    })
    .await;
    bed.assert_requests_listed();
    a.abort();
    b.abort();
}
