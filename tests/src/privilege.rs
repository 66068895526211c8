//! Tests that need root, network namespaces or BPF are marked
//! `#[ignore = "..."]`: a plain `cargo test` reports them as ignored, never
//! as passed. `cargo xtask test` runs them (`--include-ignored`), and each
//! starts with [`require`], which fails with the reason when the machine
//! cannot run it.

/// Why this process cannot run privileged tests, if it cannot.
pub fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, CAP_BPF, CAP_NET_ADMIN)".into());
    }
    for tool in [
        "ip",
        "nsenter",
        "sshd",
        "ssh",
        "timeout",
        "bpftool",
        "tcpdump",
        "ethtool",
        "prometheus",
        "promtool",
    ] {
        if which(tool).is_none() {
            return Some(format!("needs `{tool}` (cargo xtask setup installs it)"));
        }
    }
    None
}

/// Fails the calling test, saying why, when it cannot run here.
pub fn require() {
    if let Some(why) = missing() {
        panic!("this test cannot run here: {why}; run it with `sudo -E cargo xtask test`");
    }
}

pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
