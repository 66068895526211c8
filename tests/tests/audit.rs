//! The connection log end to end with real OpenSSH: each login is logged
//! once, accepted and then closed with its traffic, a refused SYN once,
//! and a flood of refused SYNs within the line budget, which leaves every
//! login its line (`audit/flood.rs`). Every connection stays inside the
//! test's namespaces and every loop is bounded in count and time.

mod flood;

use std::{
    net::{Ipv4Addr, SocketAddrV4},
    time::{Duration, Instant},
};

use crate::common::{Bed, EXTERNAL_IP};
use ssh_fwd_tests::{Agent, NetNs, Topology, privilege, topology::CLIENT_IP};

/// A second client address on the client's link, outside the lists.
const STRANGER_IP: &str = "192.0.2.66";
const GUARDED: &str = "198.18.0.10:8022";
const BACKEND: &str = "10.244.1.5:22";

/// `guarded` on 8022 (only the client's own address may connect) and
/// `open` on 8023, both to pod 1's sshd.
fn bed(extra: &[&str]) -> Bed {
    let mappings = move |path: &std::path::Path| -> anyhow::Result<()> {
        let text = format!(
            "mappings:\n\
             - {{name: guarded, frontend: {GUARDED}, backend: {BACKEND}, allow: [{CLIENT_IP}/32]}}\n\
             - {{name: open, frontend: 198.18.0.10:8023, backend: {BACKEND}, allow: []}}\n"
        );
        Ok(std::fs::write(path, text)?)
    };
    let bed = Bed::start_with(Topology::single_node(1).unwrap(), mappings, extra).unwrap();
    bed.client()
        .ip(&["addr", "add", &format!("{STRANGER_IP}/24"), "dev", "eth0"])
        .unwrap();
    bed
}

/// The connection lines of the agent's JSON log: their fields.
fn records(agent: &Agent) -> Vec<serde_json::Value> {
    agent
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "ssh_fwd::connections" && v["level"] == "INFO")
        .map(|v| v["fields"].clone())
        .collect()
}

fn of_event<'a>(records: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["event"] == event).collect()
}

/// Waits until the log holds `n` records of `event`, at most `limit`.
fn wait_for(agent: &Agent, event: &str, n: usize, limit: Duration) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + limit;
    loop {
        let all = records(agent);
        if of_event(&all, event).len() >= n || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One SYN from `from` to the external IP's `port`, and its retransmits
/// cut short: the socket is dropped after `wait`.
fn one_syn(ns: &NetNs, from: Ipv4Addr, port: u16, wait: Duration) {
    use socket2::{Domain, Socket, Type};
    let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), port);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread().unwrap();
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind(&SocketAddrV4::new(from, 0).into()).unwrap();
            socket.set_nonblocking(true).unwrap();
            let _ = socket.connect(&to.into());
            std::thread::sleep(wait);
        })
        .join()
        .unwrap();
    });
}

