//! The connection log under a spoofed SYN flood at `--conn-log all`: every
//! real login keeps its `accepted` line, whether the agent drains the ring
//! as it fills or is held up meanwhile, and what was dropped is counted
//! per kind.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use ssh_fwd_tests::{
    Agent, NetNs, cmd,
    flood::{self, Rng, Syn},
    privilege,
};

use super::{Bed, EXTERNAL_IP, bed, records};

/// The message of the agent's summary of dropped records.
const DROPPED_SUMMARY: &str = "connection records dropped since the last such line";

/// Where the agent serves `/metrics`, inside the node's namespace.
const METRICS: &str = "127.0.0.1:9102";

/// Sets the flag when dropped: the flood stops even if the test fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// SYNs to the guarded frontend from random forged sources outside its
/// list, at `per_second` from each CPU, until `stop` (at most 3 minutes).
/// A NIC spreads such a flood over every CPU (its sources hash to every
/// queue); here one sender per CPU, pinned to it, makes the veth do the
/// same. Returns how many were sent.
fn spoofed(ns: &NetNs, per_second: u32, stop: &AtomicBool) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|s| {
        let senders: Vec<_> = (0..cpus)
            .map(|cpu| s.spawn(move || spoofed_from(cpu, ns, per_second, stop)))
            .collect();
        senders.into_iter().map(|t| t.join().unwrap()).sum()
    })
}

/// One sender of [`spoofed`], on `cpu`.
fn spoofed_from(cpu: usize, ns: &NetNs, per_second: u32, stop: &AtomicBool) -> usize {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity
    // (this thread, whose mask the sender's thread inherits) get valid
    // pointers to it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(pinned, 0, "pinning a flood sender to CPU {cpu}");
    let mut rng = Rng::new(43 + cpu as u64);
    let to = EXTERNAL_IP.parse().unwrap();
    let syns = std::iter::from_fn(move || {
        Some(Syn {
            src: rng.address(),
            sport: 1024 + (rng.draw() % 60_000) as u16,
            dst: to,
            dport: 8022,
            seq: rng.draw() as u32,
        })
    });
    flood::send_paced(ns, syns, per_second, stop, Duration::from_secs(180)).unwrap()
}

/// `n` ssh logins to the guarded frontend, one after the other: the client
/// port of each, as the pod's sshd saw it.
fn logins(bed: &Bed, n: usize) -> Vec<u16> {
    let ssh = bed.ssh();
    (0..n)
        .map(|_| {
            let seen = ssh
                .run(bed.client(), EXTERNAL_IP, 8022, "echo $SSH_CLIENT")
                .unwrap();
            // "CLIENT-IP CLIENT-PORT SERVER-PORT"
            seen.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("SSH_CLIENT: {seen}"))
        })
        .collect()
}

/// The logins of `ports` that have no `accepted` line yet, given up to
/// `limit` to get one.
fn without_accepted_line(agent: &Agent, ports: &[u16], limit: Duration) -> Vec<u16> {
    let deadline = Instant::now() + limit;
    loop {
        let logged: BTreeSet<u16> = (records(agent).iter())
            .filter(|r| r["event"] == "accepted")
            .filter_map(|r| r["client"].as_str()?.rsplit(':').next()?.parse().ok())
            .collect();
        let missing: Vec<u16> = (ports.iter())
            .filter(|p| !logged.contains(p))
            .copied()
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            return missing;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `ssh_fwd_connection_records_dropped_total` by (kind, stage).
fn dropped(node: &NetNs) -> BTreeMap<(String, String), u64> {
    let (host, port) = METRICS.split_once(':').unwrap();
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port}; printf 'GET /metrics HTTP/1.1\\r\\nHost: agent\\r\\nConnection: close\\r\\n\\r\\n' >&3; cat <&3"
    );
    let text = cmd::run(node.command("timeout").args(["10", "bash", "-c", &script])).unwrap();
    let label = |labels: &str, name: &str| {
        let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
        Some(labels[at..].split('"').next()?.to_owned())
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("ssh_fwd_connection_records_dropped_total{"))
        .filter_map(|l| {
            let (labels, value) = l.split_once("} ")?;
            let key = (label(labels, "kind")?, label(labels, "stage")?);
            Some((key, value.trim().parse().ok()?))
        })
        .collect()
}

