//! Activity per job, end to end with real OpenSSH: an open session shows
//! as one open connection with a recent last packet in `ssh-fwd list` and
//! in `/metrics`, none once it closed and was swept.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use std::{
    io::Write as _,
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use common::{Bed, FRONTEND, Session};
use ssh_fwd_tests::{Topology, cmd, privilege, prometheus};

const METRICS: &str = "127.0.0.1:9105";
/// Sweeps every 5 s (an eighth of it).
const IDLE: &str = "40s";

fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let mut found = None;
    let done = cmd::wait_until(limit, || {
        found = check();
        found.is_some()
    });
    assert!(done, "timed out after {limit:?} waiting for: {what}");
    found.unwrap()
}

fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// Seconds from `text` (RFC 3339) to now.
fn age(text: &str) -> Duration {
    let at = parse_rfc3339(text).unwrap_or_else(|| panic!("not RFC 3339: {text}"));
    SystemTime::now().duration_since(at).unwrap_or_default()
}

/// The sample of `family` for the mapping named `job`.
fn sample(body: &str, family: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains("mapping=\"job\""))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `promtool check metrics` (its lint) finds nothing in the activity
/// families. (It reads the text format, where a counter's help is named
/// after its `_total` samples, not after the OpenMetrics family the agent
/// serves, so it complains of every counter's help: not ours to judge.)
fn promtool_accepts(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus; `cargo xtask setup` installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = said
        .lines()
        .filter(|l| {
            l.contains("ssh_fwd_mapping_open_connections")
                || l.contains("ssh_fwd_mapping_last_activity")
        })
        .collect();
    assert!(ours.is_empty(), "promtool check metrics: {said}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_open_session_shows_in_list_and_metrics_and_none_once_closed_and_swept() {
    privilege::require();
    let extra = ["--conn-idle-timeout", IDLE, "--metrics-addr", METRICS];
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &extra,
    )
    .unwrap();
    let node = &bed.topo.nodes[0].ns;
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    session.echo("working").unwrap();

    let row = bed.bpffs[0].list_of("mappings").unwrap()[0].clone();
    assert_eq!(row["open_connections"], 1, "{row:#}");
    let last = row["last_activity"].as_str().unwrap();
    assert!(age(last) < Duration::from_secs(5), "{row:#}");

    let body = eventually(
        "/metrics to show the session",
        Duration::from_secs(20),
        || {
            let (_, body) = prometheus::get_in(node, METRICS, "/metrics").ok()?;
            (sample(&body, "ssh_fwd_mapping_open_connections") == Some(1.0)).then_some(body)
        },
    );
    let last = sample(&body, "ssh_fwd_mapping_last_activity_timestamp_seconds").unwrap();
    assert!((unix_now() - last).abs() < 15.0, "last activity {last}");
    promtool_accepts(&body);

    drop(session);
    eventually("list to show it closed", Duration::from_secs(30), || {
        let row = bed.bpffs[0].list_of("mappings").ok()?[0].clone();
        (row["open_connections"] == 0).then_some(())
    });
    let body = eventually(
        "/metrics to show it closed",
        Duration::from_secs(30),
        || {
            let (_, body) = prometheus::get_in(node, METRICS, "/metrics").ok()?;
            (sample(&body, "ssh_fwd_mapping_open_connections") == Some(0.0)).then_some(body)
        },
    );
    // The agent remembers the last packet after the entry is gone.
    let kept = sample(&body, "ssh_fwd_mapping_last_activity_timestamp_seconds");
    assert!(kept.is_some_and(|t| t >= last), "{body}");
}
