//! `--announce l2` with `--kubernetes`: two nodes on one segment
//! (`segment.rs`), each with an agent, one fake API server on the segment
//! (on the bridge's own address), a pod behind each node. One Lease per
//! SSH IP decides which node answers ARP; the client has only an on-link
//! route to the SSH IP.
//!
//! The failover is measured from the owner's SIGKILL (its data path then
//! detached, so it answers none of the standby's ARP probes) to the first SSH banner through the SSH IP, probed every
//! 50 ms with a fresh TCP connect of at most 150 ms (so no SYN
//! retransmission hides the figure), then a real login.
//!
//! `ipv6.rs` runs the same bed with an IPv6 SSH IP: neighbour
//! solicitations in place of ARP, and the standby's probes of the holder
//! are solicitations too. `partition.rs` cuts the holder off from the API
//! server, `forged.rs` has a host of the segment forge claims of the SSH
//! IP and answers to the standby's probes, both for either family, with
//! the frames of `l2.rs`.

mod forged;
mod ipv6;
mod l2;
mod partition;

use std::{
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use crate::common::Session;
use serde_json::{Value, json};
use ssh_fwd::{
    k8s::api_calls::{AGENT, allows},
    vocabulary,
};
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs,
    fake_api::{FakeApi, Kind},
    privilege,
    segment::Segment,
    topology::{EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6, pod_ip6},
};

/// The bridge's own address, where the fake API server listens.
const API_IP: &str = "192.0.2.250";
/// What a standby logs when it takes over a holder that answers no probe.
const EARLY_TAKEOVER: &str = "answers no ARP probe";
/// The standby's count of ARP probes of the holder.
const PROBES_SENT: &str = "ssh_fwd_announce_probes_sent_total";
/// The Service of the pod on node 0, and of the pod on node 1.
const ON_NODE0: u16 = 8123;
const ON_NODE1: u16 = 8124;

fn lb_service(name: &str, port: u16, ssh_ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS, "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": port, "targetPort": 22, "protocol": "TCP"}]},
        "status": ssh_fwd_tests::grant::status(&[ssh_ip], port, &format!("uid-{name}"))
    })
}

fn slice(service: &str, ip: &str) -> Value {
    let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": service,
                     "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": family,
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
        "endpoints": [ssh_fwd_tests::grant::endpoint(ip, "jobs", service, &format!("uid-{service}"))]
    })
}

/// Dropped in order: agents, their data paths, the API, the namespaces.
struct Bed {
    agents: Vec<Option<Agent>>,
    bpffs: Vec<Bpffs>,
    api: FakeApi,
    seg: Segment,
    args: Vec<Vec<String>>,
    /// The SSH IP, and the name of its Lease.
    ssh_ip: &'static str,
    lease: &'static str,
    _dir: tempfile::TempDir,
}

impl Drop for Bed {
    /// A failed test shows what each agent said: these tests fail on
    /// timing, and the logs say which side moved.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (n, agent) in self.agents.iter().enumerate() {
                if let Some(agent) = agent {
                    eprintln!("--- node{n}'s agent:\n{}", agent.log());
                }
            }
            // The Lease writes as the API saw them: when each arrived, how
            // long it waited, and what came of it.
            let (now, wall) = (Instant::now(), std::time::SystemTime::now());
            let at = |i: Instant| {
                let t = wall - now.duration_since(i);
                humantime::format_rfc3339_millis(t).to_string()
            };
            eprintln!("--- the API's Lease writes:");
            for r in self.api.requests() {
                if r.resource == "leases" && matches!(r.verb, "create" | "update") {
                    let waited = r.handled.map(|h| h.duration_since(r.at));
                    eprintln!(
                        "{} {} {} waited {waited:?} code {:?} given up {}",
                        at(r.at),
                        r.user,
                        r.verb,
                        r.code,
                        r.given_up.map(at).unwrap_or_default()
                    );
                }
            }
        }
    }
}

impl Bed {
    /// Two nodes, a pod on each, the API on the bridge; no agent yet.
    fn new() -> Self {
        Self::with(&[])
    }

    /// [`Bed::new`], every agent with `extra` arguments too.
    fn with(extra: &[&str]) -> Self {
        Self::build(EXTERNAL_IP, extra)
    }

