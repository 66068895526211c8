//! `--webhook-self-signed` against the fake API: the first replica makes
//! the CA and serving certificate in a Secret and writes the CA into the
//! MutatingWebhookConfiguration; the second serves the same; a serving
//! certificate near its end is renewed from the same CA.

use base64::Engine as _;

use super::{
    webhook::{free_port, post_to, review},
    *,
};
use crate::controller::webhook::{mutate::tests::job_pod, self_signed};
use crate::vocabulary;

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
        &json!({"metadata": {"annotations": {vocabulary::NOT_AFTER: "0"}}}),
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

/// Another CA's PEM (cainjector's, another tool's).
fn foreign_ca() -> String {
    let names = ["elsewhere.example".to_owned()];
    let (pem, _, _) = self_signed::generate(&names, time::OffsetDateTime::now_utc()).unwrap();
    pem.ca
}

fn configuration_with(bed: &Bed, annotations: Value, bundle: &str) {
    let bundle = base64::engine::general_purpose::STANDARD.encode(bundle);
    bed.api.apply(
        Kind::MutatingWebhookConfiguration,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "ssh-fwd", "annotations": annotations},
               "webhooks": [{"name": "pods.ssh-fwd.io", "admissionReviewVersions": ["v1"],
                             "sideEffects": "NoneOnDryRun",
                             "clientConfig": {"caBundle": bundle,
                                              "service": {"name": "ssh-fwd-webhook", "namespace": "ssh-fwd", "path": "/mutate"}}}]}),
    );
}

/// How many times the configuration was read: once per reload interval.
fn configuration_reads(bed: &Bed) -> usize {
    bed.api
        .requests()
        .iter()
        .filter(|r| r.resource == "mutatingwebhookconfigurations" && r.verb == "get")
        .count()
}

/// Waits until the controller has read the configuration `n` more times:
/// `n` reload intervals in which it could have written it.
async fn reads_later(bed: &Bed, n: usize) {
    let before = configuration_reads(bed);
    eventually(&format!("{n} more reads of the configuration"), || {
        configuration_reads(bed) >= before + n
    })
    .await;
}

fn configuration_writes(bed: &Bed) -> usize {
    bed.api
        .requests()
        .iter()
        .filter(|r| {
            r.resource == "mutatingwebhookconfigurations"
                && !matches!(r.verb, "get" | "list" | "watch")
        })
        .count()
}

#[tokio::test]
async fn a_configuration_whose_ca_cert_manager_injects_is_left_alone() {
    // A rollout to deploy/overlays/cert-manager: the configuration carries
    // cainjector's annotation and its CA while old self-signed replicas
    // still run. They must not write theirs over it.
    let bed = Bed::new();
    let theirs = foreign_ca();
    configuration_with(
        &bed,
        json!({"cert-manager.io/inject-ca-from": "ssh-fwd/ssh-fwd-webhook"}),
        &theirs,
    );
    let port = free_port();
    let args = args(port);
    let a = bed.controller("a", &args.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("the Secret is made", || {
        secret_field(&bed, "ca.crt").is_some()
    })
    .await;
    let ours = secret_field(&bed, "ca.crt").unwrap();
    answers(port, &ours).await;
    // Many reload intervals later: untouched.
    reads_later(&bed, 5).await;
    assert_eq!(ca_bundle(&bed).as_deref(), Some(theirs.as_str()));
    assert_eq!(configuration_writes(&bed), 0);
    bed.assert_requests_listed();
    a.abort();
}

#[tokio::test]
async fn our_ca_joins_the_cas_a_configuration_trusts_already_instead_of_replacing_them() {
    let bed = Bed::new();
    let theirs = foreign_ca();
    configuration_with(&bed, json!({}), &theirs);
    let port = free_port();
    let args = args(port);
    let a = bed.controller("a", &args.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("our CA is in caBundle", || {
        let ours = secret_field(&bed, "ca.crt");
        let bundle = ca_bundle(&bed).unwrap_or_default();
        ours.is_some_and(|ours| bundle.contains(ours.trim()))
    })
    .await;
    let bundle = ca_bundle(&bed).unwrap();
    assert!(
        bundle.contains(theirs.trim()),
        "the other CA is kept: {bundle}"
    );
    answers(port, &secret_field(&bed, "ca.crt").unwrap()).await;
    // Written once: with ours in it, nothing is left to do.
    reads_later(&bed, 5).await;
    assert_eq!(configuration_writes(&bed), 1);
    assert_eq!(ca_bundle(&bed).unwrap(), bundle);
    bed.assert_requests_listed();
    a.abort();
}
