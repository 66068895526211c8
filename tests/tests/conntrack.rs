//! Connection state end to end, with real OpenSSH in a routed two-node
//! cluster: a second frontend to a pod on the other node, rank-to-rank ssh
//! over host-gw routes, spoofed SYN floods against live sessions, a client
//! reusing its port through another frontend, the idle sweep with a clock
//! the test controls, and path-MTU discovery through the NAT both ways.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddrV4},
    process::Stdio,
    time::Duration,
};

use crate::common::{ClusterBed as Bed, EXTERNAL_IP, Session};
use aya::maps::{HashMap, Map, MapData};
use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry, Timeouts, clock_ns},
    pins::PinLayout,
};
use ssh_fwd_common::maps::{CONNS, Conn, ConnKey, Endpoint};
use ssh_fwd_tests::{
    NetNs,
    cluster::{Cluster, PEER_IFACE, Wiring},
    cmd,
    flood::{self, Rng, Syn},
    privilege,
    topology::{CLIENT_IP, EXTERNAL_IP6},
};

const HOUR: u64 = 3_600_000_000_000;

impl Bed {
    fn session(&self, port: u16) -> Session {
        Session::open(&self.cluster.ssh(), &self.cluster.client, port).unwrap()
    }

    fn conns(&self, node: usize) -> Vec<Entry> {
        ConnTables::open_pinned(&PinLayout::new(self.bpffs[node].path()))
            .unwrap()
            .entries()
    }

    /// The established connections on `node`: (client port, frontend port).
    fn established(&self, node: usize) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = self
            .conns(node)
            .into_iter()
            .filter_map(|e| match e {
                Entry::Established(k, c) => Some((k.client().port(), c.frontend.port())),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }
}

/// The client's local ports of its established connections to `port`.
fn client_ports(client: &NetNs, port: u16) -> Vec<u16> {
    let out = cmd::run(client.command("ss").args([
        "-Htn",
        "state",
        "established",
        &format!("dport = :{port}"),
    ]))
    .unwrap();
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter_map(|local| local.rsplit(':').next()?.parse().ok())
        .collect()
}

/// The client's established connections to each of `frontends`, as
/// [`Bed::established`] lists them: (client port, frontend port), sorted.
fn client_sessions(client: &NetNs, frontends: &[u16]) -> Vec<(u16, u16)> {
    let mut sessions: Vec<(u16, u16)> = frontends
        .iter()
        .flat_map(|&f| client_ports(client, f).into_iter().map(move |p| (p, f)))
        .collect();
    sessions.sort_unstable();
    sessions
}

/// Logs in from the client through the frontend on `port`: pod-2
/// answers, and sees the client's own address.
fn assert_pod_2_sees_the_client(bed: &Bed, port: u16) {
    let seen = bed
        .cluster
        .ssh()
        .run(
            &bed.cluster.client,
            EXTERNAL_IP,
            port,
            "hostname; echo $SSH_CONNECTION",
        )
        .unwrap();
    assert!(seen.starts_with("pod-2"), "{seen}");
    assert!(seen.contains(CLIENT_IP), "the pod sees the client: {seen}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_on_node_b_behind_two_frontends_answers_each_session_from_its_own_frontend() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.2.5:22"),
            ("second", "198.18.0.10:9022", "10.244.2.5:22"),
        ],
        &[],
    );
    // 20 sessions, interleaved between the two frontends; every request
    // enters node A, every reply leaves node B.
    let mut sessions: Vec<(u16, Session)> = (0..20)
        .map(|i| {
            let port = [8022, 9022][i % 2];
            (port, bed.session(port))
        })
        .collect();
    for round in 0..3 {
        for (i, (_, s)) in sessions.iter_mut().enumerate() {
            s.echo(&format!("r{round}s{i}")).unwrap();
        }
    }
    // The client sees each from the frontend it dialled (its kernel would
    // drop a reply from the other), and node B tracked each so.
    let expected = client_sessions(&bed.cluster.client, &[8022, 9022]);
    assert_eq!(expected.len(), 20, "{expected:?}");
    assert_eq!(bed.established(1), expected, "node B tracks every session");
    assert!(bed.established(0).is_empty(), "node A never sees a reply");
    assert!(bed.counter(0, "frontend_option_added") >= 20);
    assert!(bed.counter(1, "frontend_option_learned") >= 20);
    assert_eq!(bed.counter(1, "reverse_fallback"), 0);
    assert_eq!(
        bed.cluster
            .ssh()
            .run(&bed.cluster.client, EXTERNAL_IP, 9022, "hostname")
            .unwrap(),
        "pod-2"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_cluster_interface_no_gateway_route_shows_is_named_by_cluster_iface() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        pod_routes_on_link: true,
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.2.5:22"),
            ("second", "198.18.0.10:9022", "10.244.2.5:22"),
        ],
        &["--cluster-iface", PEER_IFACE],
    );
    assert!(
        bed.agents[0]
            .log()
            .contains("cluster interfaces from --cluster-iface"),
        "{}",
        bed.agents[0].log()
    );
    // Both frontends of the pod on node B, requests entering node A: the
    // SYNs leave A through `peer` with their frontend, B tracks each, and
    // each session is answered from the frontend it dialled.
    let mut sessions: Vec<Session> = [8022, 9022, 8022, 9022]
        .iter()
        .map(|&port| bed.session(port))
        .collect();
    for (i, s) in sessions.iter_mut().enumerate() {
        s.echo(&format!("s{i}")).unwrap();
    }
    let expected = client_sessions(&bed.cluster.client, &[8022, 9022]);
    assert_eq!(expected.len(), 4, "{expected:?}");
    assert_eq!(bed.established(1), expected, "node B tracks every session");
    assert!(bed.counter(0, "frontend_option_added") >= 4);
    assert!(bed.counter(1, "frontend_option_learned") >= 4);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_cross_node_plain_a_pod_on_node_b_answers_from_its_frontend_without_the_option() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.2.5:22")],
        &["--cross-node", "plain"],
    );
    for _ in 0..3 {
        assert_pod_2_sees_the_client(&bed, 8022);
    }
    // No option crossed; node B, without state, gave the backend's
    // replies its only frontend as they left.
    assert_eq!(bed.counter(0, "frontend_option_added"), 0);
    assert_eq!(bed.counter(1, "frontend_option_learned"), 0);
    assert!(bed.established(1).is_empty());
    assert!(bed.counter(1, "reverse_fallback") > 10);
}

