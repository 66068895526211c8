//! The workloads, run from the client namespace against one path's target:
//! bulk throughput (iperf3, 1 and 8 streams), 1-byte ping-pong latency,
//! connection setup rate, and the CPU the forwarding costs.

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::Value;
use ssh_fwd_tests::cmd;

use super::bed::{self, Bed, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Metric {
    Gbps1,
    Gbps8,
    P50Us,
    P99Us,
    SetupPerSec,
    CpuMsPerGb,
    CpuMsPer1kConn,
    /// ssh-fwd only: DNATed packets sent straight to the pod's interface.
    RedirectedPct,
}

impl Metric {
    pub const ALL: [Metric; 8] = [
        Metric::Gbps1,
        Metric::Gbps8,
        Metric::P50Us,
        Metric::P99Us,
        Metric::SetupPerSec,
        Metric::CpuMsPerGb,
        Metric::CpuMsPer1kConn,
        Metric::RedirectedPct,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Metric::Gbps1 => "1 stream Gbit/s",
            Metric::Gbps8 => "8 streams Gbit/s",
            Metric::P50Us => "ping-pong p50 µs",
            Metric::P99Us => "ping-pong p99 µs",
            Metric::SetupPerSec => "setups/s",
            Metric::CpuMsPerGb => "CPU ms/GB",
            Metric::CpuMsPer1kConn => "CPU ms/1k conns",
            Metric::RedirectedPct => "redirected %",
        }
    }
}

/// CPU time spent in softirq on all CPUs (where the kernel forwards), plus
/// the user-space forwarder's own time when there is one.
struct CpuClock {
    softirq_ticks: u64,
    forwarder_ticks: u64,
}

impl CpuClock {
    fn now(forwarder: Option<u32>) -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let cpu = stat.lines().next().context("empty /proc/stat")?;
        // cpu user nice system idle iowait irq softirq ...
        let softirq_ticks = cpu
            .split_whitespace()
            .nth(7)
            .and_then(|v| v.parse().ok())
            .context("no softirq column in /proc/stat")?;
        let forwarder_ticks = match forwarder {
            Some(pid) => process_ticks(pid)?,
            None => 0,
        };
        Ok(Self {
            softirq_ticks,
            forwarder_ticks,
        })
    }

    fn ms_since(&self, earlier: &Self) -> f64 {
        let ticks = (self.softirq_ticks - earlier.softirq_ticks)
            + (self.forwarder_ticks - earlier.forwarder_ticks);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks as f64 * 1000.0 / hz
    }
}

/// utime + stime of a process, in clock ticks.
fn process_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields overall.
    let rest = stat.rsplit_once(')').context("odd /proc/pid/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(field(11) + field(12))
}

/// One workload and the metrics it yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// iperf3, one stream.
    Stream1,
    /// iperf3, 8 streams, and the CPU the node spent per GB.
    Stream8,
    /// 1-byte ping-pong on an open connection.
    PingPong,
    /// Connect, one exchange, close; and the CPU per 1,000 connections.
    Setup,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Stream1,
        Workload::Stream8,
        Workload::PingPong,
        Workload::Setup,
    ];
}

/// Runs one workload once; returns each of its metrics' values.
pub fn run(
    workload: Workload,
    bed: &Bed,
    target: &Target,
    forwarder: Option<u32>,
    secs: u64,
) -> anyhow::Result<Vec<(Metric, f64)>> {
    Ok(match workload {
        Workload::Stream1 => vec![(Metric::Gbps1, iperf(bed, target, 1, secs)?.0)],
        Workload::Stream8 => {
            let before = CpuClock::now(forwarder)?;
            let (gbps8, bytes) = iperf(bed, target, 8, secs)?;
            let cpu_ms = CpuClock::now(forwarder)?.ms_since(&before);
            vec![
                (Metric::Gbps8, gbps8),
                (Metric::CpuMsPerGb, cpu_ms / (bytes / 1e9)),
            ]
        }
        Workload::PingPong => {
            let (p50, p99) = ping_pong(bed, target, secs)?;
            vec![(Metric::P50Us, p50), (Metric::P99Us, p99)]
        }
        Workload::Setup => {
            let before = CpuClock::now(forwarder)?;
            let (rate, conns) = setup_rate(bed, target, secs)?;
            let cpu_ms = CpuClock::now(forwarder)?.ms_since(&before);
            vec![
                (Metric::SetupPerSec, rate),
                (Metric::CpuMsPer1kConn, cpu_ms / (conns / 1000.0)),
            ]
        }
    })
}

