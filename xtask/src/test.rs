//! `cargo xtask test`: every test, none skipped.

use std::process::Command;

use anyhow::bail;
use ssh_fwd_tests::privilege::REQUIRE_ENV;

use crate::{build_ssh_fwd, run as run_cmd, workspace_root};

pub fn run(args: &[String]) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!(
            "cargo xtask test runs the kernel and network-namespace tests, which cannot run here: \
             {why}. Run it as root (sudo -E cargo xtask test), or run `cargo test` for the tests \
             that need no privileges (the others then say SKIPPED)"
        );
    }
    let bin = build_ssh_fwd()?;
    println!(
        "==> running all tests: host unit tests, eBPF programs on crafted packets, network-namespace end to end"
    );
    // Default members only: the eBPF crate builds for the bpf target, via build.rs.
    run_cmd(
        Command::new(env!("CARGO"))
            .arg("test")
            .args(args)
            .current_dir(workspace_root())
            .env(REQUIRE_ENV, "1")
            .env("SSH_FWD_BIN", bin),
    )
}