/// In file mode over host-gw routes, node A reaches node B's pods through
/// its external interface; without a key, B would ignore A's plain option
/// (it arrives on B's external interface) and every login through A would
/// time out. A's agent says so at start instead, and exits before it
/// touches the node.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn over_host_gw_routes_without_a_key_the_agent_refuses_to_start_naming_the_mapping_and_the_fix() {
    use ssh_fwd_tests::{Agent, Bpffs, agent::write_mappings, topology::EXT_IFACE};
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        host_gw: true,
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(1, 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job", "198.18.0.10:8022", "10.244.2.5:22")]).unwrap();
    let bpffs = [Bpffs::new().unwrap(), Bpffs::new().unwrap()];
    // Node B's own pod is behind a veth: B has nothing to refuse.
    let _b = Agent::start(&cluster.nodes[1], &[EXT_IFACE], &mappings, &bpffs[1], &[]).unwrap();
    let args = ["--mappings".to_owned(), mappings.display().to_string()];
    let mut a = Agent::spawn(&cluster.nodes[0], &[EXT_IFACE], &bpffs[0], &args).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = a.exited().unwrap() {
            break status;
        }
        if a.log().contains("agent ready") {
            let login = cluster_login(&cluster);
            panic!(
                "node A's agent started; a login through it: {login}; node B's \
                 frontend_option_untrusted: {}",
                bpffs[1].list().unwrap()["counters"]["frontend_option_untrusted"]
            );
        }
        assert!(std::time::Instant::now() < deadline, "{}", a.log());
        // The poll's pace; the deadline is the assertion above.
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = a.log();
    assert!(!exited.success(), "{log}");
    for said in [
        "mapping job: its backend 10.244.2.5:22 is reached through the external interface ext0",
        "frontend_option_untrusted",
        "--cross-node-key",
        "--allow-unsealed-cross-node",
    ] {
        assert!(log.contains(said), "{said}: {log}");
    }
    // Refused before it loaded anything: nothing pinned, nothing mounted.
    let pinned = std::fs::read_dir(bpffs[0].path()).map_or(0, Iterator::count);
    assert_eq!(pinned, 0, "node A's bpffs");
}