    /// [`Bed::new`] with the IPv6 SSH IP [`EXTERNAL_IP6`] alone: the
    /// segment, the pods and the Services in IPv6 (the API stays on
    /// IPv4).
    fn ipv6() -> Self {
        Self::build(EXTERNAL_IP6, &[])
    }

    fn build(ssh_ip: &'static str, extra: &[&str]) -> Self {
        let ipv6 = ssh_ip == EXTERNAL_IP6;
        let mut seg = Segment::new(2).unwrap();
        seg.add_pod(0, 1).unwrap();
        seg.add_pod(1, 2).unwrap();
        if ipv6 {
            seg.add_ipv6().unwrap();
        }
        let pod_ip = |n: usize| {
            if ipv6 {
                pod_ip6(n)
            } else {
                format!("10.244.{n}.5")
            }
        };
        seg.switch
            .ip(&["addr", "add", &format!("{API_IP}/24"), "dev", "br0"])
            .unwrap();
        let api = FakeApi::start_at(&seg.switch, API_IP).unwrap();
        api.apply(Kind::Service, lb_service("job-a", ON_NODE0, ssh_ip));
        api.apply(Kind::EndpointSlice, slice("job-a", &pod_ip(1)));
        api.apply(Kind::Service, lb_service("job-b", ON_NODE1, ssh_ip));
        api.apply(Kind::EndpointSlice, slice("job-b", &pod_ip(2)));
        let dir = tempfile::tempdir().unwrap();
        let args = (0..2)
            .map(|n| {
                // Each node its own token, so one can be cut off alone.
                let kubeconfig = dir.path().join(format!("kubeconfig-{n}"));
                std::fs::write(&kubeconfig, api.kubeconfig_as(&format!("node{n}"))).unwrap();
                let mut args: Vec<String> = vec![
                    "--kubernetes".into(),
                    "--kubeconfig".into(),
                    kubeconfig.display().to_string(),
                    "--ssh-ip".into(),
                    ssh_ip.into(),
                ];
                args.extend(
                    [
                        "--announce",
                        "l2",
                        "--node-name",
                        &format!("node{n}"),
                        "--lease-namespace",
                        "ssh-fwd",
                        "--metrics-addr",
                        "127.0.0.1:9102",
                    ]
                    .map(str::to_owned),
                );
                args.extend(extra.iter().map(|a| (*a).to_owned()));
                args
            })
            .collect();
        Self {
            seg,
            api,
            bpffs: vec![Bpffs::new().unwrap(), Bpffs::new().unwrap()],
            agents: vec![None, None],
            args,
            ssh_ip,
            lease: if ipv6 {
                "ssh-fwd-announce-fd00-0198-0000-0000-0000-0000-0000-0010"
            } else {
                "ssh-fwd-announce-198-18-0-10"
            },
            _dir: dir,
        }
    }

    fn start(&mut self, n: usize) -> &mut Agent {
        let agent = Agent::start_with(
            &self.seg.nodes[n],
            &[EXT_IFACE],
            &self.bpffs[n],
            &self.args[n],
        )
        .unwrap();
        self.agents[n].insert(agent)
    }

    fn node(&self, n: usize) -> &NetNs {
        &self.seg.nodes[n]
    }

    fn mac(&self, n: usize) -> String {
        Segment::mac(self.node(n), EXT_IFACE).unwrap()
    }

    /// The holder of the SSH IP's Lease.
    fn holder(&self) -> Option<String> {
        let lease = self.api.get(Kind::Lease, "ssh-fwd", self.lease)?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    }

    /// Node `n`'s count of ARP probes sent to watch a holder.
    fn probes(&self, n: usize) -> f64 {
        let text = ssh_fwd_tests::prometheus::get_in(self.node(n), "127.0.0.1:9102", "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(PROBES_SENT)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Waits until node `n` has probed the holder for five probe periods:
    /// by then it has heard the holder's data path answer.
    fn wait_until_watched(&self, n: usize) {
        let start = self.probes(n);
        assert!(
            cmd_wait(Duration::from_secs(10), || self.probes(n) >= start + 5.0),
            "node {n} probes the holder's data path: {} sent",
            self.probes(n)
        );
    }
}

/// Whether a fresh TCP connect to the SSH IP gets sshd's banner within
/// 150 ms (the segment's round trip is well under a millisecond).
fn banner(client: &NetNs, port: u16) -> bool {
    banner_at(client, EXTERNAL_IP, port)
}

/// [`banner`] through `ssh_ip`.
fn banner_at(client: &NetNs, ssh_ip: &str, port: u16) -> bool {
    let script = format!("exec 3<>/dev/tcp/{ssh_ip}/{port}; head -c 4 <&3");
    client
        .command("timeout")
        .args(["0.15", "bash", "-c", &script])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"SSH-"))
}

