//! `SSHEnvMissing` as a pod gets it when the webhook gave it no port: why
//! (what the webhook wrote on the pod, or that it never saw the pod), and
//! whether its keys are missing too.

use super::{
    webhook::{free_port, write_pair},
    *,
};
use crate::vocabulary;

/// The one SSHEnvMissing note of `pod`, once sent.
async fn env_missing(bed: &Bed, pod: &str) -> String {
    eventually(&format!("{pod} is told it lacks the variable"), || {
        !bed.notes(pod, vocabulary::reason::SSH_ENV_MISSING, "Warning")
            .is_empty()
    })
    .await;
    let notes = bed.notes(pod, vocabulary::reason::SSH_ENV_MISSING, "Warning");
    assert_eq!(notes.len(), 1, "{notes:?}");
    notes[0].clone()
}

/// A controller with its webhook on; the certificates' directory lives as
/// long as the returned guard.
fn start(
    bed: &Bed,
) -> (
    tempfile::TempDir,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let certs = tempfile::tempdir().unwrap();
    write_pair(certs.path());
    let addr = format!("127.0.0.1:{}", free_port());
    let dir = certs.path().display().to_string();
    let webhook = [
        "--webhook-addr",
        &addr,
        "--webhook-cert-dir",
        &dir,
        "--image",
        "ssh-fwd:test",
    ];
    (certs, bed.controller("a", &webhook))
}

#[tokio::test]
async fn a_pod_admitted_without_its_port_is_told_why_and_whether_its_keys_are_missing() {
    let bed = Bed::new();
    let (_certs, controller) = start(&bed);
    let keys = vocabulary::KEYS_SECRET;
    // Created while no webhook replica answered (failurePolicy Ignore):
    // nothing of ours on it, neither the variable nor the keys.
    bed.pod_with("unseen", json!({keys: "alice-keys"}));
    bed.pod("unseen-no-keys");
    // Answered without a port: the webhook wrote why, and added the keys.
    let why = "no port reserved at admission: the API server refused the reservation of port 9012 (403 Forbidden: leases is forbidden)";
    bed.pod_with(
        "refused",
        json!({vocabulary::ADMISSION: why, keys: "bob-keys"}),
    );

    let unseen = env_missing(&bed, "unseen").await;
    assert!(
        unseen.contains("the ssh-fwd admission webhook was not called or did not answer"),
        "{unseen}"
    );
    assert!(unseen.contains("failurePolicy Ignore"), "{unseen}");
    assert!(
        unseen.contains("Its SSH keys (Secret alice-keys) are not installed either"),
        "{unseen}"
    );
    assert!(unseen.contains("ssh-fwd-install-keys"), "{unseen}");
    let plain = env_missing(&bed, "unseen-no-keys").await;
    assert!(
        plain.contains("was not called or did not answer"),
        "{plain}"
    );
    assert!(!plain.contains("keys"), "{plain}");
    let refused = env_missing(&bed, "refused").await;
    assert!(
        refused.contains(&format!("admitted it without a port: \"{why}\"")),
        "{refused}"
    );
    assert!(!refused.contains("keys"), "{refused}");
    // Each still gets its port.
    for pod in ["unseen", "unseen-no-keys", "refused"] {
        bed.annotated(pod).await;
    }
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn a_reason_a_user_wrote_on_the_pod_is_quoted_and_the_note_fits_an_event() {
    // The annotation the webhook writes is the pod's: its creator can set
    // it, to anything. events.k8s.io refuses a note over 1024 bytes.
    let bed = Bed::new();
    let (_certs, controller) = start(&bed);
    let why = format!("\"quoted\"\nnext line {}", "ü".repeat(3000));
    bed.pod_with("long", json!({vocabulary::ADMISSION: why}));
    let note = env_missing(&bed, "long").await;
    assert!(note.len() <= 1024, "{} bytes", note.len());
    assert!(
        note.contains(r#"without a port: "\"quoted\"\nnext line ü"#),
        "the user's text quoted, escaped: {note}"
    );
    assert!(!note.contains('\n'), "{note}");
    assert!(
        note.contains("recreate the pod"),
        "the fix survives: {note}"
    );
    bed.annotated("long").await;
    bed.assert_requests_listed();
    controller.abort();
}