/// Receiver-side Gbit/s and bytes of one iperf3 run, client -> pod.
fn iperf(bed: &Bed, target: &Target, streams: u32, secs: u64) -> anyhow::Result<(f64, f64)> {
    let out = cmd::run(bed.client.command("timeout").args([
        "--kill-after=2",
        &(secs + 15).to_string(),
        "taskset",
        "-c",
        &bed::client_cpu().to_string(),
        "iperf3",
        "-c",
        &target.ip,
        "-p",
        &target.iperf_port.to_string(),
        "-t",
        &secs.to_string(),
        "-P",
        &streams.to_string(),
        "--connect-timeout",
        "3000",
        "-J",
    ]));
    // iperf3 -J prints its error inside the JSON and exits non-zero.
    let text = match out {
        Ok(text) => text,
        Err(e) => bail!(
            "iperf3 to {}:{} failed: {e:#}",
            target.ip,
            target.iperf_port
        ),
    };
    let v: Value = serde_json::from_str(&text).context("iperf3 -J output")?;
    if let Some(err) = v["error"].as_str() {
        bail!("iperf3: {err}");
    }
    let sum = &v["end"]["sum_received"];
    let bps = sum["bits_per_second"]
        .as_f64()
        .context("iperf3: no result")?;
    let bytes = sum["bytes"].as_f64().context("iperf3: no byte count")?;
    Ok((bps / 1e9, bytes))
}

/// Runs a client helper on `cpu` and parses the JSON it prints.
fn helper_json(bed: &Bed, cpu: usize, args: &[String], secs: u64) -> anyhow::Result<Value> {
    let mut c = bed.client.command("timeout");
    c.args(["--kill-after=2", &(secs + 15).to_string()]);
    c.args(["taskset", "-c", &cpu.to_string()]);
    c.arg(bed::helper_exe()?).arg("bench-helper").args(args);
    let text = cmd::run(&mut c)?;
    serde_json::from_str(&text).with_context(|| format!("helper output {text:?}"))
}

fn ping_pong(bed: &Bed, target: &Target, secs: u64) -> anyhow::Result<(f64, f64)> {
    // On the echo server's CPU: the round trip then measures the path's
    // work, not cross-CPU wake-ups.
    let v = helper_json(
        bed,
        bed::SERVER_CPU,
        &[
            "ping-pong".into(),
            "--to".into(),
            target.socket(target.echo_port),
            "--secs".into(),
            secs.to_string(),
        ],
        secs,
    )?;
    let get = |k: &str| v[k].as_f64().with_context(|| format!("ping-pong: no {k}"));
    Ok((get("p50_us")?, get("p99_us")?))
}

/// Connections per second and the number made.
fn setup_rate(bed: &Bed, target: &Target, secs: u64) -> anyhow::Result<(f64, f64)> {
    let v = helper_json(
        bed,
        bed::client_cpu(),
        &[
            "connect-rate".into(),
            "--to".into(),
            target.socket(target.echo_port),
            "--secs".into(),
            secs.to_string(),
        ],
        secs,
    )?;
    let conns = v["connections"]
        .as_f64()
        .context("connect-rate: no count")?;
    let failed = v["failed"].as_f64().unwrap_or(0.0);
    let elapsed = v["secs"].as_f64().unwrap_or(secs as f64).max(1e-3);
    if failed > conns / 100.0 {
        bail!(
            "{failed} of {} connections to {} failed",
            conns + failed,
            target.ip
        );
    }
    Ok((conns / elapsed, conns))
}
