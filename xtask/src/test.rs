//! `cargo xtask test`: the lints, then every test, none skipped.
//!
//! Tests that need root, namespaces or BPF are `#[ignore]`d so that a plain
//! `cargo test` reports them as ignored instead of passing them; this runs
//! them with `--include-ignored`. `--unprivileged` is the lane for a
//! contributor without root: the lints and the tests that need no
//! privileges, the others reported as ignored.

mod digest;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::{build_static, cargo, run as run_cmd, workspace_root};

/// The nightly the eBPF crate is built with (by aya-build) and linted with.
const EBPF_TOOLCHAIN: &str = "+nightly";

#[derive(clap::Args, Debug)]
pub struct Options {
    /// Skip `cargo fmt --check` and clippy (for a quick rerun of tests).
    #[arg(long)]
    no_lints: bool,
    /// Only what needs no root: formatting, clippy and the unprivileged
    /// tests (unit tests, mocked-API tests, deploy/ checks, the docs' links
    /// and the module graph); the kernel and namespace tests are reported
    /// as ignored. Installs nothing: it expects the toolchain `cargo xtask
    /// setup` installs (the nightly's rust-src and bpf-linker).
    #[arg(long)]
    unprivileged: bool,
    /// Run a chosen set of the privileged tests in a VM on this Debian
    /// kernel instead (`6.1`, Debian 12's own): the programs on crafted
    /// packets, a login through clsact, a restart keeping a session,
    /// hairpin, the announcement, the kernel-feature tests. Boots under emulation with virtme-ng; installs
    /// what it needs (qemu-system-x86, busybox-static, kmod, virtme-ng) and
    /// downloads the kernel package into target/kernels/.
    #[arg(long, value_name = "VERSION")]
    kernel: Option<String>,
    /// With --kernel: only the program tests on crafted packets, which put
    /// every program through that kernel's verifier (what CI runs; about
    /// two minutes).
    #[arg(long, requires = "kernel")]
    quick: bool,
    /// Extra arguments for `cargo test`, then after `--` the test
    /// binaries' own: a test name filter, `--test integration` for the
    /// privileged tests' binary alone (its tests are named `module::test`,
    /// as `datapath::`), `-- --exact NAME`, `-- --nocapture`. With
    /// --kernel: filters of the VM's set.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if options.unprivileged {
        return unprivileged(options);
    }
    crate::setup::run()?;
    if let Some(kernel) = &options.kernel {
        return crate::vm::run(kernel, options.quick, &options.args);
    }
    all(options)
}

/// The lints and `cargo test` as it is: the privileged tests are ignored.
fn unprivileged(options: &Options) -> anyhow::Result<()> {
    if !options.no_lints {
        lint()?;
    }
    println!("==> running the tests that need no privileges (the others are reported as ignored)");
    let (cargo_args, test_args) = split_at_dashes(&options.args);
    run_cmd(
        cargo()
            .arg("test")
            .args(cargo_args)
            .arg("--")
            .args(test_args),
    )
}

fn all(options: &Options) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!(
            "cargo xtask test runs the kernel and network-namespace tests, which cannot run here: \
             {why}. Run it as root (sudo -E cargo xtask test), or run `cargo xtask test \
             --unprivileged` for the lints and the tests that need no privileges (the others \
             are reported as ignored)"
        );
    }
    if !options.no_lints {
        lint()?;
    }
    // Every test binary and the ssh-fwd binary the tests run, in the one
    // cargo call whose features `cargo test` uses: `cargo build -p
    // ssh-fwd` would resolve features for ssh-fwd alone and build every
    // dependency a second time (two minutes of a clean CI run). ssh-fwd's
    // own integration tests make cargo build its binary here.
    println!("==> building the tests and ssh-fwd (with its eBPF programs)");
    run_cmd(cargo().args(["test", "--no-run"]))?;
    let bin = crate::target_dir().join("debug").join("ssh-fwd");
    // The container tests put this one in the image they run.
    let static_bin = build_static(ssh_fwd_tests::image::TEST_PROFILE)?;
    println!(
        "==> running all tests: host unit tests, eBPF programs on crafted packets, network-namespace end to end"
    );
    let (cargo_args, test_args) = split_at_dashes(&options.args);
    // Default members only: the eBPF crate builds for the bpf target, via build.rs.
    // Every test binary runs even after one fails: a CI run then reports
    // every failure at once.
    run_telling_failures(
        cargo()
            .args(["test", "--no-fail-fast"])
            .args(cargo_args)
            .arg("--")
            .arg("--include-ignored")
            .args(test_args)
            .env("SSH_FWD_BIN", bin)
            .env("SSH_FWD_STATIC_BIN", static_bin),
    )
}

/// Runs `cmd` (a `cargo test`) with its output passed through as it
/// comes, and if it fails, tells each failing test's message again at
/// the end, where a log cut to its head and tail still shows them.
fn run_telling_failures(cmd: &mut Command) -> anyhow::Result<()> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let mut output = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut out = std::io::stdout().lock();
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line);
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {cmd:?}"))?;
    if status.success() {
        return Ok(());
    }
    let failures = digest::failures(&output);
    if !failures.is_empty() {
        println!("\n==> {} test(s) failed:", failures.len());
        for (name, lines) in &failures {
            println!("--- {name}");
            for line in lines {
                println!("    {line}");
            }
        }
    }
    bail!("{cmd:?} failed ({status})")
}

/// `cargo fmt --check`, and clippy with warnings as errors for every crate:
/// the host crates with all their targets, and the eBPF crate for the BPF
/// target with the nightly that builds it.
fn lint() -> anyhow::Result<()> {
    println!("==> cargo fmt --check");
    run_cmd(cargo().args(["fmt", "--all", "--check"]))
        .map_err(|e| e.context("formatting differs; run `cargo fmt --all`"))?;
    println!("==> cargo clippy (host crates, all targets) -D warnings");
    run_cmd(cargo().args(["clippy", "--quiet", "--all-targets", "--", "-D", "warnings"]))?;
    println!("==> cargo clippy (eBPF crate, bpfel-unknown-none) -D warnings");
    run_cmd(
        Command::new("cargo")
            .arg(EBPF_TOOLCHAIN)
            .args([
                "clippy",
                "--quiet",
                "--package",
                "ssh-fwd-ebpf",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ])
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .current_dir(workspace_root()),
    )
}

/// `cargo xtask test FILTER -- --nocapture` passes `FILTER` to cargo and
/// `--nocapture` to the test binaries.
fn split_at_dashes(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_after_dashes_go_to_the_test_binaries() {
        let args: Vec<String> = ["login", "--", "--nocapture"].map(String::from).into();
        let (cargo, tests) = split_at_dashes(&args);
        assert_eq!(cargo, ["login"]);
        assert_eq!(tests, ["--nocapture"]);
        let (cargo, tests) = split_at_dashes(&args[..1]);
        assert_eq!((cargo.len(), tests.len()), (1, 0));
    }
}