/// The agent's summaries of dropped records: each kind's total.
pub fn summarised(agent: &Agent) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in agent.log().lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["fields"]["message"].as_str() != Some(DROPPED_SUMMARY) {
            continue;
        }
        for kind in ["accepted", "closed", "denied", "syn_limited"] {
            *out.entry(kind.to_owned()).or_default() += v["fields"][kind].as_u64().unwrap_or(0);
        }
    }
    out
}

/// The agent holds no `accepted` drop, and some `denied` ones, at every
/// stage: its metric and its summary line agree.
fn only_refused_records_were_dropped(bed: &Bed) {
    let node = &bed.topo.nodes[0].ns;
    let agent = &bed.agents[0];
    // The summary comes every 10 s.
    let mut told = BTreeMap::new();
    let seen = cmd::wait_until(Duration::from_secs(25), || {
        told = summarised(agent);
        told.get("denied").copied().unwrap_or(0) > 0
    });
    assert!(seen, "no summary of dropped records: {}", agent.log());
    let counted = dropped(node);
    println!("dropped by (kind, stage): {counted:?}; summed up in the log: {told:?}");
    let of = |kind: &str| -> u64 {
        (counted.iter())
            .filter(|((k, _), _)| k == kind)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!((of("accepted"), of("closed")), (0, 0), "{counted:?}");
    assert!(
        of("denied") > 0,
        "the flood's records, counted: {counted:?}"
    );
    assert_eq!(told.get("accepted"), Some(&0), "{told:?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn under_a_spoofed_flood_every_login_keeps_its_accepted_line_and_drops_are_counted_per_kind() {
    privilege::require();
    const LOGINS: usize = 50;
    let bed = bed(&["--conn-log", "all", "--metrics-addr", METRICS]);
    let stop = AtomicBool::new(false);
    let (sent, ports) = std::thread::scope(|s| {
        let flood = s.spawn(|| spoofed(bed.client(), 2_500, &stop));
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_secs(1));
        let ports = logins(&bed, LOGINS);
        drop(_stop);
        (flood.join().unwrap(), ports)
    });
    let agent = &bed.agents[0];
    let missing = without_accepted_line(agent, &ports, Duration::from_secs(15));
    let counters = &bed.bpffs[0].list().unwrap()["counters"];
    let theirs: Vec<String> = (agent.log().lines())
        .filter(|l| missing.iter().any(|p| l.contains(&format!(":{p}\""))))
        .map(str::to_owned)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {LOGINS} logins have no accepted line (client ports {missing:?}) under {sent} \
         spoofed SYNs; lost in the kernel: {}, throttled: {}; dropped: {:?}; their lines: \
         {theirs:#?}; counters: {counters}",
        missing.len(),
        counters["events_lost"],
        counters["events_throttled"],
        dropped(&bed.topo.nodes[0].ns),
    );
    only_refused_records_were_dropped(&bed);
}

/// Stops a process until dropped.
struct Paused(i32);

impl Paused {
    fn new(pid: u32) -> Self {
        let pid = i32::try_from(pid).unwrap();
        // SAFETY: a signal to the agent this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The agent held up (stopped, as a starved or restarting agent is) while
/// a flood fills the ring: the programs keep room for the logins.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_flood_while_the_agent_is_held_up_leaves_room_in_the_ring_for_every_login() {
    privilege::require();
    const LOGINS: usize = 20;
    // 5,000 records of refused SYNs a second per CPU: more than the ring
    // holds (about 2,900), so only the programs' own bound keeps room.
    let bed = bed(&[
        "--conn-log",
        "all",
        "--conn-log-rate",
        "5000",
        "--metrics-addr",
        METRICS,
    ]);
    let agent = &bed.agents[0];
    let stop = AtomicBool::new(false);
    let (sent, ports) = std::thread::scope(|s| {
        let paused = Paused::new(agent.pid().unwrap());
        let flood = s.spawn(|| spoofed(bed.client(), 10_000, &stop));
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_secs(2));
        let ports = logins(&bed, LOGINS);
        drop(_stop);
        let sent = flood.join().unwrap();
        drop(paused);
        (sent, ports)
    });
    let missing = without_accepted_line(agent, &ports, Duration::from_secs(15));
    let lost = bed.bpffs[0].list().unwrap()["counters"]["events_lost"].as_u64();
    assert!(
        missing.is_empty(),
        "{} of {LOGINS} logins have no accepted line (client ports {missing:?}) under {sent} \
         spoofed SYNs; records lost in the kernel: {lost:?}",
        missing.len()
    );
    only_refused_records_were_dropped(&bed);
}
