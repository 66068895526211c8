//! `cargo xtask`: what needs root, installs or orchestration.

mod bench;
mod demo;
#[cfg(test)]
mod docs;
mod image;
#[cfg(test)]
mod module_graph;
mod release;
mod setup;
mod soak;
mod test;
mod vm;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need and is missing: the nightly's
    /// rust-src, bpf-linker built against the nightly's LLVM, the musl
    /// target (the container image's static binary), and the Debian
    /// packages the tests use. Quick when everything is there.
    Setup,
    /// Build, then show a real ssh login through the forwarder in network
    /// namespaces (client, node running the agent, pod running sshd), and
    /// remove everything again.
    Demo,
    /// Set up, check formatting and clippy (every crate, the eBPF crate
    /// included), build, and run every test: host unit tests, the kernel
    /// programs on crafted packets, and the network-namespace end-to-end
    /// tests. Needs root; a test that cannot run fails instead of skipping.
    /// With --unprivileged: formatting, clippy and the tests that need no
    /// root, for a quick signal without root.
    Test(test::Options),
    /// Build the container image (deploy/Dockerfile) offline: a static
    /// ssh-fwd (musl) in an otherwise empty image, with podman; no registry.
    Image(image::Options),
    /// Everything a site installs, built here into target/release/VERSION
    /// (or --out DIR): the image for amd64 and arm64 as one OCI archive,
    /// one install manifest per combination of deploy/'s components pinned
    /// to the image's digest, CHANGELOG.md, the licences and SHA256SUMS
    /// (docs/release.md). VERSION must be the workspace's.
    Release(release::Options),
    /// The cluster in network namespaces (two nodes, the fake API server,
    /// agents with --announce l2, two controllers) under every load and
    /// fault at once for minutes: long sessions, logins, scp, a SYN flood,
    /// a client at its quota, pod churn; agents, controllers, links, the
    /// API and sshd broken on a seeded, overlapping schedule. Prints a
    /// summary and writes bench/results/soak-DATE.md; fails on any session
    /// lost, byte corrupted or table entry leaked. Needs root.
    Soak(soak::Options),
    /// Benchmarks (not tests): `cargo xtask bench datapath`, `cargo xtask
    /// bench convergence`, `cargo xtask bench controller`, `cargo xtask bench
    /// webhook`.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// Programs the benchmarks run inside their namespaces.
    #[command(hide = true)]
    BenchHelper {
        #[command(subcommand)]
        which: bench::helpers::Helper,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// The Kubernetes agent with N Services: time until all are in the maps,
    /// p50/p99 delay from one Service change to its map entry, resident memory.
    ///
    /// With --foreign N, again with N other Services and EndpointSlices (not
    /// ssh-fwd's) in the cluster; with --scale, the time and memory for each
    /// number of Services; with --before BIN, an earlier build measured
    /// beside this one, scenario by scenario, in the same run.
    Convergence(bench::convergence::Options),
    /// The controller's admission webhook over HTTPS: p50/p99 of one
    /// admission, N at once, and answers while the API server is slow.
    Webhook(bench::webhook::Options),
    /// The controller with N labelled pods: time until all are published,
    /// p50/p99 delay from a new pod to its endpoint, restart cost, memory.
    ///
    /// With --unlabelled N, again with N pods that do not ask for SSH in the
    /// cluster; with --before BIN, an earlier build measured beside this one.
    Controller(bench::controller::Options),
    /// Each kernel program's cost per packet, by case (hit, miss, reply,
    /// connection-tracking states), through BPF_PROG_TEST_RUN in a bench
    /// bed, as a markdown table.
    ///
    /// With --before BIN, an earlier build measured beside this one, case by
    /// case, the two alternating run by run. With --kernel VERSION (repeat
    /// for several), the same in VMs on Debian 12's kernels under emulation:
    /// the verifier's figures by kernel, and each case's ratio between them.
    Progs(bench::ProgsOptions),
    /// Plain routing, ssh-fwd (each attach mode), kube-proxy-style iptables,
    /// nftables and IPVS with N Services, and a userspace proxy, side by
    /// side in namespaces: throughput (1 and 8 streams), ping-pong latency,
    /// connection setup rate and forwarding CPU, each also as a ratio to
    /// plain routing. Writes bench/results/datapath.{md,json,png}.
    Datapath(bench::datapath::Options),
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Demo => setup::run().and_then(|()| demo::run()),
        Task::Bench {
            which: Bench::Convergence(options),
        } => {
            // A single measurement runs inside an outer run, set up already.
            let setup = if options.only_bin.is_some() {
                Ok(())
            } else {
                setup::run()
            };
            setup.and_then(|()| bench::convergence::run(&options))
        }
        Task::Bench {
            which: Bench::Controller(options),
        } => bench::controller::run(options),
        Task::Bench {
            which: Bench::Webhook(options),
        } => bench::webhook::run(options),
        Task::Bench {
            which: Bench::Datapath(options),
        } => setup::run().and_then(|()| bench::datapath::run(&options)),
        Task::Bench {
            which: Bench::Progs(options),
        } => {
            // A guest of `--kernel` runs on the host's file system, set up.
            let setup = if options.record.is_some() {
                Ok(())
            } else {
                setup::run()
            };
            setup.and_then(|()| bench::progs::run(options))
        }
        Task::BenchHelper { which } => bench::helpers::run(which),
        Task::Image(options) => setup::run().and_then(|()| image::run(&options)),
        Task::Release(options) => setup::run().and_then(|()| release::run(&options)),
        Task::Test(options) => test::run(&options),
        Task::Soak(options) => setup::run().and_then(|()| soak::run(&options)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a command with inherited output; fails on a non-zero exit.
pub fn run(cmd: &mut std::process::Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {cmd:?}: {e}"))?;
    anyhow::ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

/// `cargo` in the workspace, without the variables `cargo run` set for
/// xtask (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...): a build script that
/// watches one (ring: `CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`) would
/// otherwise rebuild, with everything above it (rustls, kube), on every
/// `cargo xtask test`, and again on the next plain `cargo build`.
fn cargo() -> std::process::Command {
    in_workspace(std::process::Command::new(env!("CARGO")))
}

/// [`cargo`] through rustup's proxy, with `toolchain` (`nightly`).
fn cargo_on(toolchain: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("cargo");
    cmd.arg(format!("+{toolchain}"));
    let mut cmd = in_workspace(cmd);
    cmd.env("RUSTUP_TOOLCHAIN", toolchain)
        .env_remove("RUSTC")
        .env_remove("RUSTDOC");
    cmd
}

/// `cmd` (a cargo) run in the workspace without the variables `cargo run`
/// sets for xtask.
fn in_workspace(mut cmd: std::process::Command) -> std::process::Command {
    for (name, _) in std::env::vars_os() {
        let set_by_cargo_run = name.to_str().is_some_and(|n| {
            ["CARGO_PKG_", "CARGO_MANIFEST_"]
                .iter()
                .any(|p| n.starts_with(p))
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                ]
                .contains(&n)
        });
        if set_by_cargo_run {
            cmd.env_remove(name);
        }
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// Builds the `ssh-fwd` binary (debug, or release for benchmarks) and
/// returns its path.
pub fn build_ssh_fwd_profile(release: bool) -> anyhow::Result<std::path::PathBuf> {
    println!(
        "==> building ssh-fwd{} (with its eBPF programs)",
        if release { " --release" } else { "" }
    );
    let mut cmd = cargo();
    cmd.args(["build", "--package", "ssh-fwd"]);
    if release {
        cmd.arg("--release");
    }
    run(&mut cmd)?;
    Ok(target_dir()
        .join(if release { "release" } else { "debug" })
        .join("ssh-fwd"))
}

/// Cargo's target directory.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or(workspace_root().join("target"), Into::into)
}

/// Builds the static `ssh-fwd` the container image carries (musl, with
/// `profile`) and returns its path.
pub fn build_static(profile: &str) -> anyhow::Result<std::path::PathBuf> {
    let target = ssh_fwd_tests::image::STATIC_TARGET;
    println!("==> building a static ssh-fwd ({target}, profile {profile}) for the container image");
    run(cargo().args([
        "build",
        "--package",
        "ssh-fwd",
        "--target",
        target,
        "--profile",
        profile,
    ]))?;
    Ok(ssh_fwd_tests::image::static_binary_path(profile))
}

/// The debug build, for tests and the demo.
pub fn build_ssh_fwd() -> anyhow::Result<std::path::PathBuf> {
    build_ssh_fwd_profile(false)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn benchmark_options_keep_their_defaults() {
        let cli = Cli::try_parse_from(["xtask", "bench", "webhook", "--slow", "3"]).unwrap();
        let Task::Bench {
            which: Bench::Webhook(options),
        } = cli.task
        else {
            panic!("not bench webhook");
        };
        assert_eq!(
            (options.sequential, options.concurrent, options.slow),
            (300, 500, 3)
        );
        let cli = Cli::try_parse_from(["xtask", "bench", "datapath", "--only", "tc,xdp"]).unwrap();
        let Task::Bench {
            which: Bench::Datapath(options),
        } = cli.task
        else {
            panic!("not bench datapath");
        };
        assert_eq!(options.services, [1, 1000, 10000]);
        assert_eq!(options.only, ["tc", "xdp"]);
    }
}
