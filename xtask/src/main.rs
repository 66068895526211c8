//! `cargo xtask`: what needs root, installs or orchestration.

mod bench;
mod demo;
mod image;
mod setup;
mod test;

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
    Test {
        /// Skip `cargo fmt --check` and clippy (for a quick rerun of tests).
        #[arg(long)]
        no_lints: bool,
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the container image (deploy/Dockerfile) offline: a static
    /// ssh-fwd (musl) in an otherwise empty image, with podman; no registry.
    Image {
        /// Build the binary with the dev profile the tests use (quicker to
        /// build, unoptimised, no debug info) instead of `--release`.
        #[arg(long)]
        test_profile: bool,
        /// The image name; a short one is named as Docker and containerd
        /// name it (`ssh-fwd:dev` is `docker.io/library/ssh-fwd:dev`), so
        /// that a kind or minikube node finds the image the manifests name.
        #[arg(long, default_value = ssh_fwd_tests::image::DEV_TAG)]
        tag: String,
        /// Also write the image to FILE as a docker-archive, for
        /// `kind load image-archive FILE` or `minikube image load FILE`.
        #[arg(long, value_name = "FILE")]
        save: Option<std::path::PathBuf>,
    },
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
    Convergence {
        #[arg(long, default_value_t = 10_000)]
        services: usize,
        #[arg(long, default_value_t = 200)]
        changes: usize,
        #[arg(long, default_value_t = 0)]
        foreign: usize,
        #[arg(long, value_delimiter = ',')]
        scale: Vec<usize>,
        /// An earlier build's `ssh-fwd` (its eBPF programs are inside) to
        /// measure beside this one in the same run, e.g. one built from main.
        #[arg(long, value_name = "SSH_FWD_BINARY")]
        before: Option<std::path::PathBuf>,
        /// Measure this build as "after" instead of building the worktree's.
        #[arg(long, value_name = "SSH_FWD_BINARY")]
        after: Option<std::path::PathBuf>,
        /// One measurement of this binary, printed as JSON (used by the
        /// benchmark itself).
        #[arg(long, hide = true)]
        only_bin: Option<std::path::PathBuf>,
    },
    /// The controller's admission webhook over HTTPS: p50/p99 of one
    /// admission, N at once, and answers while the API server is slow.
    Webhook {
        #[arg(long, default_value_t = 300)]
        sequential: usize,
        #[arg(long, default_value_t = 500)]
        concurrent: usize,
        #[arg(long, default_value_t = 10)]
        slow: usize,
    },
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
    /// case, the two alternating run by run.
    Progs {
        /// Test runs per case (each of 200 iterations; cases of one
        /// iteration run 4 times as often); the median is shown.
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// An earlier build's `ssh-fwd` (its eBPF programs are inside) to
        /// measure beside this one in the same run, e.g. one built from main.
        #[arg(long, value_name = "SSH_FWD_BINARY")]
        before: Option<std::path::PathBuf>,
        /// Measure this build as "after" instead of building the worktree's.
        #[arg(long, value_name = "SSH_FWD_BINARY")]
        after: Option<std::path::PathBuf>,
    },
    /// Plain routing, ssh-fwd (each attach mode), kube-proxy-style iptables,
    /// nftables and IPVS with N Services, and a userspace proxy, side by
    /// side in namespaces: throughput (1 and 8 streams), ping-pong latency,
    /// connection setup rate and forwarding CPU, each also as a ratio to
    /// plain routing. Writes bench/results/datapath.{md,json,png}.
    Datapath {
        /// One round of 1 s per workload (under two minutes).
        #[arg(long)]
        quick: bool,
        /// Rounds per path (default 3, or 1 with --quick).
        #[arg(long)]
        rounds: Option<usize>,
        /// Seconds per workload (default 3, or 1 with --quick).
        #[arg(long)]
        secs: Option<u64>,
        /// Numbers of kube-proxy Services to install, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,1000,10000")]
        services: Vec<usize>,
        /// Measure only paths whose label contains one of these
        /// (comma-separated, e.g. `routing,tc`); plain routing always runs.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Demo => setup::run().and_then(|()| demo::run()),
        Task::Bench {
            which:
                Bench::Convergence {
                    services,
                    changes,
                    foreign,
                    scale,
                    before,
                    after,
                    only_bin,
                },
        } => {
            let options = bench::convergence::Options {
                services,
                changes,
                foreign,
                scale,
                before,
                after,
                only_bin,
            };
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
            which:
                Bench::Webhook {
                    sequential,
                    concurrent,
                    slow,
                },
        } => bench::webhook::run(sequential, concurrent, slow),
        Task::Bench {
            which:
                Bench::Datapath {
                    quick,
                    rounds,
                    secs,
                    services,
                    only,
                },
        } => setup::run().and_then(|()| {
            bench::datapath::run(&bench::datapath::Options {
                quick,
                rounds,
                secs,
                services,
                only,
            })
        }),
        Task::Bench {
            which:
                Bench::Progs {
                    runs,
                    before,
                    after,
                },
        } => setup::run().and_then(|()| bench::progs::run(runs, before, after)),
        Task::BenchHelper { which } => bench::helpers::run(which),
        Task::Image {
            test_profile,
            tag,
            save,
        } => setup::run().and_then(|()| {
            image::run(&image::Options {
                test_profile,
                tag,
                save,
            })
        }),
        Task::Test { no_lints, args } => setup::run().and_then(|()| test::run(!no_lints, &args)),
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
    let mut cmd = std::process::Command::new(env!("CARGO"));
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
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or(workspace_root().join("target"), Into::into);
    Ok(target
        .join(if release { "release" } else { "debug" })
        .join("ssh-fwd"))
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