/// At a reload, the same: a mappings file that adds a pod on node B over
/// host-gw routes, without a key, is refused whole, the error logged, and
/// the running mappings stay.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn over_host_gw_routes_without_a_key_a_reload_adding_a_pod_on_node_b_keeps_the_running_mappings() {
    use ssh_fwd_tests::{Agent, Bpffs, agent::write_mappings, topology::EXT_IFACE};
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        host_gw: true,
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(1, 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    let local = ("local", "198.18.0.10:8022", "10.244.1.5:22");
    write_mappings(&mappings, &[local]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let mut a = Agent::start(&cluster.nodes[0], &[EXT_IFACE], &mappings, &bpffs, &[]).unwrap();
    assert_eq!(cluster_login(&cluster), "pod-1");
    let remote = ("remote", "198.18.0.10:9022", "10.244.2.5:22");
    write_mappings(&mappings, &[local, remote]).unwrap();
    a.hangup();
    a.wait_for_log("the running mappings stay", Duration::from_secs(10))
        .unwrap();
    let log = a.log();
    assert!(
        log.contains(
            "mapping remote: its backend 10.244.2.5:22 is reached through the external interface ext0"
        ),
        "{log}"
    );
    let frontends: Vec<String> = (bpffs
        .list_of("mappings")
        .unwrap()
        .as_array()
        .unwrap()
        .iter())
    .map(|row| row["frontend"].as_str().unwrap().to_owned())
    .collect();
    assert_eq!(frontends, ["198.18.0.10:8022"]);
    assert_eq!(cluster_login(&cluster), "pod-1");
}

/// A login from the client through node A's frontend, in at most 10 s:
/// its output, or what ssh said.
fn cluster_login(cluster: &Cluster) -> String {
    let mut login = cluster.ssh().command(
        &cluster.client,
        EXTERNAL_IP,
        8022,
        "hostname",
        Duration::from_secs(10),
    );
    match cmd::run(login.stdin(Stdio::null())) {
        Ok(out) => out.trim().to_owned(),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ranks_reach_each_other_by_pod_ip_over_host_gw_routes_while_the_ssh_mapping_exists() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        host_gw: true,
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(0, 1).unwrap(); // rank 1, node A
    cluster.add_pod(1, 2).unwrap(); // rank 0, node B, behind the frontend
    // The nodes reach each other over their external interfaces, where
    // anyone may send a plain option: node A seals it with the key both
    // share, and node B believes it.
    let key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key.path(), "00112233445566778899aabbccddeeff\n").unwrap();
    let bed = Bed::start(
        cluster,
        &[("rank0", "198.18.0.10:8022", "10.244.2.5:22")],
        &["--cross-node-key", key.path().to_str().unwrap()],
    );
    let ssh = bed.cluster.ssh();
    let rank1 = &bed.cluster.pods[0].ns;
    // Rank 1 to rank 0's pod address: the reply leaves node B through its
    // external interface, and must keep the pod's address.
    let seen = ssh
        .run(rank1, "10.244.2.5", 22, "hostname; echo $SSH_CONNECTION")
        .unwrap();
    assert_eq!(seen.lines().next(), Some("pod-2"), "{seen}");
    assert!(seen.contains("10.244.1.5"), "rank 0 sees rank 1: {seen}");
    assert!(bed.counter(1, "reply_untracked") > 5);
    // And the frontend works alongside, from outside, across the nodes.
    assert_pod_2_sees_the_client(&bed, 8022);
    assert!(bed.counter(1, "frontend_option_learned") > 0);
    assert_eq!(bed.counter(1, "frontend_option_untrusted"), 0);
    // Many times over, while other connections come and go.
    for _ in 0..5 {
        assert_eq!(
            ssh.run(rank1, "10.244.2.5", 22, "hostname").unwrap(),
            "pod-2"
        );
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ranks_reach_each_other_by_pod_ip_while_an_off_path_sender_sprays_syns_with_a_ranks_address() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        host_gw: true,
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(0, 1).unwrap(); // rank 1, node A
    cluster.add_pod(1, 2).unwrap(); // rank 0, node B, behind the frontend
    // Without a key, node A refuses a frontend whose pod it reaches through
    // its external interface: rank to rank is under test here, not logins
    // from outside.
    let bed = Bed::start(
        cluster,
        &[("rank0", "198.18.0.10:8022", "10.244.2.5:22")],
        &["--allow-unsealed-cross-node"],
    );
    // SYNs with rank 1's address, from every source port, to rank 0's
    // frontend: they enter node A, rank 1's node, and fill its half-open
    // table with entries for every 4-tuple rank 1 may use to reach rank 0.
    let spray: Vec<Syn> = (0..=u16::MAX)
        .map(|sport| Syn {
            src: Ipv4Addr::new(10, 244, 1, 5),
            sport,
            dst: EXTERNAL_IP.parse().unwrap(),
            dport: 8022,
            seq: u32::from(sport).wrapping_mul(2_654_435_761),
        })
        .collect();
    let sent = flood::send(&bed.cluster.client, spray, Duration::from_secs(60)).unwrap();
    assert_eq!(sent, 65_536);
    // Rank 1's own SYN to rank 0's pod address leaves node A without the
    // frontend option, so rank 0's SYN-ACK keeps its address.
    let rank1 = &bed.cluster.pods[0].ns;
    for _ in 0..3 {
        assert_eq!(
            bed.cluster
                .ssh()
                .run(rank1, "10.244.2.5", 22, "hostname")
                .unwrap(),
            "pod-2"
        );
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn spoofed_syn_floods_neither_take_over_nor_evict_live_sessions() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.1.5:22"),
            ("second", "198.18.0.10:9022", "10.244.1.5:22"),
        ],
        &[],
    );
    let mut idle = bed.session(8022);
    let mut busy = bed.session(9022);
    let idle_port = client_ports(&bed.cluster.client, 8022)[0];
    let client: Ipv4Addr = CLIENT_IP.parse().unwrap();
    let external: Ipv4Addr = EXTERNAL_IP.parse().unwrap();
    // 65,536 SYNs from the client's own address, every source port, to the
    // other frontend; the busy session keeps talking meanwhile.
    let takeover: Vec<Syn> = (0..=u16::MAX)
        .map(|sport| Syn {
            src: client,
            sport,
            dst: external,
            dport: 9022,
            seq: u32::from(sport) * 7,
        })
        .collect();
    // Logins through that same frontend meanwhile: the flood spoofs their
    // own source ports too.
    let flooding = std::sync::atomic::AtomicBool::new(true);
    let (echoes, logins) = std::thread::scope(|s| {
        let talker = s.spawn(|| {
            (0..30).all(|i| {
                std::thread::sleep(Duration::from_millis(100));
                busy.echo(&format!("busy{i}")).is_ok()
            })
        });
        let logins = s.spawn(|| logins_while(&bed, 9022, &flooding));
        let sent = flood::send(&bed.cluster.client, takeover, Duration::from_secs(60));
        flooding.store(false, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sent.unwrap(), 65_536);
        (talker.join().unwrap(), logins.join().unwrap())
    });
    assert!(echoes, "the busy session answered all through the flood");
    assert_logged_in(&logins, "during the takeover flood");
    assert!(
        bed.counter(0, "conflict_dropped") >= 1,
        "the live 4-tuple was refused"
    );
    // 500,000 SYNs from random sources.
    let mut rng = Rng::new(0x5eed);
    let random: Vec<Syn> = (0..500_000)
        .map(|_| Syn {
            src: rng.address(),
            sport: rng.draw() as u16,
            dst: external,
            dport: [8022, 9022][(rng.draw() % 2) as usize],
            seq: rng.draw() as u32,
        })
        .collect();
    flooding.store(true, std::sync::atomic::Ordering::Relaxed);
    let logins = std::thread::scope(|s| {
        let logins = s.spawn(|| logins_while(&bed, 8022, &flooding));
        let sent = flood::send(&bed.cluster.client, random, Duration::from_secs(120));
        flooding.store(false, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sent.unwrap(), 500_000);
        logins.join().unwrap()
    });
    assert_logged_in(&logins, "during the random flood");
    idle.echo("still-here").unwrap();
    busy.echo("and-here").unwrap();
    assert!(
        bed.established(0).contains(&(idle_port, 8022)),
        "the idle session kept its frontend"
    );
    assert_eq!(
        bed.cluster
            .ssh()
            .run(&bed.cluster.client, EXTERNAL_IP, 9022, "hostname")
            .unwrap(),
        "pod-1",
        "a new login works after the floods"
    );
}

/// Logs in through the frontend on `port` over and over while `flooding`
/// holds (at least once, at most 20 times); what each login printed, and
/// whether the flood was still running when it finished.
fn logins_while(
    bed: &Bed,
    port: u16,
    flooding: &std::sync::atomic::AtomicBool,
) -> Vec<(anyhow::Result<String>, bool)> {
    let ssh = bed.cluster.ssh();
    let mut logins = Vec::new();
    while logins.len() < 20 {
        let login = ssh.run(&bed.cluster.client, EXTERNAL_IP, port, "hostname");
        let during = flooding.load(std::sync::atomic::Ordering::Relaxed);
        logins.push((login, during));
        if !during {
            break;
        }
    }
    logins
}

/// Every login reached pod-1, and at least one finished while the flood
/// ran.
fn assert_logged_in(logins: &[(anyhow::Result<String>, bool)], when: &str) {
    assert!(!logins.is_empty());
    for (i, (login, _)) in logins.iter().enumerate() {
        assert!(
            matches!(login, Ok(host) if host == "pod-1"),
            "login {i} {when}: {login:?}"
        );
    }
    assert!(
        logins.iter().any(|(_, during)| *during),
        "no login finished {when}: the flood was over first ({} logins)",
        logins.len()
    );
}

/// A connection from `client:sport` to the frontend on `port`, made inside
/// `ns` (a socket keeps the namespace it was made in), with sshd's banner
/// read and the client's own sent.
fn connect_from_port(ns: &NetNs, sport: u16, port: u16) -> std::net::TcpStream {
    std::thread::scope(|s| {
        s.spawn(move || {
            ns.enter_on_this_thread().unwrap();
            let socket =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.set_reuse_address(true).unwrap();
            socket
                .bind(&SocketAddrV4::new(CLIENT_IP.parse().unwrap(), sport).into())
                .unwrap();
            let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), port);
            socket
                .connect_timeout(&to.into(), Duration::from_secs(5))
                .unwrap();
            let mut stream: std::net::TcpStream = socket.into();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut banner = [0u8; 8];
            stream.read_exact(&mut banner).unwrap();
            assert_eq!(&banner, b"SSH-2.0-", "sshd's banner through {port}");
            stream.write_all(b"SSH-2.0-test\r\n").unwrap();
            stream
        })
        .join()
        .unwrap()
    })
}

