//! `--host-certs` against the fake API: the host CA made once by two
//! replicas starting together and kept across restarts, a CA Secret that
//! is not usable refused with nothing changed, and each SSH pod's host key
//! Secret issued into its namespace, owned by it, signed by the published
//! CA, while a tenant's own Secrets are never touched.

use base64::Engine as _;
use ssh_key::{Certificate, HashAlg, PublicKey};

use super::*;
use crate::{
    controller::host_certs,
    host_certs::{CERT_FILE, KEY_FILE, ca::ECDSA_TEST_KEY},
};

const NS: &str = "ssh-fwd";
const CA: &str = "ssh-fwd-host-ca";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn field(object: &Value, key: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(object["data"][key].as_str()?)
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn host_ca_args(extra: &[&str]) -> host_certs::HostCaArgs {
    let argv = ["--ssh-ip", "198.18.0.10", "--host-certs"];
    super::super::args::parse(argv.iter().chain(extra).copied())
        .unwrap()
        .host_ca
}

async fn start(bed: &Bed, args: &host_certs::HostCaArgs) -> anyhow::Result<String> {
    let client = crate::k8s::client::of_fake(&bed.api).await;
    let ips = ["198.18.0.10".parse().unwrap()];
    let (certs, task) = host_certs::start(args, &client, NS, "ssh.example.org", ips).await?;
    task.abort();
    Ok(certs.trust.current.clone())
}

fn published(bed: &Bed) -> Option<String> {
    let map = bed.api.get(Kind::ConfigMap, NS, CA)?;
    map["data"]["known_hosts"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn two_replicas_starting_together_make_one_host_ca_and_a_restart_keeps_it() {
    let bed = Bed::new();
    // Both read before either creates: both create, the API server takes
    // one.
    bed.api
        .delay(Kind::Secret, "get", Duration::from_millis(300));
    let args = host_ca_args(&[]);
    let (a, b) = tokio::join!(start(&bed, &args), start(&bed, &args));
    let (a, b) = (a.unwrap(), b.unwrap());
    let creates = (bed.api.requests().iter())
        .filter(|r| r.resource == "secrets" && r.verb == "create")
        .count();
    assert_eq!(creates, 2, "both replicas tried: the race took place");
    assert_eq!(a, b, "the loser uses the winner's CA");
    let secret = bed.api.get(Kind::Secret, NS, CA).expect("the CA Secret");
    assert_eq!(
        field(&secret, "ssh_host_ca_key.pub").unwrap().trim(),
        a,
        "the Secret holds the CA both use"
    );
    assert_eq!(
        published(&bed).unwrap(),
        format!("@cert-authority [ssh.example.org]:* {a}\n")
    );
    // A restart: the same CA, the Secret not written.
    bed.api.delay(Kind::Secret, "get", Duration::ZERO);
    let again = start(&bed, &args).await.unwrap();
    assert_eq!(again, a);
    let after = bed.api.get(Kind::Secret, NS, CA).unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"],
        secret["metadata"]["resourceVersion"]
    );
    assert_eq!(after["data"], secret["data"]);
    bed.assert_requests_listed();
}

#[tokio::test]
async fn an_operators_own_ca_is_used_as_it_is() {
    let bed = Bed::new();
    let own = crate::host_certs::Ca::generate("operator").unwrap();
    bed.api.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": CA, "namespace": NS},
               "data": {"ssh_host_ca_key": b64(&own.to_openssh().unwrap())}}),
    );
    let before = bed.api.get(Kind::Secret, NS, CA).unwrap();
    assert_eq!(
        start(&bed, &host_ca_args(&[])).await.unwrap(),
        own.public_line()
    );
    assert_eq!(bed.api.get(Kind::Secret, NS, CA).unwrap(), before);
}

