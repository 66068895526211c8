//! `cargo xtask bench convergence`: how fast the Kubernetes agent gets N
//! Services into the maps, how long one change takes to reach its map entry,
//! and what the agent costs in memory. Everything runs in namespaces this
//! command creates; the API server is in-process and only reachable there.

use std::{
    io::{Read as _, Seek as _},
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    fake_api::{FakeApi, Kind},
    topology::EXT_IFACE,
};

/// Frontend ports per SSH IP (the default --port-range 20000-27999), from
/// [`FIRST_PORT`].
const PORTS_PER_IP: usize = 8000;
const FIRST_PORT: usize = 20_000;

/// What to measure.
#[derive(clap::Args, Debug)]
pub struct Options {
    #[arg(long, default_value_t = 10_000)]
    pub services: usize,
    #[arg(long, default_value_t = 200)]
    pub changes: usize,
    /// Services and EndpointSlices of others (not selected) in the cluster,
    /// for the second row; 0 skips it.
    #[arg(long, default_value_t = 0)]
    pub foreign: usize,
    /// Numbers of Services for the scale curve; empty skips it.
    #[arg(long, value_delimiter = ',')]
    pub scale: Vec<usize>,
    /// An earlier build's `ssh-fwd` (its eBPF programs are inside) to
    /// measure beside this one in the same run, scenario by scenario, e.g.
    /// one built from main.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub before: Option<PathBuf>,
    /// Measure this build as "after" instead of building the worktree's.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub after: Option<PathBuf>,
    /// One measurement of this binary, printed as JSON (used by the
    /// benchmark itself).
    #[arg(long, hide = true)]
    pub only_bin: Option<PathBuf>,
}

