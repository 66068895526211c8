//! `cargo xtask bench ...`: benchmarks, each in namespaces it creates and
//! removes again.

mod bed;
mod chart;
mod cleanup;
pub mod controller;
pub mod convergence;
pub mod datapath;
pub mod helpers;
mod kube_rules;
mod paths;
pub mod progs;
mod proxy;
mod report;
mod stats;
pub mod webhook;
mod workloads;

/// `cargo xtask bench progs`'s options.
#[derive(clap::Args, Debug)]
pub struct ProgsOptions {
    /// Test runs per case (each of 200 iterations; cases of one iteration
    /// run 4 times as often); the median is shown.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// An earlier build's `ssh-fwd` (its eBPF programs are inside) to
    /// measure beside this one in the same run, e.g. one built from main.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub before: Option<std::path::PathBuf>,
    /// Measure this build as "after" instead of building the worktree's.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub after: Option<std::path::PathBuf>,
    /// A flag for the "after" build's agent, which loads the programs
    /// (repeat for several; `--after-arg=--conn-log=all`): the cost of a
    /// setting baked into them, against "before" or against the defaults.
    #[arg(long = "after-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub after_args: Vec<String>,
    /// Run the bench in a VM on this Debian kernel instead (`6.1`, Debian
    /// 12's own, or `6.12`, its newer one; repeat for several), booted
    /// under emulation as `cargo xtask test --kernel` boots it: the
    /// verifier's figures of each program on each kernel, and each case's
    /// ns/packet as a ratio between the kernels (emulated times are not
    /// comparable with this machine's own). Writes nothing to bench/results.
    #[arg(long = "kernel", value_name = "VERSION", conflicts_with = "before")]
    pub kernels: Vec<String>,
    /// With --kernel: boots of each kernel, alternating between the
    /// kernels, each running the bench once with --runs.
    #[arg(long, default_value_t = 3, requires = "kernels")]
    pub boots: usize,
    /// Write each case's runs and the programs' verifier figures as JSON
    /// to FILE (what the guests of --kernel do); skips `cargo xtask setup`,
    /// as a guest runs on a file system already set up.
    #[arg(long, value_name = "FILE", hide = true)]
    pub record: Option<std::path::PathBuf>,
}
