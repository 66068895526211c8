//! IPv6 across nodes, end to end with real OpenSSH in the routed two-node
//! cluster: a client reaches an IPv6 frontend on node A, the pod lives on
//! node B. Node A translates the SYN and sends its frontend along in a
//! Destination Options header; node B learns it, tracks the connection and
//! answers from that frontend straight to the router. Under tc and generic
//! XDP, sealed with the cluster's key over host-gw routes (and a plain
//! option not believed there), under `--cross-node plain`, 64 MiB each way,
//! and over a narrow link between the nodes.

use std::{
    net::{Ipv6Addr, SocketAddr},
    path::Path,
    process::Stdio,
    time::Duration,
};

use crate::common::{ClusterBed as Bed, Session};
use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    pins::PinLayout,
};
use ssh_fwd_tests::{
    NetNs,
    cluster::{Cluster, NODE_IP6S, PEER_IFACE, PEER_IP6S, Wiring},
    cmd, privilege,
    topology::{CLIENT_IP6, EXT_IFACE, EXTERNAL_IP6, pod_ip6},
};

/// Two IPv6 frontends of pod 2, which lives on node B.
const FIRST: (&str, &str, &str) = ("first", "[fd00:198::10]:8022", "[fd00:244:2::5]:22");
const SECOND: (&str, &str, &str) = ("second", "[fd00:198::10]:9022", "[fd00:244:2::5]:22");

/// A cluster with IPv6, pod 1 on node A and pod 2 on node B.
fn cluster(wiring: Wiring) -> Cluster {
    let mut cluster = Cluster::new(wiring).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(1, 2).unwrap();
    cluster.add_ipv6().unwrap();
    cluster
}

impl Bed {
    fn session6(&self, port: u16) -> Session {
        Session::open_at(
            &self.cluster.ssh(),
            &self.cluster.client,
            EXTERNAL_IP6,
            port,
        )
        .unwrap_or_else(|e| panic!("session through {port}: {e:#}{}", self.counters()))
    }