/// Probes for a banner every 50 ms for at most `limit`; the time from
/// `since` to the start of the first probe that got one.
fn time_to_banner(client: &NetNs, port: u16, since: Instant, limit: Duration) -> Option<Duration> {
    time_to_banner_at(client, EXTERNAL_IP, port, since, limit)
}

/// [`time_to_banner`] through `ssh_ip`.
fn time_to_banner_at(
    client: &NetNs,
    ssh_ip: &str,
    port: u16,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    while since.elapsed() < limit {
        let probe = since.elapsed();
        if banner_at(client, ssh_ip, port) {
            return Some(probe);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Echoes through a session every 200 ms until `stop`; the longest time
/// between two answered echoes.
fn keep_talking(
    mut session: Session,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<Duration>> {
    std::thread::spawn(move || {
        let mut last = Instant::now();
        let mut longest = Duration::ZERO;
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            session.echo(&format!("w{n}"))?;
            longest = longest.max(last.elapsed());
            last = Instant::now();
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(longest)
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_killed_owner_fails_over_and_a_session_to_a_surviving_node_keeps_working() {
    privilege::require();
    let mut bed = Bed::new();
    bed.start(0)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    bed.start(1);
    assert_eq!(bed.holder().as_deref(), Some("node0"));
    let (mac0, mac1) = (bed.mac(0), bed.mac(1));
    let answers = bed.seg.arping(EXTERNAL_IP, 3).unwrap();
    assert!(
        !answers.is_empty() && answers.iter().all(|m| *m == mac0),
        "only node 0 ({mac0}): {answers:?}"
    );

    let ssh = bed.seg.ssh();
    let client = &bed.seg.client;
    assert_eq!(
        ssh.run(client, EXTERNAL_IP, ON_NODE1, "hostname").unwrap(),
        "pod-2"
    );
    // Opened through node 0, to the pod on node 1, which keeps its state.
    let session = Session::open(&ssh, client, ON_NODE1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let talking = keep_talking(session, stop.clone());
    std::thread::sleep(Duration::from_millis(600));

    let killed = Instant::now();
    bed.agents[0].as_mut().unwrap().kill().unwrap();
    bed.bpffs[0].teardown().unwrap();
    let failover = time_to_banner(client, ON_NODE1, killed, Duration::from_secs(10))
        .expect("no banner through the SSH IP within 10 s of the owner's death");
    let login = ssh.run(client, EXTERNAL_IP, ON_NODE1, "hostname").unwrap();
    let landed = killed.elapsed();
    assert_eq!(login, "pod-2");
    eprintln!("failover: first banner {failover:?} after SIGKILL, first login done {landed:?}");
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    assert_eq!(
        bed.agents[1].as_ref().unwrap().count_in_log(EARLY_TAKEOVER),
        1,
        "node 1 probed the silent owner and took over before its Lease expired"
    );
    let answers = bed.seg.arping(EXTERNAL_IP, 3).unwrap();
    assert!(
        !answers.is_empty() && answers.iter().all(|m| *m == mac1),
        "only node 1 ({mac1}): {answers:?}"
    );

    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    let gap = talking
        .join()
        .unwrap()
        .expect("the session kept echoing across the failover");
    eprintln!("failover: longest gap between echoes of the open session {gap:?}");
    assert!(
        failover < Duration::from_secs(2) && landed < Duration::from_secs(2),
        "failover took {failover:?}, the first login {landed:?}"
    );
    // No longer than the failover, give or take the echoes' own spacing.
    assert!(
        gap <= landed + Duration::from_millis(200),
        "the session stalled for {gap:?}, the failover took {landed:?}"
    );
    let taken = bed.api.count(Kind::Event, |e| {
        e["reason"] == vocabulary::reason::SSH_IP_TAKEN_OVER && e["reportingInstance"] == "node1"
    });
    assert_eq!(taken, 1, "one takeover event by node 1");
    every_call_is_listed(&bed.api);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn sigterm_on_the_owner_hands_over_without_a_failed_login() {
    privilege::require();
    let mut bed = Bed::new();
    bed.start(0)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    bed.start(1);
    let ssh = bed.seg.ssh();
    let mut failed = Vec::new();
    for i in 0..20 {
        if i == 5 {
            bed.agents[0].as_mut().unwrap().stop().unwrap();
        }
        match ssh.run(&bed.seg.client, EXTERNAL_IP, ON_NODE1, "hostname") {
            Ok(host) if host == "pod-2" => {}
            other => failed.push((i, format!("{other:?}"))),
        }
    }
    assert!(
        failed.is_empty(),
        "logins failed across the handover: {failed:?}"
    );
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    let mac1 = bed.mac(1);
    let answers = bed.seg.arping(EXTERNAL_IP, 3).unwrap();
    assert!(
        !answers.is_empty() && answers.iter().all(|m| *m == mac1),
        "only node 1 ({mac1}): {answers:?}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_owner_whose_external_interface_goes_down_loses_the_ssh_ip() {
    privilege::require();
    let mut bed = Bed::new();
    bed.start(0)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    bed.start(1);
    let client = &bed.seg.client;
    assert!(banner(client, ON_NODE1));
    // Node 1 has heard node 0's data path answer its probes: without that
    // it cannot tell a dead holder from one it has not heard yet, and only
    // the Lease's expiry would move the SSH IP.
    bed.wait_until_watched(1);
    let mac1 = bed.mac(1);
    let downed = Instant::now();
    bed.node(0).ip(&["link", "set", EXT_IFACE, "down"]).unwrap();
    // A switch floods frames for a MAC it no longer knows, and node 1's
    // data path would translate the flooded copies: the figure is when
    // node 1 answers ARP for the SSH IP, not when a banner comes back.
    let mut answered = None;
    while downed.elapsed() < Duration::from_secs(10) {
        let probe = downed.elapsed();
        if bed.seg.arping(EXTERNAL_IP, 1).unwrap().contains(&mac1) {
            answered = Some(probe);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let failover =
        answered.expect("node 1 did not answer ARP within 10 s of node 0's link going down");
    eprintln!("failover: node 1 answers ARP {failover:?} after the owner's interface went down");
    assert!(
        failover < Duration::from_secs(3),
        "failover took {failover:?}"
    );
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    assert_eq!(
        bed.agents[1].as_ref().unwrap().count_in_log(EARLY_TAKEOVER),
        1,
        "node 1 took the silent holder over before its Lease expired"
    );
    assert_eq!(
        bed.seg
            .ssh()
            .run(client, EXTERNAL_IP, ON_NODE1, "hostname")
            .unwrap(),
        "pod-2"
    );
    bed.agents[0]
        .as_mut()
        .unwrap()
        .wait_for_log("gave the SSH IP up", Duration::from_secs(5))
        .unwrap();
}

/// Every request the agents made is one `api_calls::AGENT` lists (and
/// deploy/ RBAC grants).
fn every_call_is_listed(api: &FakeApi) {
    let requests = api.requests();
    assert!(!requests.is_empty());
    for r in requests {
        assert!(
            allows(AGENT, &r.group, &r.resource, r.verb),
            "{} {}/{} is not in api_calls::AGENT; add it there (and to deploy/ RBAC)",
            r.verb,
            r.group,
            r.resource
        );
    }
}

/// The MACs answering `count` ARP requests, which must all be `mac`.
fn only(bed: &Bed, mac: &str, count: u32) -> Result<(), Vec<String>> {
    let answers = bed.seg.arping(EXTERNAL_IP, count).unwrap();
    if !answers.is_empty() && answers.iter().all(|m| m == mac) {
        Ok(())
    } else {
        Err(answers)
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_the_api_stalled_for_everyone_the_owner_keeps_answering_and_logins_land() {
    privilege::require();
    let mut bed = Bed::new();
    bed.start(0)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    bed.start(1);
    let mac0 = bed.mac(0);
    let ssh = bed.seg.ssh();
    bed.api.stall();
    let stalled = Instant::now();
    let mut rounds = 0;
    while stalled.elapsed() < Duration::from_secs(60) {
        rounds += 1;
        let host = ssh.run(&bed.seg.client, EXTERNAL_IP, ON_NODE1, "hostname");
        assert_eq!(
            host.unwrap(),
            "pod-2",
            "login {rounds}, {:?} into the outage",
            stalled.elapsed()
        );
        only(&bed, &mac0, 2).unwrap_or_else(|answers| {
            panic!(
                "{:?} into the outage, not only node 0 ({mac0}): {answers:?}",
                stalled.elapsed()
            )
        });
        // Paced: a login every 3 s through the outage.
        std::thread::sleep(Duration::from_secs(3));
    }
    bed.api.resume();
    // Must not happen within: the SSH IP must not move once the API is
    // back (a renewal goes through within a second).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        bed.holder().as_deref(),
        Some("node0"),
        "the SSH IP did not move for the outage"
    );
    only(&bed, &mac0, 3).unwrap();
    eprintln!("API outage: {rounds} logins over 60 s, all through node 0");
}

fn cmd_wait(limit: Duration, check: impl FnMut() -> bool) -> bool {
    ssh_fwd_tests::cmd::wait_until(limit, check)
}

fn node(name: &str, ingress: bool) -> Value {
    let labels = if ingress {
        json!({"ssh-fwd.io/ingress": "true"})
    } else {
        json!({})
    };
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_nodes_the_selector_picks_hold_the_ssh_ip_and_a_relabel_moves_it() {
    privilege::require();
    let mut bed = Bed::with(&["--announce-nodes", "ssh-fwd.io/ingress=true"]);
    bed.api.apply(Kind::Node, node("node0", false));
    bed.api.apply(Kind::Node, node("node1", true));
    bed.start(0);
    // Must not happen within: an unselected node takes the Lease at once
    // if it takes it at all.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        bed.holder(),
        None,
        "node 0 is not selected: it takes nothing"
    );
    bed.start(1)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    only(&bed, &bed.mac(1), 2).unwrap();

    bed.api.apply(Kind::Node, node("node1", false));
    bed.api.apply(Kind::Node, node("node0", true));
    let relabelled = Instant::now();
    bed.agents[0]
        .as_mut()
        .unwrap()
        .wait_for_log("took the SSH IP over", Duration::from_secs(15))
        .unwrap();
    eprintln!(
        "--announce-nodes: the SSH IP moved {:?} after the relabel",
        relabelled.elapsed()
    );
    assert_eq!(bed.holder().as_deref(), Some("node0"));
    bed.agents[1]
        .as_mut()
        .unwrap()
        .wait_for_log("gave the SSH IP up", Duration::from_secs(5))
        .unwrap();
    only(&bed, &bed.mac(0), 2).unwrap();
    assert_eq!(
        bed.seg
            .ssh()
            .run(&bed.seg.client, EXTERNAL_IP, ON_NODE0, "hostname")
            .unwrap(),
        "pod-1"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_killed_owner_whose_data_path_stays_gives_way_to_the_new_owner() {
    privilege::require();
    let mut bed = Bed::new();
    bed.start(0)
        .wait_for_log("took the SSH IP over", Duration::from_secs(10))
        .unwrap();
    bed.start(1);
    // Node 1's MACs are on its own Lease, and node 0's agent had a pass
    // to give its data path them: the only MACs it gives way to.
    assert!(
        cmd_wait(Duration::from_secs(10), || bed
            .api
            .get(Kind::Lease, "ssh-fwd", "ssh-fwd-announce-node-node1")
            .is_some()),
        "node 1 published its MACs"
    );
    std::thread::sleep(Duration::from_millis(500));
    bed.agents[0].as_mut().unwrap().kill().unwrap();
    assert!(
        cmd_wait(Duration::from_secs(6), || bed.holder().as_deref()
            == Some("node1")),
        "node 1 did not take the Lease"
    );
    // Node 0's data path, pinned, still answered until it heard node 1.
    std::thread::sleep(Duration::from_millis(500));
    let mac1 = bed.mac(1);
    only(&bed, &mac1, 3).unwrap_or_else(|answers| panic!("not only node 1 ({mac1}): {answers:?}"));
    let heard = bed.bpffs[0].list().unwrap()["counters"]["arp_heard"]
        .as_u64()
        .unwrap_or(0);
    assert!(heard >= 1, "node 0's data path heard node 1");
    assert_eq!(
        bed.seg
            .ssh()
            .run(&bed.seg.client, EXTERNAL_IP, ON_NODE1, "hostname")
            .unwrap(),
        "pod-2"
    );
}