/// One scenario's figures for one binary.
#[derive(Debug, Default, Deserialize, Serialize)]
struct Figures {
    /// Seconds from the agent's start to all mappings in the maps (or as
    /// many as fit, or to its refusal, when they do not fit).
    converged_s: f64,
    installed: usize,
    /// Why the maps could not take them all, if so.
    refused: Option<String>,
    rss_mib: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// A scenario: our Services, others' objects, endpoint changes.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    services: usize,
    foreign: usize,
    changes: usize,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    if let Some(bin) = &options.only_bin {
        let scenario = Scenario {
            services: options.services,
            foreign: options.foreign,
            changes: options.changes,
        };
        let figures = measure_with(bin, scenario)?;
        println!("RESULT {}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    let after = match &options.after {
        Some(bin) => bin.clone(),
        None => crate::build_ssh_fwd_profile(true)?,
    };
    let mut builds: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(before) = &options.before {
        builds.push(("before", before.clone()));
    }
    builds.push(("after", after));
    let main = Scenario {
        services: options.services,
        foreign: 0,
        changes: options.changes,
    };
    let mut rows = vec![(main, measure_all(&builds, main)?)];
    if options.foreign > 0 {
        let crowded = Scenario {
            foreign: options.foreign,
            ..main
        };
        rows.push((crowded, measure_all(&builds, crowded)?));
    }
    let mut curve = Vec::new();
    for &services in &options.scale {
        let point = Scenario {
            services,
            foreign: 0,
            changes: 0,
        };
        curve.push((point, measure_all(&builds, point)?));
    }
    print_tables(&builds, &rows, &curve);
    Ok(())
}

/// Runs `scenario` with each build, each in a process of its own (this
/// program again), so each starts from a clean slate.
fn measure_all(builds: &[(&str, PathBuf)], scenario: Scenario) -> anyhow::Result<Vec<Figures>> {
    builds
        .iter()
        .map(|(label, bin)| {
            println!("==> {label}: {scenario:?}");
            let out = std::process::Command::new(std::env::current_exe()?)
                .args(["bench", "convergence", "--only-bin"])
                .arg(bin)
                .args(["--services", &scenario.services.to_string()])
                .args(["--foreign", &scenario.foreign.to_string()])
                .args(["--changes", &scenario.changes.to_string()])
                .stderr(std::process::Stdio::inherit())
                .output()
                .context("running one measurement")?;
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .with_context(|| format!("{label}: no result ({}): {text}", out.status))?;
            Ok(serde_json::from_str(line)?)
        })
        .collect()
}

fn print_tables(
    builds: &[(&str, PathBuf)],
    rows: &[(Scenario, Vec<Figures>)],
    curve: &[(Scenario, Vec<Figures>)],
) {
    let labels: Vec<&str> = builds.iter().map(|(l, _)| *l).collect();
    println!();
    println!("| figure | {} |", labels.join(" | "));
    println!("|---|{}", "---|".repeat(labels.len()));
    for (scenario, figures) in rows {
        let what = match scenario.foreign {
            0 => format!("{} Services", scenario.services),
            n => format!(
                "{} Services + {n} others' Services and EndpointSlices",
                scenario.services
            ),
        };
        let cells = |f: &dyn Fn(&Figures) -> String| -> String {
            figures.iter().map(f).collect::<Vec<_>>().join(" | ")
        };
        println!(
            "| {what}: agent start to all in the maps | {} |",
            cells(&|f| format!("{:.2} s", f.converged_s))
        );
        if scenario.changes > 0 {
            println!(
                "| {what}: one endpoint change to its map entry, p50 / p99 ({} changes) | {} |",
                scenario.changes,
                cells(&|f| format!(
                    "{:.1} ms / {:.1} ms",
                    f.p50_ms.unwrap_or_default(),
                    f.p99_ms.unwrap_or_default()
                ))
            );
        }
        println!(
            "| {what}: agent resident memory | {} |",
            cells(&|f| format!("{:.1} MiB", f.rss_mib))
        );
    }
    if curve.is_empty() {
        return;
    }
    println!();
    println!(
        "| Services | {} |",
        labels
            .iter()
            .map(|l| format!("{l}: time, memory"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---:|{}", "---|".repeat(labels.len()));
    for (scenario, figures) in curve {
        let cells: Vec<String> = figures
            .iter()
            .map(|f| match &f.refused {
                None if f.installed < scenario.services => format!(
                    "{:.2} s, {:.1} MiB ({} installed: the maps' capacity; the newest left out)",
                    f.converged_s, f.rss_mib, f.installed
                ),
                None => format!("{:.2} s, {:.1} MiB", f.converged_s, f.rss_mib),
                Some(why) => format!(
                    "refused after {:.2} s ({why}), {:.1} MiB",
                    f.converged_s, f.rss_mib
                ),
            })
            .collect();
        println!("| {} | {} |", scenario.services, cells.join(" | "));
    }
}

/// How many SSH IPs the Services need (two at least, as the 10,000 row has
/// always used).
fn ip_count(services: usize) -> usize {
    services.div_ceil(PORTS_PER_IP).max(2)
}

/// Whether the agent `bin` takes `--max-mappings`.
fn sizes_tables(bin: &Path) -> anyhow::Result<bool> {
    let help = std::process::Command::new(bin)
        .args(["agent", "--help"])
        .output()
        .with_context(|| format!("running {} agent --help", bin.display()))?;
    Ok(String::from_utf8_lossy(&help.stdout).contains("--max-mappings"))
}

fn ssh_ip(n: usize) -> String {
    format!("198.18.0.{}", 10 + n)
}

fn measure_with(bin: &Path, scenario: Scenario) -> anyhow::Result<Figures> {
    // SAFETY: set before this process starts other threads.
    unsafe { std::env::set_var("SSH_FWD_BIN", bin) };
    ctrlc::set_handler(|| {
        ssh_fwd_tests::netns::remove_all_of_this_process();
        std::process::exit(130);
    })?;
    let Scenario {
        services,
        foreign,
        changes,
    } = scenario;
    let ips = ip_count(services);
    let per_ip = services.div_ceil(ips);
    let topo = Topology::single_node(0)?;
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node)?;
    eprintln!("==> creating {services} Services and EndpointSlices, and {foreign} of others'");
    for i in 0..services {
        api.apply(Kind::Service, service(i, per_ip));
        api.apply(Kind::EndpointSlice, slice(i, 0));
    }
    for i in 0..foreign {
        api.apply(Kind::Service, foreign_service(i));
        api.apply(Kind::EndpointSlice, foreign_slice(i));
    }
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig())?;
    let bpffs = Bpffs::new()?;
    let mut args: Vec<String> = vec![
        "--kubernetes".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ];
    for n in 0..ips {
        args.extend(["--ssh-ip".into(), ssh_ip(n)]);
    }
    args.extend([
        "--port-range".into(),
        "20000-27999".into(),
        "--resync-interval".into(),
        "10m".into(),
    ]);
    // Past the default capacity, a build that can size its tables is asked
    // for room for all (an older one shows its cut).
    let default_capacity = ssh_fwd_common::maps::MAX_MAPPINGS as usize;
    if services > default_capacity && sizes_tables(bin)? {
        args.extend(["--max-mappings".into(), services.to_string()]);
    }

    eprintln!("==> starting the agent and waiting until all {services} are in the maps");
    let started = SystemTime::now();
    let mut agent = Agent::spawn(node, &[EXT_IFACE], &bpffs, &args)?;
    let (done, refused) = wait_converged(&mut agent, Duration::from_secs(300))?;
    let converged = done.duration_since(started).unwrap_or_default();
    let listing = bpffs.list()?;
    let installed = listing["mappings"].as_array().map_or(0, Vec::len);
    // Past the maps' capacity a build that keeps the oldest Services
    // installs what fits and says so; anything else short is a failure.
    let capped = installed < services
        && (agent.log().contains("more mappings than a node holds")
            || agent.log().contains("more mappings than this node holds"));
    if refused.is_none() && installed != services && !capped {
        bail!("only {installed} of {services} mappings installed");
    }
    let rss_kib = rss_kib(agent.pid().context("agent pid")?)?;
    let mut figures = Figures {
        converged_s: converged.as_secs_f64(),
        installed,
        refused,
        rss_mib: rss_kib as f64 / 1024.0,
        ..Figures::default()
    };
    if changes > 0 && figures.refused.is_none() {
        let delays = change_delays(&api, &agent, services, per_ip, changes)?;
        let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];
        figures.p50_ms = Some(pct(0.50).as_secs_f64() * 1e3);
        figures.p99_ms = Some(pct(0.99).as_secs_f64() * 1e3);
    }
    // Where the time went: the agent's log, kept when asked for.
    if let Some(dir) = std::env::var_os("BENCH_KEEP_LOGS") {
        let kept = Path::new(&dir).join(format!("agent-{services}-{foreign}.log"));
        std::fs::copy(agent.log_path(), &kept)
            .with_context(|| format!("keeping the agent's log as {}", kept.display()))?;
        // And where its resident memory is, mapping by mapping.
        let pid = agent.pid().context("agent pid")?;
        let smaps = Path::new(&dir).join(format!("agent-{services}-{foreign}.smaps"));
        std::fs::copy(format!("/proc/{pid}/smaps"), &smaps)
            .with_context(|| format!("keeping the agent's smaps as {}", smaps.display()))?;
    }
    drop(agent);
    Ok(figures)
}

/// Waits for the first complete reconcile, reading the log as it grows;
/// returns the time of the line that says so (the agent writes it right
/// after the map writes), and the error when the agent refused the desired
/// state instead (more mappings than the maps hold).
fn wait_converged(
    agent: &mut Agent,
    limit: Duration,
) -> anyhow::Result<(SystemTime, Option<String>)> {
    let deadline = Instant::now() + limit;
    let mut log = std::fs::File::open(agent.log_path())?;
    let mut pending = String::new();
    loop {
        log.read_to_string(&mut pending)?;
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let ready = line.contains("agent ready");
            if !ready && !line.contains("reconcile failed") {
                continue;
            }
            let v: Value = serde_json::from_str(&line)?;
            let at = parse_rfc3339(v["timestamp"].as_str().unwrap_or(""))?;
            if ready {
                return Ok((at, None));
            }
            let error = v["fields"]["error"].as_str().unwrap_or(&line);
            return Ok((
                at,
                Some(error.split(';').next().unwrap_or(error).to_owned()),
            ));
        }
        if let Some(status) = agent.exited()? {
            bail!(
                "the agent exited ({status}) before converging:\n{}",
                agent.log()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "the agent did not converge within {limit:?}:\n{}",
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Moves `changes` Services' endpoints one at a time; each delay runs from
/// the API accepting the change to the agent's log line after the map write.
fn change_delays(
    api: &FakeApi,
    agent: &Agent,
    services: usize,
    per_ip: usize,
    changes: usize,
) -> anyhow::Result<Vec<Duration>> {
    eprintln!("==> {changes} endpoint changes, one at a time");
    let mut log = std::fs::File::open(agent.log_path())?;
    log.seek(std::io::SeekFrom::End(0))?;
    let mut delays = Vec::with_capacity(changes);
    for n in 0..changes {
        let i = (n * 7919) % services;
        let applied_at = SystemTime::now();
        api.apply(Kind::EndpointSlice, slice(i, n + 1));
        let frontend = frontend(i, per_ip);
        let done = wait_for_applied(&mut log, &frontend, Duration::from_secs(10))?;
        delays.push(done.duration_since(applied_at).unwrap_or_default());
    }
    delays.sort();
    Ok(delays)
}

fn frontend(i: usize, per_ip: usize) -> String {
    format!("{}:{}", ssh_ip(i / per_ip), FIRST_PORT + i % per_ip)
}

fn service(i: usize, per_ip: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("job-{i}"), "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "ssh-fwd.io/ssh", "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": FIRST_PORT + i % per_ip, "targetPort": 22, "protocol": "TCP"}]},
        "status": ssh_fwd_tests::grant::status(&[&ssh_ip(i / per_ip)], (FIRST_PORT + i % per_ip) as u16, &format!("uid-job-{i}"))
    })
}

/// Pod IPs inside 10.0.0.0/8 (never contacted: no packets are sent).
fn slice(i: usize, generation: usize) -> Value {
    let n = i + generation * 60_000;
    let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("job-{i}-x"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": format!("job-{i}"), "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
        "endpoints": [ssh_fwd_tests::grant::endpoint(&ip, "jobs", &format!("job-{i}"), &format!("uid-job-{i}"))]
    })
}

/// Another team's Service, as a cluster has them by the thousand: not
/// ssh-fwd's (no proxy-name label), with the annotations and fields a
/// real one carries.
fn foreign_service(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("web-{i}"), "namespace": format!("team-{}", i % 100),
                     "creationTimestamp": "2025-06-01T00:00:00Z",
                     "labels": {"app.kubernetes.io/name": format!("web-{i}"), "app.kubernetes.io/part-of": "shop"},
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"Service\"}"}},
        "spec": {"type": "ClusterIP", "clusterIP": format!("10.96.{}.{}", (i >> 8) & 0xff, i & 0xff),
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
                 "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"}
    })
}