/// Closes a connection the way a client that hangs up cleanly does: its
/// FIN, then whatever the server still sends, up to the server's FIN. No
/// RST: nothing is left unread.
fn close_gracefully(mut stream: std::net::TcpStream) {
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_client_that_reconnects_from_the_same_port_through_the_other_frontend_gets_that_frontend() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.1.5:22"),
            ("second", "198.18.0.10:9022", "10.244.1.5:22"),
        ],
        &[],
    );
    let client = &bed.cluster.client;
    close_gracefully(connect_from_port(client, 45_678, 8022));
    // Both sides closed: the entry stays, closing, for its close timeout.
    let states = || -> Vec<(u16, u16, &'static str)> {
        bed.conns(0)
            .iter()
            .filter_map(|e| match e {
                Entry::Established(k, c) => Some((k.client().port(), c.frontend.port(), e.state())),
                _ => None,
            })
            .collect()
    };
    assert!(
        cmd::wait_until(Duration::from_secs(5), || states()
            == [(45_678, 8022, "closing")]),
        "{:?}",
        states()
    );
    // The same port, the other frontend: the new handshake replaces the
    // closing entry, and the banner comes back from the frontend dialled.
    let second = connect_from_port(client, 45_678, 9022);
    assert_eq!(states(), [(45_678, 9022, "established")]);
    assert_eq!(bed.counter(0, "conn_replaced"), 1);
    drop(second);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn across_nodes_a_client_that_reconnects_from_the_same_port_through_the_other_frontend_gets_it() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8023", "10.244.2.5:22"),
            ("second", "198.18.0.10:8024", "10.244.2.5:22"),
        ],
        &[],
    );
    let client = &bed.cluster.client;
    // The client reads the banner and closes first; the pod's node (B)
    // sees both FINs.
    close_gracefully(connect_from_port(client, 45_679, 8023));
    let states = || -> Vec<(u16, u16, &'static str)> {
        bed.conns(1)
            .iter()
            .filter_map(|e| match e {
                Entry::Established(k, c) => Some((k.client().port(), c.frontend.port(), e.state())),
                _ => None,
            })
            .collect()
    };
    assert!(
        cmd::wait_until(Duration::from_secs(5), || states()
            == [(45_679, 8023, "closing")]),
        "{:?}",
        states()
    );
    // The pod's end of the close done too (LAST_ACK answered): the next
    // SYN from the port is a new connection to it, not a segment of the
    // old one.
    let pod = &bed.cluster.pods[0].ns;
    cmd::eventually(
        "the pod to close its end of 45679",
        Duration::from_secs(5),
        || {
            cmd::run(pod.command("ss").args(["-Htan", "dport = :45679"]))
                .is_ok_and(|out| out.trim().is_empty())
        },
    );
    // The same port through the other frontend: node A translates it,
    // node B learns the frontend from the SYN, and the client's ACK there
    // claims it for that frontend, not for the closed entry's.
    let second = connect_from_port(client, 45_679, 8024);
    assert_eq!(states(), [(45_679, 8024, "established")]);
    drop(second);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn table_size_flags_size_the_tables_and_a_full_established_table_holds_a_handshake_back() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.1.5:22")],
        &[
            "--conn-table-size",
            "1024",
            "--half-open-table-size",
            "2048",
        ],
    );
    let layout = PinLayout::new(bed.bpffs[0].path());
    assert_eq!(
        ConnTables::open_pinned(&layout)
            .unwrap()
            .capacities()
            .unwrap(),
        (1024, 2048)
    );
    // Other clients' connections fill the established table.
    let frontend = Endpoint::new(EXTERNAL_IP.parse().unwrap(), 8022);
    let backend = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    let data = MapData::from_pin(layout.map(CONNS)).unwrap();
    let mut conns: HashMap<MapData, ConnKey, Conn> =
        HashMap::try_from(Map::from_map_data(data).unwrap()).unwrap();
    let now = clock_ns();
    for i in 0..1024u32 {
        let client = Endpoint::new(Ipv4Addr::from(0x6440_0000 + i), 1024);
        let conn = Conn {
            frontend,
            last_seen_ns: now,
            created_ns: now,
            ..Conn::ZERO
        };
        conns
            .insert(ConnKey::new(client, backend), conn, 0)
            .unwrap();
    }
    // A real client's handshake: the client sees it complete (the SYN-ACK
    // is the half-open entry's), the full table refuses it, counted, and
    // holds its ACK back, so the pod sends nothing unrestored.
    let mut stream = std::thread::scope(|s| {
        s.spawn(|| {
            bed.cluster.client.enter_on_this_thread().unwrap();
            let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), 8022);
            std::net::TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)).unwrap()
        })
        .join()
        .unwrap()
    });
    assert!(cmd::wait_until(Duration::from_secs(5), || bed
        .counter(0, "conn_table_full")
        >= 1));
    let listed = cmd::run(
        std::process::Command::new(ssh_fwd_tests::agent::binary().unwrap())
            .args(["list", "conns", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    assert!(
        listed.contains("established table: 1024 of 1024 entries; refused when full: "),
        "{listed}"
    );
    // Held back: the pod never saw the handshake complete, so sshd sends
    // no banner while the table stays full.
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut early = [0u8; 8];
    let read = stream.read(&mut early);
    assert!(
        matches!(&read, Err(e) if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "something arrived while the established table was full: {read:?} {early:?}"
    );
    // Room frees: the pod's next SYN-ACK (it retransmits within seconds)
    // and the client's answer complete the handshake, and sshd's banner
    // comes through.
    let first_filler = ConnKey::new(Endpoint::new(Ipv4Addr::from(0x6440_0000), 1024), backend);
    conns.remove(&first_filler).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut banner = [0u8; 8];
    stream.read_exact(&mut banner).unwrap();
    assert_eq!(&banner, b"SSH-2.0-");
    let client_port = stream.local_addr().unwrap().port();
    assert!(
        bed.established(0).contains(&(client_port, 8022)),
        "the client's connection is tracked once room freed"
    );
    assert!(
        listed.contains(" of 2048 entries; SYNs no client completed: "),
        "{listed}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_shell_idle_for_8_hours_keeps_its_connection_and_one_idle_past_the_timeout_loses_it() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.1.5:22")],
        &[],
    );
    let mut shell = bed.session(8022);
    let layout = PinLayout::new(bed.bpffs[0].path());
    let mut tables = ConnTables::open_pinned(&layout).unwrap();
    let timeouts = Timeouts::with_idle(Duration::from_secs(24 * 3600));
    // The sweep, run with a clock eight hours ahead: the shell stays.
    let swept = tables.sweep(clock_ns() + 8 * HOUR, &timeouts);
    assert_eq!((swept.expired, swept.conns), (0, 1));
    shell.echo("after-8-hours").unwrap();
    // Twenty-five hours ahead: past the idle timeout, it goes.
    let swept = tables.sweep(clock_ns() + 25 * HOUR, &timeouts);
    assert_eq!((swept.expired, swept.conns), (1, 0));
    assert!(bed.established(0).is_empty());
}

/// Runs `tcpdump` on the client for ICMP errors while `work` runs; returns
/// what it printed.
fn icmp_seen_by_client(client: &NetNs, work: impl FnOnce()) -> String {
    seen_by_client(client, "icmp", work)
}

/// What `tcpdump -v` with `filter` saw on the client's link while `work`
/// ran.
fn seen_by_client(client: &NetNs, filter: &str, work: impl FnOnce()) -> String {
    crate::common::seen_on(client, "eth0", &format!("-v {filter}"), work)
}

/// 8 MiB each way through the frontend, compared by hash.
fn bulk_both_ways(bed: &Bed) {
    bulk_both_ways_to(bed, EXTERNAL_IP);
}

/// [`bulk_both_ways`] to the frontend on `host`, port 8022.
fn bulk_both_ways_to(bed: &Bed, host: &str) {
    let ssh = bed.cluster.ssh();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    cmd::run(
        std::process::Command::new("head")
            .args(["-c", "8M", "/dev/urandom"])
            .stdout(std::fs::File::create(&data).unwrap()),
    )
    .unwrap();
    let sum =
        cmd::run(std::process::Command::new("sha256sum").arg(&data)).unwrap()[..64].to_owned();
    let up = cmd::run(
        ssh.command(
            &bed.cluster.client,
            host,
            8022,
            "sha256sum",
            Duration::from_secs(60),
        )
        .stdin(std::fs::File::open(&data).unwrap()),
    )
    .unwrap();
    assert_eq!(&up[..64], sum, "upload");
    let got = dir.path().join("got");
    let status = ssh
        .command(
            &bed.cluster.client,
            host,
            8022,
            &format!("cat {}", data.display()),
            Duration::from_secs(60),
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&got).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "download: {status}");
    let down_sum = cmd::run(std::process::Command::new("sha256sum").arg(&got)).unwrap();
    assert_eq!(&down_sum[..64], sum, "download");
}