    /// The established IPv6 connections on `node`: (client, frontend),
    /// sorted.
    fn established6(&self, node: usize) -> Vec<(SocketAddr, SocketAddr)> {
        let tables = ConnTables::open_pinned(&PinLayout::new(self.bpffs[node].path())).unwrap();
        let mut out: Vec<(SocketAddr, SocketAddr)> = tables
            .entries6()
            .into_iter()
            .filter_map(|e| match e {
                Entry::Established(k, c) if e.state() == "established" => Some((
                    SocketAddr::from((k.client().ip6(), k.client().port())),
                    SocketAddr::from((c.frontend.ip6(), c.frontend.port())),
                )),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Both nodes' counters that are not zero, for failure messages.
    fn counters(&self) -> String {
        let mut out = String::new();
        for (node, bpffs) in ["A", "B"].iter().zip(&self.bpffs) {
            let list = bpffs.list().unwrap();
            let nonzero: Vec<String> = list["counters"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out += &format!("\nnode {node}: {}", nonzero.join(" "));
        }
        out
    }

    /// Logs in from the client through the IPv6 frontend on `port`: pod 2
    /// answers and sees the client's own IPv6 address.
    fn assert_pod_2_sees_the_client(&self, port: u16) {
        let seen = self
            .cluster
            .ssh()
            .run(
                &self.cluster.client,
                EXTERNAL_IP6,
                port,
                "hostname; echo $SSH_CONNECTION",
            )
            .unwrap_or_else(|e| panic!("login through {port}: {e:#}{}", self.counters()));
        let mut lines = seen.lines();
        assert_eq!(lines.next(), Some("pod-2"), "{seen}");
        assert!(
            lines
                .next()
                .is_some_and(|l| l.starts_with(&format!("{CLIENT_IP6} "))),
            "the pod sees the client's own address: {seen}"
        );
    }
}

/// The client's established connections to each of `frontends` (ports):
/// (its own address, the peer's), sorted, as [`Bed::established6`] lists
/// them.
fn client_sessions(client: &NetNs, frontends: &[u16]) -> Vec<(SocketAddr, SocketAddr)> {
    let mut sessions = Vec::new();
    for port in frontends {
        let out = cmd::run(client.command("ss").args([
            "-Htn",
            "state",
            "established",
            &format!("dport = :{port}"),
        ]))
        .unwrap();
        for line in out.lines() {
            let mut words = line.split_whitespace().skip(2);
            let (Some(local), Some(peer)) = (words.next(), words.next()) else {
                continue;
            };
            sessions.push((local.parse().unwrap(), peer.parse().unwrap()));
        }
    }
    sessions.sort_unstable();
    sessions
}

/// `n` sessions from the client, alternating between [`FIRST`] and
/// [`SECOND`], each echoing three times; then the client sees each from
/// the frontend it dialled, node B tracks each so and node A none.
fn sessions_from_their_own_frontends(bed: &Bed, n: usize) {
    let mut sessions: Vec<Session> = (0..n).map(|i| bed.session6([8022, 9022][i % 2])).collect();
    for round in 0..3 {
        for (i, s) in sessions.iter_mut().enumerate() {
            s.echo(&format!("r{round}s{i}")).unwrap();
        }
    }
    let expected = client_sessions(&bed.cluster.client, &[8022, 9022]);
    assert_eq!(expected.len(), n, "{expected:?}");
    let client: Ipv6Addr = CLIENT_IP6.parse().unwrap();
    let frontend: Ipv6Addr = EXTERNAL_IP6.parse().unwrap();
    assert!(
        expected
            .iter()
            .all(|(c, f)| c.ip() == client && f.ip() == frontend),
        "the client talks to the frontend from its own address: {expected:?}"
    );
    assert_eq!(
        bed.established6(1),
        expected,
        "node B tracks every session{}",
        bed.counters()
    );
    assert!(bed.established6(0).is_empty(), "node A never sees a reply");
    let n = n as u64;
    assert!(
        bed.counter(0, "frontend_option_added") >= n,
        "{}",
        bed.counters()
    );
    assert!(
        bed.counter(1, "frontend_option_learned") >= n,
        "{}",
        bed.counters()
    );
    assert_eq!(bed.counter(1, "reverse_fallback"), 0, "{}", bed.counters());
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_ipv6_pod_network_spans_both_nodes_over_a_direct_link_or_the_router() {
    privilege::require();
    let wirings = [
        (Wiring::default(), PEER_IFACE, PEER_IP6S[0]),
        (
            Wiring {
                pod_routes_on_link: true,
                ..Wiring::default()
            },
            PEER_IFACE,
            PEER_IP6S[0],
        ),
        (
            Wiring {
                host_gw: true,
                ..Wiring::default()
            },
            EXT_IFACE,
            NODE_IP6S[0],
        ),
    ];
    for (wiring, via, source) in wirings {
        let cluster = cluster(wiring);
        let ssh = cluster.ssh();
        let route =
            cmd::run(
                cluster.nodes[0]
                    .command("ip")
                    .args(["-6", "route", "get", &pod_ip6(2)]),
            )
            .unwrap();
        assert!(route.contains(&format!("dev {via}")), "{wiring:?}: {route}");
        // Node A, and each pod, reach the other node's pod by its IPv6
        // address, and the answers come back.
        let seen = ssh
            .run(
                &cluster.nodes[0],
                &pod_ip6(2),
                22,
                "hostname; echo $SSH_CONNECTION",
            )
            .unwrap();
        let mut lines = seen.lines();
        assert_eq!(lines.next(), Some("pod-2"), "{wiring:?}: {seen}");
        assert!(
            lines
                .next()
                .is_some_and(|l| l.starts_with(&format!("{source} "))),
            "{wiring:?}: node A's address on the way out: {seen}"
        );
        let a_to_b = ssh
            .run(&cluster.pods[0].ns, &pod_ip6(2), 22, "echo $SSH_CONNECTION")
            .unwrap();
        assert!(a_to_b.starts_with(&pod_ip6(1)), "{wiring:?}: {a_to_b}");
        let b_to_a = ssh
            .run(&cluster.pods[1].ns, &pod_ip6(1), 22, "hostname")
            .unwrap();
        assert_eq!(b_to_a, "pod-1", "{wiring:?}");
        // The client reaches node B's own address (refused: no listener),
        // and the router sends the SSH IP to node A.
        assert!(
            crate::common::refused_at(&cluster.client, NODE_IP6S[1], 1),
            "{wiring:?}"
        );
        let route =
            cmd::run(
                cluster
                    .router
                    .command("ip")
                    .args(["-6", "route", "get", EXTERNAL_IP6]),
            )
            .unwrap();
        assert!(route.contains(NODE_IP6S[0]), "{wiring:?}: {route}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_on_node_b_behind_two_ipv6_frontends_answers_each_session_from_its_own_frontend() {
    privilege::require();
    let bed = Bed::start(cluster(Wiring::default()), &[FIRST, SECOND], &[]);
    // Every request enters node A, every reply leaves node B.
    sessions_from_their_own_frontends(&bed, 10);
    bed.assert_pod_2_sees_the_client(9022);
    bed.assert_pod_2_sees_the_client(8022);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_ipv6_routes_alone_to_the_other_nodes_pods_the_link_to_them_is_a_cluster_interface() {
    privilege::require();
    // The pod network between the nodes routed over IPv6 only: no IPv4
    // route with a gateway names the link to the other node.
    let cluster = cluster(Wiring::default());
    for node in &cluster.nodes {
        node.ip(&["route", "del", "10.244.0.0/16"]).unwrap();
    }
    let bed = Bed::start(cluster, &[FIRST], &[]);
    for agent in &bed.agents {
        assert!(
            agent
                .log()
                .contains("cluster interfaces: those of the routes with a gateway"),
            "{}",
            agent.log()
        );
    }
    bed.assert_pod_2_sees_the_client(8022);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn under_generic_xdp_ipv6_sessions_reach_a_pod_on_node_b_from_their_own_frontends() {
    privilege::require();
    let bed = Bed::start(
        cluster(Wiring::default()),
        &[FIRST, SECOND],
        &["--attach", "xdp-generic"],
    );
    bed.assert_pod_2_sees_the_client(8022);
    sessions_from_their_own_frontends(&bed, 4);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn over_host_gw_routes_a_sealed_ipv6_frontend_option_carries_logins_to_node_b() {
    privilege::require();
    // The nodes reach each other only through the router, over their
    // external interfaces: node B believes the frontend only sealed with
    // the key both share.
    let key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key.path(), "00112233445566778899aabbccddeeff\n").unwrap();
    let bed = Bed::start(
        cluster(Wiring {
            host_gw: true,
            ..Wiring::default()
        }),
        &[FIRST, SECOND],
        &["--cross-node-key", key.path().to_str().unwrap()],
    );
    // The SYN reaches node B's external interface from the router with a
    // Destination Options header (next header 60) before the pod.
    let node_b = &bed.cluster.nodes[1];
    let filter = format!("ip6 and ip6[6] == 60 and dst host {}", pod_ip6(2));
    let syns = crate::common::seen_on(node_b, EXT_IFACE, &filter, || {
        bed.assert_pod_2_sees_the_client(8022);
    });
    assert!(syns.contains("Flags [S]"), "{syns}{}", bed.counters());
    sessions_from_their_own_frontends(&bed, 4);
    assert_eq!(bed.counter(1, "frontend_option_untrusted"), 0);
    assert_eq!(bed.counter(1, "frontend_option_forged"), 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn over_host_gw_routes_a_plain_ipv6_frontend_option_is_not_believed_on_node_b() {
    privilege::require();
    let bed = Bed::start(
        cluster(Wiring {
            host_gw: true,
            ..Wiring::default()
        }),
        &[FIRST],
        // Node A would refuse this at start (its route to the pod leaves
        // through its external interface, and it has no key): here the
        // data path is under test, not that check.
        &["--allow-unsealed-cross-node"],
    );
    // Anyone can send a plain option to an external interface: node B
    // removes and ignores it, tracks nothing, and restores no frontend to
    // the pod's answer, so the client's handshake never completes.
    let connected = connect(&bed.cluster.client, 8022, Duration::from_secs(3));
    assert!(
        connected.is_err(),
        "a handshake completed: {connected:?}{}",
        bed.counters()
    );
    assert!(
        bed.counter(0, "frontend_option_added") >= 1,
        "node A sent the frontend along{}",
        bed.counters()
    );
    assert!(
        bed.counter(1, "frontend_option_untrusted") >= 1,
        "node B did not believe it{}",
        bed.counters()
    );
    assert_eq!(bed.counter(1, "frontend_option_learned"), 0);
    assert!(bed.established6(1).is_empty());
}

/// A TCP connection from `client` to the IPv6 frontend on `port`, given
/// `limit` to complete its handshake.
fn connect(client: &NetNs, port: u16, limit: Duration) -> std::io::Result<std::net::TcpStream> {
    std::thread::scope(|s| {
        s.spawn(|| {
            client
                .enter_on_this_thread()
                .map_err(std::io::Error::other)?;
            let to = SocketAddr::from((EXTERNAL_IP6.parse::<Ipv6Addr>().unwrap(), port));
            std::net::TcpStream::connect_timeout(&to, limit)
        })
        .join()
        .unwrap()
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_cross_node_plain_a_pod_on_node_b_answers_ipv6_from_its_frontend_without_the_option() {
    privilege::require();
    let bed = Bed::start(
        cluster(Wiring::default()),
        &[FIRST],
        &["--cross-node", "plain"],
    );
    for _ in 0..3 {
        bed.assert_pod_2_sees_the_client(8022);
    }
    // No option crossed; node B, without state, gave the backend's
    // replies its only frontend as they left.
    assert_eq!(bed.counter(0, "frontend_option_added"), 0);
    assert_eq!(bed.counter(1, "frontend_option_learned"), 0);
    assert!(bed.established6(1).is_empty());
    assert!(
        bed.counter(1, "reverse_fallback") > 10,
        "{}",
        bed.counters()
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_over_ipv6_across_nodes_is_bit_identical() {
    privilege::require();
    let bed = Bed::start(cluster(Wiring::default()), &[FIRST], &[]);
    // Any packet from a pod's address reaching the client: a reply left
    // unrestored.
    let leaked = crate::common::seen_on(
        &bed.cluster.client,
        "eth0",
        "ip6 and src net fd00:244::/32",
        || copy_both_ways(&bed, "64M", Duration::from_secs(180)),
    );
    assert!(
        leaked.trim().is_empty(),
        "the client saw a pod address: {leaked}"
    );
    assert!(bed.counter(1, "frontend_option_learned") >= 2);
    assert_eq!(bed.counter(1, "reverse_fallback"), 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_narrow_ipv6_link_between_the_nodes_needs_no_path_mtu_discovery() {
    privilege::require();
    let bed = Bed::start(
        cluster(Wiring {
            node_link_mtu: Some(1400),
            ..Wiring::default()
        }),
        &[FIRST],
        &[],
    );
    // Every packet its real size: no segmentation offload on the client's
    // or the pod's link.
    for ns in [&bed.cluster.client, &bed.cluster.pods[1].ns] {
        cmd::run(
            ns.command("ethtool")
                .args(["-K", "eth0", "tso", "off", "gso", "off", "gro", "off"]),
        )
        .unwrap();
    }
    // Node B lowered the MSS the pod announced to what the link from node
    // A carries (1400 less 40 for IPv6's header and 20 for TCP's).
    let syn_acks = crate::common::seen_on(
        &bed.cluster.client,
        "eth0",
        "ip6 and src port 8022 and ip6[53] & 0x12 == 0x12",
        || bed.assert_pod_2_sees_the_client(8022),
    );
    assert!(syn_acks.contains("mss 1340,"), "{syn_acks}");
    // So the client never sent node A a segment too large for it, and
    // none was refused with a Packet Too Big (ICMPv6 type 2).
    let too_big = crate::common::seen_on(
        &bed.cluster.client,
        "eth0",
        "icmp6 and ip6[40] == 2",
        || copy_both_ways(&bed, "8M", Duration::from_secs(60)),
    );
    assert!(
        too_big.trim().is_empty(),
        "the client was told the packet is too big: {too_big}"
    );
    assert!(bed.counter(1, "frontend_option_learned") >= 2);
}

/// `size` (as `head -c` takes it) of random bytes up through the IPv6
/// frontend on port 8022 and back down, each way compared by hash and
/// bounded by `limit`.
fn copy_both_ways(bed: &Bed, size: &str, limit: Duration) {
    let ssh = bed.cluster.ssh();
    let client = &bed.cluster.client;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    cmd::run(
        std::process::Command::new("head")
            .args(["-c", size, "/dev/urandom"])
            .stdout(std::fs::File::create(&data).unwrap()),
    )
    .unwrap();
    let sum = |path: &Path| {
        cmd::run(std::process::Command::new("sha256sum").arg(path)).unwrap()[..64].to_owned()
    };
    let expected = sum(&data);
    let up = cmd::run(
        ssh.command(client, EXTERNAL_IP6, 8022, "sha256sum", limit)
            .stdin(std::fs::File::open(&data).unwrap()),
    )
    .unwrap_or_else(|e| panic!("upload: {e:#}{}", bed.counters()));
    assert_eq!(&up[..64], expected, "upload arrived altered");
    let back = dir.path().join("back");
    let status = ssh
        .command(
            client,
            EXTERNAL_IP6,
            8022,
            &format!("cat {}", data.display()),
            limit,
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&back).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "download: {status}{}", bed.counters());
    assert_eq!(sum(&back), expected, "download arrived altered");
}
