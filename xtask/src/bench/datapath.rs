//! `cargo xtask bench datapath`: the same workloads through plain routing,
//! ssh-fwd in each attach mode, kube-proxy-style iptables, nftables and IPVS
//! with N Services, and a userspace proxy - all in one run, several rounds,
//! each path in a client -> node -> pod bed of its own, all set up at once
//! and interleaved workload by workload, so the machine's drift lands on
//! every path alike and each is compared with plain routing's sample taken
//! moments apart.

use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{
    bed::Bed,
    paths::{self, Attach, Path, PodIfaces},
    report::{Run, Sample},
    workloads,
};

#[derive(clap::Args, Debug)]
pub struct Options {
    /// One round of 1 s per workload (under two minutes).
    #[arg(long)]
    pub quick: bool,
    /// Rounds per path (default 3, or 1 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Seconds per workload (default 3, or 1 with --quick).
    #[arg(long)]
    pub secs: Option<u64>,
    /// Numbers of kube-proxy Services to install, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,1000,10000")]
    pub services: Vec<usize>,
    /// Measure only paths whose label contains one of these
    /// (comma-separated, e.g. `routing,tc`); plain routing always runs.
    /// Empty: every path.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Run only these workloads (comma-separated), e.g. `setup` while a
    /// profiler watches. The table is printed and not written to
    /// bench/results: a partial run is not a dated figure. Empty: all.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub workloads: Vec<workloads::Workload>,
}

/// Tools the benchmark runs, besides the test harness's.
const TOOLS: [&str; 4] = ["iperf3", "iptables-restore", "nft", "ss"];

pub fn run(opts: &Options) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    for tool in TOOLS {
        if ssh_fwd_tests::privilege::which(tool).is_none() {
            bail!("the benchmark needs `{tool}`; `cargo xtask setup` installs it");
        }
    }
    let rounds = opts.rounds.unwrap_or(if opts.quick { 1 } else { 3 }).max(1);
    let secs = opts.secs.unwrap_or(if opts.quick { 1 } else { 3 }).max(1);
    let bin = crate::build_ssh_fwd_profile(true)?;
    // SAFETY: set before other threads start.
    unsafe { std::env::set_var("SSH_FWD_BIN", &bin) };
    ctrlc::set_handler(|| {
        super::cleanup::after_interrupt();
        std::process::exit(130);
    })?;

    let mut notes = Vec::new();
    let ipvs = paths::ipvs_unavailable();
    if let Some(why) = &ipvs {
        println!("==> IPVS: {why}");
        notes.push(format!("IPVS: {why}."));
    }
    let all_paths: Vec<Path> = path_list(&opts.services, ipvs.is_none())
        .into_iter()
        .filter(|p| {
            *p == Path::Routing
                || opts.only.is_empty()
                || opts.only.iter().any(|o| p.label().contains(o.as_str()))
        })
        .collect();
    let started = Instant::now();
    let beds = all_paths
        .iter()
        .map(|&path| {
            println!("==> setting up {}", path.label());
            Measured::new(path).with_context(|| format!("setting up {}", path.label()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut samples = Vec::new();
    for round in 0..rounds {
        for workload in workloads::Workload::ALL
            .into_iter()
            .filter(|w| opts.workloads.is_empty() || opts.workloads.contains(w))
        {
            // Every path takes its turn at one workload before the next
            // workload starts, so each sample is seconds, not minutes, from
            // plain routing's of the same round; the starting path rotates
            // so no path always follows the same one.
            for k in 0..beds.len() {
                let m = &beds[(k + round) % beds.len()];
                let label = m.path.label();
                let values = m
                    .run(workload, secs)
                    .with_context(|| format!("measuring {label}, {workload:?}"))?;
                println!(
                    "==> round {}/{rounds} {:<9} {label:<28} {}",
                    round + 1,
                    format!("{workload:?}"),
                    one_line(&values)
                );
                samples.extend(values.into_iter().map(|(metric, value)| Sample {
                    round,
                    path: label.clone(),
                    metric,
                    value,
                }));
            }
        }
    }
    for m in &beds {
        if let Some(share) = m.installed.redirected_share() {
            samples.push(Sample {
                round: 0,
                path: m.path.label(),
                metric: workloads::Metric::RedirectedPct,
                value: share * 100.0,
            });
        }
    }
    drop(beds);
    notes.push(
        "CPU: softirq time on all CPUs during the 8-stream and setup-rate workloads (plus the \
         proxy process's own CPU time for the userspace proxy); it includes the client's and \
         the pod's own receive work, which is the same for every path, so compare the ratios."
            .into(),
    );
    notes.push(
        "kube-proxy rules: nat table only (externalTrafficPolicy Cluster: masquerade), \
         measured Service last; kube-proxy's filter-table rules are not installed."
            .into(),
    );
    let run = Run {
        paths: all_paths,
        samples,
        notes,
        rounds,
        secs,
        quick: opts.quick,
    };
    println!("\n{}", run.markdown());
    if !opts.workloads.is_empty() {
        println!(
            "measured in {:.0} s (some workloads only: nothing written)",
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let dir = crate::workspace_root().join("bench/results");
    for file in run.write(&dir)? {
        println!("wrote {}", file.display());
    }
    let png = dir.join(format!("{}.png", run.stem()));
    match super::chart::draw(&run, &png) {
        Ok(()) => println!("wrote {}", png.display()),
        Err(e) => eprintln!("warning: no chart: {e:#}"),
    }
    println!("measured in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn path_list(services: &[usize], ipvs: bool) -> Vec<Path> {
    let mut all = vec![
        Path::Routing,
        Path::Routing6,
        Path::SshFwd(Attach::Tc, PodIfaces::Auto),
        Path::SshFwd(Attach::Tc, PodIfaces::Off),
        Path::SshFwd(Attach::XdpGeneric, PodIfaces::Auto),
        Path::SshFwd(Attach::Xdp, PodIfaces::Auto),
        Path::SshFwd6(Attach::Tc),
    ];
    all.extend(services.iter().map(|&n| Path::Iptables(n)));
    all.extend(services.iter().map(|&n| Path::Nftables(n)));
    if ipvs {
        all.extend(services.iter().map(|&n| Path::Ipvs(n)));
    }
    all.push(Path::Proxy);
    all
}

/// One path in a bed of its own, kept for the whole run. Field order is
/// drop order: what the path installed goes before the namespaces.
struct Measured {
    path: Path,
    installed: paths::Installed,
    bed: Bed,
}

impl Measured {
    fn new(path: Path) -> anyhow::Result<Self> {
        let bed = Bed::new()?;
        let installed = paths::install(path, &bed)?;
        let measured = Self {
            path,
            installed,
            bed,
        };
        // A first exchange, unmeasured: the first packets of a fresh bed
        // wait for neighbour resolution, which is no part of the path's
        // cost.
        measured
            .run(workloads::Workload::PingPong, 1)
            .context("a first exchange through the path")?;
        Ok(measured)
    }

    fn run(
        &self,
        workload: workloads::Workload,
        secs: u64,
    ) -> anyhow::Result<Vec<(workloads::Metric, f64)>> {
        workloads::run(
            workload,
            &self.bed,
            &self.path.target(),
            self.installed.forwarder_pid(),
            secs,
        )
    }
}

fn one_line(values: &[(workloads::Metric, f64)]) -> String {
    values
        .iter()
        .map(|(m, v)| format!("{}={v:.1}", m.label()))
        .collect::<Vec<_>>()
        .join("  ")
}