#[tokio::test]
async fn a_ca_secret_that_is_not_usable_is_refused_naming_it_and_the_fix_and_nothing_changes() {
    let own = crate::host_certs::Ca::generate("x").unwrap();
    let private = own.to_openssh().unwrap().to_string();
    let cases = [
        (
            "malformed",
            json!({"ssh_host_ca_key": b64("-----BEGIN OPENSSH PRIVATE KEY-----\nbm9wZQ==\n")}),
            "is not an OpenSSH private key",
        ),
        (
            "ecdsa",
            json!({"ssh_host_ca_key": b64(ECDSA_TEST_KEY)}),
            "the host CA must be Ed25519",
        ),
        ("missing", json!({"other": b64(&private)}), "is missing"),
    ];
    for (case, data, says) in cases {
        let bed = Bed::new();
        bed.api.apply(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": CA, "namespace": NS}, "data": data}),
        );
        let before = bed.api.get(Kind::Secret, NS, CA).unwrap();
        let error = format!("{:#}", start(&bed, &host_ca_args(&[])).await.unwrap_err());
        assert!(error.contains(says), "{case}: {error}");
        assert!(
            error.contains("Secret ssh-fwd/ssh-fwd-host-ca"),
            "{case}: {error}"
        );
        assert!(
            error.contains("ssh-keygen -t ed25519 -N ''"),
            "{case}: {error}"
        );
        assert_eq!(bed.api.get(Kind::Secret, NS, CA).unwrap(), before, "{case}");
        assert!(
            bed.api.get(Kind::ConfigMap, NS, CA).is_none(),
            "{case}: published"
        );
    }
}

#[test]
fn a_validity_under_a_minute_is_refused_naming_the_flag_and_a_value_that_works() {
    // Refused as the flags are read, before any API call.
    for short in ["0s", "30s"] {
        let argv = [
            "--ssh-ip",
            "198.18.0.10",
            "--host-certs",
            "--host-cert-validity",
            short,
        ];
        let error = super::super::args::parse(argv).unwrap_err().to_string();
        assert!(
            error.contains(&format!("--host-cert-validity {short} is too short")),
            "{error}"
        );
        assert!(error.contains("e.g. 30d"), "{error}");
    }
    assert_eq!(
        host_ca_args(&[]).host_cert_validity,
        Duration::from_secs(30 * 86_400)
    );
}

#[tokio::test]
async fn during_a_rotation_both_cas_are_published_until_the_date() {
    let bed = Bed::new();
    let old = crate::host_certs::Ca::generate("old").unwrap();
    bed.api.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "ssh-fwd-host-ca-2026", "namespace": NS},
               "data": {"ssh_host_ca_key": b64(&old.to_openssh().unwrap())}}),
    );
    let rotation = [
        "--host-ca-previous-secret",
        "ssh-fwd-host-ca-2026",
        "--host-ca-previous-until",
        "2999-01-01T00:00:00Z",
    ];
    let new = start(&bed, &host_ca_args(&rotation)).await.unwrap();
    assert_ne!(new, old.public_line());
    assert_eq!(
        published(&bed).unwrap(),
        format!(
            "@cert-authority [ssh.example.org]:* {new}\n@cert-authority [ssh.example.org]:* {}\n",
            old.public_line()
        )
    );
    // The date passed: only the new one.
    let over = [&rotation[..3], &["2001-01-01T00:00:00Z"]].concat();
    start(&bed, &host_ca_args(&over)).await.unwrap();
    assert_eq!(
        published(&bed).unwrap(),
        format!("@cert-authority [ssh.example.org]:* {new}\n")
    );
    // A previous Secret that is not there: refused, naming the flag.
    let missing = [
        "--host-ca-previous-secret",
        "gone",
        "--host-ca-previous-until",
        "2999-01-01T00:00:00Z",
    ];
    let error = start(&bed, &host_ca_args(&missing))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("--host-ca-previous-secret gone"), "{error}");
}

/// A pod the webhook gave a host key Secret name.
fn pod_with_secret(bed: &Bed, name: &str, secret: &str) {
    bed.pod_with(name, json!({vocabulary::HOST_KEY_SECRET: secret}));
}

