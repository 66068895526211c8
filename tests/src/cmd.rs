//! Running commands with a bounded time and a useful error.

use std::{process::Command, time::Duration};

use anyhow::{Context as _, bail};

/// Runs `cmd` to completion and fails with its stderr if it fails.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("spawning {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS...`, failing with ip's message.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    run(Command::new("ip").args(args)).map(|_| ())
}

/// A `timeout`-wrapped command, so a hung peer cannot hang a test.
pub fn bounded(limit: Duration, program: &str) -> Command {
    let mut c = Command::new("timeout");
    c.arg("--kill-after=2")
        .arg(format!("{}", limit.as_secs().max(1)))
        .arg(program);
    c
}

/// Polls `check` until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

/// Polls `check` until it finds what it looks for (`true`, or `Some`),
/// for at most `limit`, and returns what it found; panics naming `what`
/// if it never does. The one way a test waits for something to become
/// true.
pub fn eventually<F: Found>(what: &str, limit: Duration, mut check: impl FnMut() -> F) -> F::Value {
    let mut found = None;
    wait_until(limit, || {
        found = check().found();
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("timed out after {limit:?} waiting for: {what}"))
}

/// What an [`eventually`] check returns: whether it found it, and what.
pub trait Found {
    type Value;
    fn found(self) -> Option<Self::Value>;
}

impl Found for bool {
    type Value = ();
    fn found(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Found for Option<T> {
    type Value = T;
    fn found(self) -> Option<T> {
        self
    }
}

/// `limit` stretched for a slow machine: times `SSH_FWD_TEST_TIME_SCALE`
/// (a whole number; 1 when unset), which `cargo xtask test --kernel` sets
/// in its emulated VM, where the verifier alone takes seconds per program.
pub fn scaled(limit: Duration) -> Duration {
    let scale = std::env::var("SSH_FWD_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    limit * scale
}
