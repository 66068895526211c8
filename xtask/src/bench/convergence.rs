//! `cargo xtask bench convergence`: how fast the Kubernetes agent gets N
//! Services into the maps, how long one change takes to reach its map entry,
//! and what the agent costs in memory. Everything runs in namespaces this
//! command creates; the API server is in-process and only reachable there.

use std::{
    io::{Read as _, Seek as _},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    fake_api::{FakeApi, Kind},
    topology::EXT_IFACE,
};

const SSH_IPS: [&str; 2] = ["198.18.0.10", "198.18.0.11"];

pub fn run(services: usize, changes: usize) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    let per_ip = services.div_ceil(SSH_IPS.len());
    if per_ip > 8001 {
        bail!(
            "at most {} Services fit the port range on {} IPs",
            8001 * SSH_IPS.len(),
            SSH_IPS.len()
        );
    }
    let bin = crate::build_ssh_fwd_profile(true)?;
    // SAFETY: set before other threads start.
    unsafe { std::env::set_var("SSH_FWD_BIN", &bin) };
    ctrlc::set_handler(|| {
        ssh_fwd_tests::netns::remove_all_of_this_process();
        std::process::exit(130);
    })?;
    let topo = Topology::single_node(0)?;
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node)?;
    println!("==> creating {services} Services and EndpointSlices in the fake API");
    for i in 0..services {
        api.apply(Kind::Service, service(i, per_ip));
        api.apply(Kind::EndpointSlice, slice(i, 0));
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
    for ip in SSH_IPS {
        args.extend(["--ssh-ip".into(), ip.into()]);
    }
    args.extend([
        "--port-range".into(),
        "8000-16000".into(),
        "--resync-interval".into(),
        "10m".into(),
    ]);

    println!("==> starting the agent and waiting until all {services} are in the maps");
    let started = Instant::now();
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args)?;
    let converged = started.elapsed();
    let listing = bpffs.list()?;
    let installed = listing["mappings"].as_array().map_or(0, Vec::len);
    if installed != services {
        bail!("only {installed} of {services} mappings installed");
    }
    let rss_kib = rss_kib(agent.pid().context("agent pid")?)?;

    println!("==> {changes} endpoint changes, one at a time");
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
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];
    println!();
    println!("| figure | value |");
    println!("| --- | --- |");
    println!("| Services (and EndpointSlices) | {services} |");
    println!(
        "| agent start to all mappings in the maps | {:.2} s |",
        converged.as_secs_f64()
    );
    println!(
        "| one endpoint change to its map entry, p50 | {:.1} ms |",
        pct(0.50).as_secs_f64() * 1e3
    );
    println!(
        "| one endpoint change to its map entry, p99 | {:.1} ms |",
        pct(0.99).as_secs_f64() * 1e3
    );
    println!(
        "| agent resident memory with {services} mappings | {:.1} MiB |",
        rss_kib as f64 / 1024.0
    );
    drop(agent);
    Ok(())
}

fn frontend(i: usize, per_ip: usize) -> String {
    format!("{}:{}", SSH_IPS[i / per_ip], 8000 + i % per_ip)
}

fn service(i: usize, per_ip: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("job-{i}"), "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "ssh-fwd.io/ssh", "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": 8000 + i % per_ip, "targetPort": 22, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": SSH_IPS[i / per_ip]}]}}
    })
}

/// Pod IPs inside 10.0.0.0/8 (never contacted: no packets are sent).
fn slice(i: usize, generation: usize) -> Value {
    let n = i + generation * 20_000;
    let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("job-{i}-x"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": format!("job-{i}"), "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
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