#[tokio::test]
async fn each_pod_gets_a_certificate_from_the_published_ca_in_a_secret_it_owns() {
    let bed = Bed::new();
    let controller = bed.controller("a", &["--host-certs"]);
    pod_with_secret(&bed, "job-1", "ssh-fwd-host-key-abc");
    // A tenant names a Secret not of our making, or makes ours first.
    pod_with_secret(&bed, "job-2", "db-password");
    bed.api.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "ssh-fwd-host-key-own", "namespace": "jobs"},
               "data": {"x": b64("tenant's")}}),
    );
    let squatted = bed
        .api
        .get(Kind::Secret, "jobs", "ssh-fwd-host-key-own")
        .unwrap();
    pod_with_secret(&bed, "job-3", "ssh-fwd-host-key-own");
    eventually("job-1's host key Secret is issued", || {
        bed.api
            .get(Kind::Secret, "jobs", "ssh-fwd-host-key-abc")
            .is_some()
    })
    .await;
    bed.annotated("job-1").await;
    let pod = bed.api.get(Kind::Pod, "jobs", "job-1").unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    let port = bed.port_of("job-1").unwrap();
    let secret = bed
        .api
        .get(Kind::Secret, "jobs", "ssh-fwd-host-key-abc")
        .unwrap();
    assert_eq!(secret["type"], vocabulary::HOST_KEY_SECRET_TYPE);
    let owner = &secret["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["uid"].as_str()),
        (Some("Pod"), Some(uid.as_str()))
    );
    // Signed by the CA the ConfigMap publishes, for the names users type.
    let line = published(&bed).unwrap();
    let ca_key = line.trim().split_once("]:* ").unwrap().1;
    let ca = PublicKey::from_openssh(ca_key).unwrap();
    let cert = Certificate::from_openssh(field(&secret, CERT_FILE).unwrap().trim()).unwrap();
    cert.validate([&ca.fingerprint(HashAlg::Sha256)]).unwrap();
    assert_eq!(cert.valid_principals(), ["ssh.example.org", "198.18.0.10"]);
    assert_eq!(cert.key_id(), format!("jobs/job-1/{uid} port {port}"));
    let key = ssh_key::PrivateKey::from_openssh(field(&secret, KEY_FILE).unwrap()).unwrap();
    assert_eq!(cert.public_key(), key.public_key().key_data());
    // The user is told the line to trust.
    let ready = bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal");
    assert!(ready[0].contains(line.trim()), "{ready:?}");
    eventually("job-1 is marked issued", || {
        let pod = bed.api.get(Kind::Pod, "jobs", "job-1").unwrap();
        pod["metadata"]["annotations"][vocabulary::HOST_CERTIFICATE].is_string()
    })
    .await;
    bed.annotated("job-3").await;
    eventually("job-3 is marked issued", || {
        let pod = bed.api.get(Kind::Pod, "jobs", "job-3").unwrap();
        pod["metadata"]["annotations"][vocabulary::HOST_CERTIFICATE].is_string()
    })
    .await;
    assert_eq!(
        bed.api
            .get(Kind::Secret, "jobs", "ssh-fwd-host-key-own")
            .unwrap(),
        squatted,
        "a Secret that exists is never written"
    );
    bed.annotated("job-2").await;
    assert!(bed.api.get(Kind::Secret, "jobs", "db-password").is_none());
    let job2 = bed.api.get(Kind::Pod, "jobs", "job-2").unwrap();
    assert!(job2["metadata"]["annotations"][vocabulary::HOST_CERTIFICATE].is_null());
    // A pod with a deadline: its certificate ends with it.
    bed.api.apply(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "job-4", "namespace": "jobs",
                            "labels": {vocabulary::SSH: "enabled"},
                            "annotations": {vocabulary::HOST_KEY_SECRET: "ssh-fwd-host-key-four"}},
               "spec": {"activeDeadlineSeconds": 3600, "containers": [{"name": "main", "image": "sshd"}]},
               "status": {"phase": "Running", "podIP": "10.244.0.6",
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    eventually("job-4's host key Secret is issued", || {
        bed.api
            .get(Kind::Secret, "jobs", "ssh-fwd-host-key-four")
            .is_some()
    })
    .await;
    let four = bed
        .api
        .get(Kind::Secret, "jobs", "ssh-fwd-host-key-four")
        .unwrap();
    let cert = Certificate::from_openssh(field(&four, CERT_FILE).unwrap().trim()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let end = cert.valid_before();
    assert!(
        end <= now + 600 + 3600 && end > now + 3600,
        "{end} vs {now}"
    );
    controller.abort();
    bed.assert_requests_listed();
}
