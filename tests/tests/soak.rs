//! A minute of the soak (`ssh_fwd_tests::soak`): the two-node cluster with
//! `--announce l2` and two controllers under every kind of load while
//! every kind of fault happens once, overlapping. It fails on a session
//! lost while a path existed, a login or copy failed outside every fault
//! window, a byte corrupted, a table entry left after the close timeout,
//! or a client held back under its quota (a defect). The seed is printed;
//! set `SSH_FWD_SOAK_SEED` to replay one.

use std::time::Duration;

use ssh_fwd::vocabulary;
use ssh_fwd_tests::{privilege, soak};

#[test]
fn the_soak_speaks_the_controllers_vocabulary() {
    assert_eq!(soak::jobs::SSH_LABEL, vocabulary::SSH);
    assert_eq!(soak::jobs::ENDPOINT_ANNOTATION, vocabulary::ENDPOINT);
}

#[test]
#[ignore = "needs root, network namespaces, BPF and sshd: `cargo xtask test` runs it"]
fn a_minute_of_load_under_overlapping_faults_loses_nothing_and_leaks_nothing() {
    // Its load is the point: no other test shares the machine meanwhile.
    privilege::require_alone();
    let seed = std::env::var("SSH_FWD_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000_007
        });
    let dir = tempfile::Builder::new()
        .prefix("ssh-fwd-soak")
        .tempdir()
        .unwrap();
    eprintln!("soak seed {seed}, logs in {}", dir.path().display());
    let report = soak::run(&soak::Options {
        length: Duration::from_secs(60),
        seed,
        dir: dir.path().to_owned(),
    })
    .unwrap();
    let summary = report.summary();
    eprintln!("{summary}");
    if !report.failures().is_empty() || !report.defects().is_empty() {
        let kept = dir.keep();
        panic!(
            "the soak failed (seed {seed}, logs in {}):\n{summary}",
            kept.display()
        );
    }
}
