//! Tests that need root, namespaces or BPF either run, or say loudly that
//! they cannot. With `SSH_FWD_REQUIRE_PRIVILEGED=1` (set by `cargo xtask
//! test`) a test that cannot run fails instead of skipping.

use std::io::Write as _;

/// The environment variable that turns skips into failures.
pub const REQUIRE_ENV: &str = "SSH_FWD_REQUIRE_PRIVILEGED";

/// Why this process cannot run privileged tests, if it cannot.
pub fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, CAP_BPF, CAP_NET_ADMIN)".into());
    }
    for tool in [
        "ip", "nsenter", "sshd", "ssh", "timeout", "bpftool", "tcpdump", "ethtool",
    ] {
        if which(tool).is_none() {
            return Some(format!("needs `{tool}` (cargo xtask setup installs it)"));
        }
    }
    None
}

/// Returns true if the test may go on. Otherwise prints a SKIPPED line, or
/// panics when skips are not allowed.
pub fn check(test: &str) -> bool {
    let Some(why) = missing() else { return true };
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{test}: cannot run: {why}; and {REQUIRE_ENV}=1 forbids skipping");
    }
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