/// No segmentation offload on the client's or the pod's link: every
/// packet is its real size, so the path MTU has to be right.
fn no_offload(bed: &Bed) {
    for ns in [&bed.cluster.client, &bed.cluster.pods[0].ns] {
        cmd::run(
            ns.command("ethtool")
                .args(["-K", "eth0", "tso", "off", "gso", "off", "gro", "off"]),
        )
        .unwrap();
    }
}

/// Bulk data both ways to a pod on node B through node A, over `wiring`'s
/// narrow link and without segmentation offload; what ICMP errors the
/// client saw, and the bed.
fn bulk_over_narrow_link(wiring: Wiring) -> (Bed, String) {
    let mut cluster = Cluster::new(wiring).unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.2.5:22")],
        &[],
    );
    no_offload(&bed);
    let seen = icmp_seen_by_client(&bed.cluster.client, || bulk_both_ways(&bed));
    (bed, seen)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn path_mtu_is_discovered_through_a_narrow_client_link() {
    privilege::require();
    let (bed, seen) = bulk_over_narrow_link(Wiring {
        client_link_mtu: Some(1280),
        ..Wiring::default()
    });
    assert!(
        !seen.contains("10.244."),
        "the client saw a pod address: {seen}"
    );
    // The router's errors went to the frontend, and node A translated them.
    assert!(bed.counter(0, "icmp_translated") >= 1, "PMTU discovery ran");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_narrow_link_between_the_nodes_needs_no_path_mtu_discovery() {
    privilege::require();
    let (bed, seen) = bulk_over_narrow_link(Wiring {
        node_link_mtu: Some(1280),
        ..Wiring::default()
    });
    // Node B lowered the MSS its pod announced to what the link from node
    // A carries, so the client never sent A a segment too large for it.
    assert!(
        !seen.contains("need to frag"),
        "the client was told to fragment: {seen}"
    );
    assert!(
        !seen.contains("10.244."),
        "the client saw a pod address: {seen}"
    );
    assert!(bed.counter(1, "frontend_option_learned") >= 2);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn path_mtu_is_discovered_over_ipv6_through_a_narrow_client_link() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring {
        client_link_mtu: Some(1280),
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_ipv6().unwrap();
    let bed = Bed::start(
        cluster,
        &[("job6", "[fd00:198::10]:8022", "[fd00:244:1::5]:22")],
        &[],
    );
    no_offload(&bed);
    // Any packet from a pod's address reaching the client: a reply left
    // unrestored, or an error naming the pod.
    let leaked = seen_by_client(&bed.cluster.client, "ip6 and src net fd00:244::/32", || {
        bulk_both_ways_to(&bed, EXTERNAL_IP6)
    });
    assert!(
        leaked.trim().is_empty(),
        "the client saw a pod address: {leaked}"
    );
    // The router's Packet Too Big went to the frontend, and node A
    // translated it for the pod.
    assert!(bed.counter(0, "icmp_translated") >= 1, "PMTU discovery ran");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_packet_too_big_from_the_node_reaches_the_client_naming_the_frontend() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_ipv6().unwrap();
    // The pod's link is narrow, and the pod announces an MSS for a
    // 1500-byte path all the same: the client's segments exceed the link,
    // and the node tells the client, quoting the segment as translated.
    let pod = &cluster.pods[0];
    cluster.nodes[0]
        .ip(&["link", "set", &pod.node_iface, "mtu", "1280"])
        .unwrap();
    pod.ns.ip(&["link", "set", "eth0", "mtu", "1280"]).unwrap();
    pod.ns
        .ip(&[
            "-6",
            "route",
            "replace",
            "default",
            "via",
            "fd00:244:1::1",
            "advmss",
            "1440",
        ])
        .unwrap();
    let bed = Bed::start(
        cluster,
        &[("job6", "[fd00:198::10]:8022", "[fd00:244:1::5]:22")],
        &[],
    );
    no_offload(&bed);
    // Packet Too Big only (ICMPv6 type 2), in hex: tcpdump does not
    // decode its quote.
    let seen = seen_by_client(&bed.cluster.client, "-x icmp6 and ip6[40] == 2", || {
        bulk_both_ways_to(&bed, EXTERNAL_IP6)
    });
    let quoted = quoted_destinations6(&seen);
    assert!(
        !quoted.is_empty(),
        "no Packet Too Big reached the client: {seen}"
    );
    let frontend: std::net::Ipv6Addr = EXTERNAL_IP6.parse().unwrap();
    assert!(
        quoted.iter().all(|q| *q == frontend),
        "every Packet Too Big quotes the frontend, never the pod: {quoted:?}"
    );
    assert!(bed.counter(0, "icmp_translated") >= 1);
}

/// The destination each ICMPv6 error in `dump` (tcpdump `-x`: each
/// packet's IPv6 bytes in hex after its line) quotes.
fn quoted_destinations6(dump: &str) -> Vec<std::net::Ipv6Addr> {
    let mut packets: Vec<Vec<u8>> = Vec::new();
    for line in dump.lines() {
        let Some(hex) = line.trim_start().strip_prefix("0x") else {
            packets.push(Vec::new());
            continue;
        };
        let Some(current) = packets.last_mut() else {
            continue;
        };
        let words = hex.split_once(':').map_or("", |(_, w)| w);
        for word in words.split_whitespace() {
            for i in (0..word.len()).step_by(2) {
                current.push(u8::from_str_radix(&word[i..i + 2], 16).unwrap());
            }
        }
    }
    // The outer header (40), the ICMPv6 header (8), then the quoted
    // header's destination (24 bytes in).
    packets
        .iter()
        .filter_map(|p| <[u8; 16]>::try_from(p.get(72..88)?).ok())
        .map(std::net::Ipv6Addr::from)
        .collect()
}

/// The client's source ports for this test: few, so that a spoofer can
/// keep up with every one of them.
const CLIENT_PORTS: [u16; 4] = [40_000, 40_001, 40_002, 40_003];

/// Runs `work` while an off-path sender keeps sending SYNs from the
/// client's address, from each of [`CLIENT_PORTS`], to the frontend on
/// `port`: every half-open entry of the client's connections on node A
/// soon names that frontend. Returns how many SYNs went out.
fn spoofing_the_clients_ports(bed: &Bed, port: u16, work: impl FnOnce()) -> usize {
    spoofing_the_clients_ports_every(bed, port, Duration::from_millis(2), work)
}

/// [`spoofing_the_clients_ports`], a round of SYNs every `pause`.
fn spoofing_the_clients_ports_every(
    bed: &Bed,
    port: u16,
    pause: Duration,
    work: impl FnOnce(),
) -> usize {
    let client = &bed.cluster.client;
    client
        .sysctl("net.ipv4.ip_local_port_range", "40000 40003")
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let spoofer = s.spawn(|| {
            let mut sent = 0;
            let mut seq = 0x5eed_u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let syns = CLIENT_PORTS
                    .iter()
                    .map(|&sport| {
                        seq = seq.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        Syn {
                            src: CLIENT_IP.parse().unwrap(),
                            sport,
                            dst: EXTERNAL_IP.parse().unwrap(),
                            dport: port,
                            seq,
                        }
                    })
                    .collect();
                sent += flood::send(client, syns, Duration::from_secs(1)).unwrap();
                std::thread::sleep(pause);
            }
            sent
        });
        {
            // Stops the spoofer however `work` ends: a scope waits for its
            // threads, so a failing `work` would otherwise wait forever.
            let _stop = StopOnDrop(&stop);
            work();
        }
        spoofer.join().unwrap()
    })
}

struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn path_mtu_discovery_both_ways_survives_spoofed_syns_from_the_clients_own_ports() {
    privilege::require();
    // A narrow link to the client (the pod's replies need the router's
    // "fragmentation needed", sent to the frontend, which enters node A)
    // and a narrower one between the nodes (the client's requests cross
    // it); the pod on node B behind two frontends.
    let mut cluster = Cluster::new(Wiring {
        client_link_mtu: Some(1400),
        node_link_mtu: Some(1280),
        ..Wiring::default()
    })
    .unwrap();
    cluster.add_pod(1, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("job", "198.18.0.10:8022", "10.244.2.5:22"),
            ("other", "198.18.0.10:9022", "10.244.2.5:22"),
        ],
        &[],
    );
    no_offload(&bed);
    let mut seen = String::new();
    let spoofed = spoofing_the_clients_ports(&bed, 9022, || {
        seen = icmp_seen_by_client(&bed.cluster.client, || bulk_both_ways(&bed));
    });
    assert!(spoofed > 1_000, "{spoofed} spoofed SYNs");
    assert!(
        !seen.contains("10.244."),
        "the client saw a pod address: {seen}"
    );
    assert!(
        !seen.contains("198.18.0.10.9022"),
        "an error named the spoofed frontend: {seen}"
    );
    assert!(
        bed.counter(0, "icmp_translated") >= 1,
        "the router's errors reached the pod"
    );
    assert!(
        bed.counter(1, "conflict_dropped") >= 1,
        "the spoofed SYNs reached node B and were refused there"
    );
}