fn foreign_slice(i: usize) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("web-{i}-abcde"), "namespace": format!("team-{}", i % 100),
                     "labels": {"kubernetes.io/service-name": format!("web-{i}"),
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                                "app.kubernetes.io/name": format!("web-{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [format!("10.250.{}.{}", (i >> 8) & 0xff, i & 0xff)],
                       "conditions": {"ready": true, "serving": true, "terminating": false},
                       "nodeName": format!("node-{}", i % 50)}]
    })
}

/// Reads new log lines until the agent logs "maps reconciled" after
/// "mapping changed" for `frontend`; returns that line's timestamp, which
/// the agent writes right after the map update.
fn wait_for_applied(
    log: &mut std::fs::File,
    frontend: &str,
    limit: Duration,
) -> anyhow::Result<SystemTime> {
    let deadline = Instant::now() + limit;
    let mut pending = String::new();
    let mut seen_change = false;
    loop {
        let mut chunk = String::new();
        log.read_to_string(&mut chunk)?;
        pending.push_str(&chunk);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if line.contains("mapping changed")
                && line.contains(&format!("\"frontend\":\"{frontend}\""))
            {
                seen_change = true;
            } else if seen_change && line.contains("maps reconciled") {
                let v: Value = serde_json::from_str(&line)?;
                return parse_rfc3339(v["timestamp"].as_str().unwrap_or(""));
            }
        }
        if Instant::now() > deadline {
            bail!("the change of {frontend} did not reach the maps within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `2026-11-22T00:10:00.409772Z` -> SystemTime.
fn parse_rfc3339(s: &str) -> anyhow::Result<SystemTime> {
    let bad = || anyhow::anyhow!("unexpected timestamp {s:?}");
    let (date, time) = s.trim_end_matches('Z').split_once('T').ok_or_else(bad)?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if d.len() != 3 || t.len() != 3 {
        return Err(bad());
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2];
    let nanos: u32 = format!("{frac:0<9}")[..9].parse().map_err(|_| bad())?;
    Ok(UNIX_EPOCH + Duration::new(u64::try_from(secs).map_err(|_| bad())?, nanos))
}

pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmRSS:")
}

/// The most memory `pid` has had resident (VmHWM).
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// CPU time (user + system) the process `pid` has used so far.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may hold spaces: utime and stime
    // are the 12th and 13th of them, in clock ticks.
    let rest = stat.rsplit_once(')').context("no ) in /proc/PID/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })?;
    Ok(Duration::from_millis(ticks * 1000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_timestamps_parse_to_unix_time() {
        let t = parse_rfc3339("2026-11-22T00:10:00.409772Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap(),
            Duration::new(1_795_306_200, 409_772_000)
        );
        let epoch = parse_rfc3339("1970-01-01T00:00:00Z").unwrap();
        assert_eq!(epoch, UNIX_EPOCH);
    }
}
