//! What the binary writes to stderr when it fails: one event per error, in
//! the format asked for, without terminal colours when stderr is not a
//! terminal. The commands fail before they touch anything (a mappings file
//! that does not exist, a bpffs directory with nothing pinned), so these
//! need no privileges.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

use std::process::{Command, Output};

fn ssh_fwd(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ssh-fwd"));
    cmd.args(args).env_remove("NO_COLOR").env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{args:?} was expected to fail");
    out
}

fn missing_file_agent(format: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("absent.yaml");
    ssh_fwd(
        &[
            "--log-format",
            format,
            "agent",
            "--external-iface",
            "lo",
            "--mappings",
            mappings.to_str().unwrap(),
            "--bpffs",
            dir.path().join("bpffs").to_str().unwrap(),
        ],
        &[],
    )
}

#[test]
fn with_json_logs_every_line_a_failing_agent_writes_is_one_json_event() {
    let out = missing_file_agent("json");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.trim().is_empty());
    for line in stderr.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON event ({e}): {line:?}\n{stderr}"));
        assert!(event.get("level").is_some(), "{line}");
    }
    assert!(stderr.contains("absent.yaml"), "{stderr}");
}

#[test]
fn a_failing_command_reports_its_error_once() {
    let out = missing_file_agent("text");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.matches("absent.yaml").count(),
        1,
        "the error must appear once:\n{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = ssh_fwd(&["list", "--bpffs", dir.path().to_str().unwrap()], &[]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.lines().filter(|l| l.contains("cannot open")).count(),
        1,
        "the error must appear once:\n{stderr}"
    );
}

#[test]
fn logs_to_a_file_or_pipe_carry_no_terminal_colour_codes() {
    for format in ["text", "json"] {
        let out = missing_file_agent(format);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.contains('\u{1b}'), "{format}: {stderr:?}");
    }
}

#[test]
fn an_error_names_its_cause_once() {
    let out = missing_file_agent("text");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

/// Every line of `stderr` is one JSON event with a level.
fn assert_json_lines(stderr: &str) {
    assert!(!stderr.trim().is_empty());
    for line in stderr.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON event ({e}): {line:?}\n{stderr}"));
        assert!(event.get("level").is_some(), "{line}");
    }
}

#[test]
fn with_json_logs_a_command_line_error_is_one_json_event() {
    for args in [
        &["--log-format", "json", "agent", "--no-such-flag"][..],
        &["agent", "--log-format=json", "--external-iface", "lo"],
        &["--log-format", "json"],
    ] {
        let out = ssh_fwd(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_json_lines(&stderr);
    }
    // The usage is still there to read, in the event.
    let out = ssh_fwd(&["--log-format", "json", "agent", "--no-such-flag"], &[]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    // Without a format it is clap's usual text.
    let out = ssh_fwd(&["agent", "--no-such-flag"], &[]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("error: "), "{stderr}");
}

#[test]
fn with_json_logs_an_invalid_log_filter_is_one_json_event() {
    for (args, envs) in [
        (
            &["--log-format", "json", "--log", "ssh_fwd=loud", "status"][..],
            &[][..],
        ),
        (
            &["--log-format", "json", "status"],
            &[("SSH_FWD_LOG", "[")][..],
        ),
    ] {
        let out = ssh_fwd(args, envs);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_json_lines(&stderr);
        assert!(stderr.contains("is not a valid filter"), "{stderr}");
    }
}

/// Set in the child process of the panic test.
const PANIC_CHILD: &str = "SSH_FWD_TEST_PANIC_CHILD";

#[test]
fn with_json_logs_a_panic_is_one_json_event() {
    if std::env::var_os(PANIC_CHILD).is_some() {
        ssh_fwd::telemetry::logging::init("info", ssh_fwd::telemetry::logging::LogFormat::Json)
            .unwrap();
        // A task's panic on a runtime worker, as in the agent.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let task = runtime.spawn(async { panic!("a bug: {}", "\u{1b}[2J") });
        assert!(runtime.block_on(task).is_err());
        panic!("and one on the main thread");
    }
    // This test again, in a process of its own: the hook is process-wide.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "with_json_logs_a_panic_is_one_json_event",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PANIC_CHILD, "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_json_lines(&stderr);
    assert!(stderr.contains("a bug: "), "{stderr}");
    assert!(stderr.contains("and one on the main thread"), "{stderr}");
    assert!(stderr.contains("logs.rs"), "the location: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// `list`, `status`, `teardown` and `install-keys` print their error as
/// text (`error: ...`), as CLIs do, unless `--log-format json` asks for
/// one JSON event per line.
#[test]
fn with_json_logs_a_failing_command_reports_its_error_as_one_json_event() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().to_str().unwrap();
    // A regular file where the bpffs directory should be: teardown cannot
    // list it, and nothing under it exists to remove.
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let absent = dir.path().join("absent").display().to_string();
    let commands: [&[&str]; 4] = [
        &["list", "--bpffs", empty],
        &["status", "--bpffs", empty],
        &["teardown", "--bpffs", file.to_str().unwrap()],
        // Keys to be written under a regular file.
        &[
            "install-keys",
            "--source",
            &absent,
            "--dir",
            file.to_str().unwrap(),
            "--uid",
            "0",
        ],
    ];
    for command in commands {
        let json = [&["--log-format", "json"][..], command].concat();
        let out = ssh_fwd(&json, &[]);
        assert_eq!(out.status.code(), Some(1), "{command:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_json_lines(&stderr);
        assert!(
            stderr.contains("\"level\":\"ERROR\""),
            "{command:?}: {stderr}"
        );
        let out = ssh_fwd(command, &[]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.lines().any(|l| l.starts_with("error: ")),
            "{command:?}: {stderr}"
        );
    }
}

/// A renamed flag's old name still works (the agent goes on to read its
/// mappings file), and the agent says once, at start, what it is now.
#[test]
fn an_old_flag_name_still_works_and_is_warned_of_once_with_its_new_name() {
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("absent.yaml");
    let out = ssh_fwd(
        &[
            "agent",
            "--iface",
            "lo",
            "--iface=lo",
            "--pod-ifaces",
            "off",
            "--mappings",
            mappings.to_str().unwrap(),
            "--bpffs",
            dir.path().join("bpffs").to_str().unwrap(),
        ],
        &[],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    for said in [
        "--iface is deprecated: it is --external-iface now",
        "--pod-ifaces is deprecated: it is --pod-iface-reply now",
    ] {
        assert_eq!(stderr.matches(said).count(), 1, "{said}: {stderr}");
    }
    assert!(stderr.contains("absent.yaml"), "parsed and ran: {stderr}");
}