fn stranger() -> Ipv4Addr {
    STRANGER_IP.parse().unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn each_login_is_logged_accepted_then_closed_with_its_traffic_and_a_refused_syn_once() {
    privilege::require();
    let bed = bed(&["--conn-log", "all"]);
    const LOGINS: usize = 3;
    for _ in 0..LOGINS {
        assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    }
    // One SYN from the stranger, dropped before its first retransmit.
    one_syn(bed.client(), stranger(), 8022, Duration::from_millis(300));

    // A connection closed both ways leaves the table after the close
    // timeout (10 s) at the next sweep.
    let all = wait_for(&bed.agents[0], "closed", LOGINS, Duration::from_secs(30));
    let accepted = of_event(&all, "accepted");
    assert_eq!(accepted.len(), LOGINS, "{all:#?}");
    for r in &accepted {
        assert_eq!(
            r["client"].as_str().unwrap().split(':').next(),
            Some(CLIENT_IP)
        );
        assert_eq!(r["frontend"], GUARDED);
        assert_eq!(r["backend"], BACKEND);
        assert_eq!(r["mapping"], "guarded");
        assert!(r["at"].as_str().unwrap().ends_with('Z'), "{r}");
    }
    let closed = of_event(&all, "closed");
    assert_eq!(closed.len(), LOGINS, "{all:#?}");
    let clients = |rs: &[&serde_json::Value]| {
        let mut c: Vec<String> = rs.iter().map(|r| r["client"].to_string()).collect();
        c.sort();
        c
    };
    assert_eq!(clients(&closed), clients(&accepted), "the same connections");
    for r in &closed {
        assert_eq!(r["ended"], "fin", "{r}");
        // An ssh login moves a few KiB each way in some dozens of packets.
        for field in ["packets_in", "packets_out"] {
            assert!(r[field].as_u64().unwrap() >= 5, "{field}: {r}");
        }
        for field in ["bytes_in", "bytes_out"] {
            assert!(r[field].as_u64().unwrap() >= 1000, "{field}: {r}");
        }
        let duration = r["duration_s"].as_f64().unwrap();
        assert!(duration > 0.0 && duration < 30.0, "{r}");
    }
    let denied = of_event(&all, "denied");
    assert_eq!(denied.len(), 1, "{all:#?}");
    assert_eq!(
        denied[0]["client"].as_str().unwrap().split(':').next(),
        Some(STRANGER_IP)
    );
    assert_eq!(denied[0]["frontend"], GUARDED);
    assert_eq!(denied[0]["mapping"], "guarded");
    assert_eq!(all.len(), 2 * LOGINS + 1, "nothing else: {all:#?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_connection_the_client_resets_is_logged_as_reset() {
    privilege::require();
    let bed = bed(&["--conn-log", "all"]);
    let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), 8023);
    let client = bed.client();
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::io::Read as _;
            client.enter_on_this_thread().unwrap();
            let mut stream =
                std::net::TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            // sshd's banner: the server's segment that confirms it.
            let mut banner = [0u8; 4];
            stream.read_exact(&mut banner).unwrap();
            assert_eq!(&banner, b"SSH-");
            // Linger 0: close sends a RST.
            socket2::SockRef::from(&stream)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        })
        .join()
        .unwrap();
    });
    let all = wait_for(&bed.agents[0], "closed", 1, Duration::from_secs(10));
    let closed = of_event(&all, "closed");
    assert_eq!(closed.len(), 1, "{all:#?}");
    assert_eq!(closed[0]["ended"], "reset");
    assert_eq!(closed[0]["mapping"], "open");
    assert!(closed[0]["bytes_out"].as_u64().unwrap() > 0, "the banner");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_session_its_mapping_removal_ends_is_logged_under_the_mappings_name() {
    privilege::require();
    let bed = bed(&["--conn-log", "all"]);
    let mut session = crate::common::Session::open(&bed.ssh(), bed.client(), 8023).unwrap();
    session.echo("before").unwrap();
    // The file without `open`: its connections are purged.
    let text = format!(
        "mappings:\n- {{name: guarded, frontend: {GUARDED}, backend: {BACKEND}, allow: [{CLIENT_IP}/32]}}\n"
    );
    let staged = bed.mappings.with_extension("new");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, &bed.mappings).unwrap();
    let all = wait_for(&bed.agents[0], "closed", 1, Duration::from_secs(15));
    let closed = of_event(&all, "closed");
    assert_eq!(closed.len(), 1, "{all:#?}");
    assert_eq!(closed[0]["ended"], "mapping_removed");
    assert_eq!(closed[0]["mapping"], "open", "named as it was");
    assert!(closed[0]["bytes_in"].as_u64().unwrap() > 0, "{}", closed[0]);
    drop(session);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn by_default_only_accepted_connections_are_logged() {
    privilege::require();
    let bed = bed(&[]);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    one_syn(bed.client(), stranger(), 8022, Duration::from_millis(300));
    let all = wait_for(&bed.agents[0], "accepted", 1, Duration::from_secs(10));
    // Must not happen within: long enough for a close to be swept if it
    // were logged.
    std::thread::sleep(Duration::from_secs(12));
    let all_later = records(&bed.agents[0]);
    assert_eq!(of_event(&all, "accepted").len(), 1, "{all:#?}");
    assert_eq!(
        all_later.len(),
        1,
        "no denied or closed lines: {all_later:#?}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_flood_of_refused_syns_is_logged_within_the_line_budget_and_counted() {
    privilege::require();
    let bed = bed(&["--conn-log", "all", "--conn-log-rate", "5"]);
    const SYNS: u64 = 60;
    let client = bed.client();
    let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), 8022);
    std::thread::scope(|s| {
        s.spawn(|| {
            use socket2::{Domain, Socket, Type};
            client.enter_on_this_thread().unwrap();
            let sockets: Vec<Socket> = (0..SYNS)
                .map(|_| {
                    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                    socket
                        .bind(&SocketAddrV4::new(stranger(), 0).into())
                        .unwrap();
                    socket.set_nonblocking(true).unwrap();
                    let _ = socket.connect(&to.into());
                    socket
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            drop(sockets);
        })
        .join()
        .unwrap();
    });
    // Each CPU writes at most 5 records a second (the rest are counted as
    // events_throttled, and as denied records dropped in the kernel), and
    // the agent logs at most 5 refused lines a second after a burst of 5
    // (the rest it counts); every 10 s it sums up both.
    let agent = &bed.agents[0];
    let (all, denied, dropped) = ssh_fwd_tests::cmd::eventually(
        "the 10 s summary of what was not logged",
        Duration::from_secs(15),
        || {
            let all = records(agent);
            let denied = of_event(&all, "denied").len() as u64;
            let dropped = flood::summarised(agent).get("denied").copied().unwrap_or(0);
            (denied + dropped >= SYNS).then_some((all, denied, dropped))
        },
    );
    let counters = &bed.bpffs[0].list().unwrap()["counters"];
    let throttled = counters["events_throttled"].as_u64().unwrap_or(0);
    assert!((1..=10).contains(&denied), "{denied} lines: {all:#?}");
    assert!(throttled >= SYNS - 20, "{throttled} throttled: {counters}");
    assert!(dropped >= throttled, "{dropped} dropped: {counters}");
    assert_eq!(
        denied + dropped,
        SYNS,
        "every SYN logged or summed up as dropped: {counters}"
    );
    assert_eq!(counters["denied"].as_u64(), Some(SYNS), "each SYN counted");
}

/// In Kubernetes mode a line names the Service and the pod behind the
/// backend address (the EndpointSlice's `targetRef`).
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn in_kubernetes_a_line_names_the_service_and_the_pod() {
    use serde_json::json;
    use ssh_fwd_tests::{
        Bpffs,
        fake_api::{FakeApi, Kind},
        topology::EXT_IFACE,
    };
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.apply(
        Kind::Service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "job-a", "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": ssh_fwd::vocabulary::LB_CLASS,
                     "allocateLoadBalancerNodePorts": false,
                     "ports": [{"name": "ssh", "port": 8123, "targetPort": 22, "protocol": "TCP"}]},
            "status": ssh_fwd_tests::grant::status(&[EXTERNAL_IP], 8123, "uid-job-a-rank-0")
        }),
    );
    api.apply(
        Kind::EndpointSlice,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "job-a-abcde", "namespace": "jobs",
                         "labels": {"kubernetes.io/service-name": "job-a",
                                    "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
            "addressType": "IPv4",
            "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
            "endpoints": [ssh_fwd_tests::grant::endpoint("10.244.1.5", "jobs", "job-a-rank-0", "uid-job-a-rank-0")]
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let args = api.agent_args(dir.path(), EXTERNAL_IP);
    let bpffs = Bpffs::new().unwrap();
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    assert_eq!(
        topo.ssh()
            .run(&topo.client, EXTERNAL_IP, 8123, "hostname")
            .unwrap(),
        "pod-1"
    );
    let all = wait_for(&agent, "accepted", 1, Duration::from_secs(10));
    let accepted = of_event(&all, "accepted");
    assert_eq!(accepted.len(), 1, "{all:#?}");
    assert_eq!(accepted[0]["mapping"], "jobs/job-a");
    assert_eq!(accepted[0]["service"], "jobs/job-a");
    assert_eq!(accepted[0]["pod"], "jobs/job-a-rank-0");
    assert_eq!(accepted[0]["frontend"], format!("{EXTERNAL_IP}:8123"));
    drop(agent);
}