/// Connects from `client` to the frontend on `port` with the client's ACK
/// of the SYN-ACK held back, and reads sshd's banner. On a connecting
/// socket, TCP_DEFER_ACCEPT makes Linux wait up to 200 ms for data to carry
/// that ACK: the pod's SYN-ACK has passed the node and the completing ACK
/// has not, the moment a spoofed SYN for the same 4-tuple would have to
/// land to displace the handshake. Closed with a RST (no TIME_WAIT to hold
/// the port).
fn banner_with_a_late_ack(client: &NetNs, port: u16) -> anyhow::Result<Vec<u8>> {
    use std::os::fd::AsRawFd as _;

    std::thread::scope(|s| {
        s.spawn(|| {
            client.enter_on_this_thread()?;
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            let one: libc::c_int = 1;
            // SAFETY: a valid socket and an int option of the right size.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_DEFER_ACCEPT,
                    (&raw const one).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            anyhow::ensure!(
                rc == 0,
                "TCP_DEFER_ACCEPT: {}",
                std::io::Error::last_os_error()
            );
            let to = SocketAddrV4::new(EXTERNAL_IP.parse()?, port);
            socket.connect_timeout(&to.into(), Duration::from_secs(10))?;
            socket.set_linger(Some(Duration::ZERO))?;
            let mut stream: std::net::TcpStream = socket.into();
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut banner = vec![0u8; 8];
            stream.read_exact(&mut banner)?;
            Ok(banner)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the connecting thread panicked"))?
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn logins_complete_while_spoofed_syns_from_their_own_ports_reach_the_same_frontend() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.1.5:22")],
        &[],
    );
    let client = &bed.cluster.client;
    // The client's ports come back into use soon (four of them).
    client.sysctl("net.ipv4.tcp_tw_reuse", "1").unwrap();
    let ssh = bed.cluster.ssh();
    // A round every 20 ms: each SYN the pod answers puts a SYN-ACK for
    // another sequence number on the client's port, and a connecting
    // socket that gets one re-arms its SYN retransmit to two ticks (8 ms
    // at HZ=250), so one every 2 ms would starve the retransmit of a SYN
    // the pod's own TCP refused (the client's stack, not ssh-fwd). 20 ms
    // still puts ten of them inside each handshake's late ACK.
    let pause = Duration::from_millis(20);
    let spoofed = spoofing_the_clients_ports_every(&bed, 8022, pause, || {
        for i in 0..2 {
            let banner = banner_with_a_late_ack(client, 8022);
            assert!(
                matches!(&banner, Ok(b) if b.as_slice() == b"SSH-2.0-"),
                "connection {i} with a late ACK: {banner:?}"
            );
            let login = ssh.run(client, EXTERNAL_IP, 8022, "hostname");
            assert!(
                matches!(&login, Ok(host) if host == "pod-1"),
                "login {i}: {login:?}"
            );
        }
    });
    assert!(spoofed > 100, "{spoofed} spoofed SYNs");
    assert_eq!(bed.counter(0, "conn_table_full"), 0);
}
