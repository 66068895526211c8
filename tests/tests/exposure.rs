//! What a node exposes (docs/packet-path.md, "What an SSH IP exposes" and
//! "Frames for other hosts"), end to end in every attach mode: the node
//! holds the SSH IP on `lo` and runs its own service on an unmapped port,
//! which the client must not reach through the SSH IP (TCP or UDP), while
//! the mapped port reaches the pod and the node's own address still
//! reaches the service; a frame for another MAC, or a broadcast one, is not
//! translated.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND};
use ssh_fwd_tests::{NetNs, Topology, cmd, privilege};

const POD: &str = "10.244.1.5";
/// The node's own address on the client's link.
const NODE_IP: &str = "192.0.2.1";
/// Where the node's own service listens (the kubelet's port): no mapping.
const NODE_SERVICE: u16 = 10250;
const BANNER: &[u8] = b"node-service\n";

fn bed(attach: &str) -> Bed {
    Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, &format!("{POD}:22"))],
        &["--attach", attach],
    )
    .unwrap()
}

/// The data path's packet counters by outcome, from `ssh-fwd list`.
fn outcome(bed: &Bed, name: &str) -> u64 {
    bed.bpffs[0].list().unwrap()["counters"][name]
        .as_u64()
        .unwrap_or(0)
}

/// Runs `f` with the node's service up: TCP and UDP on every address of
/// the node's namespace, port [`NODE_SERVICE`], answering with
/// [`BANNER`].
fn with_node_service(node: &NetNs, f: impl FnOnce()) {
    let stop = AtomicBool::new(false);
    let (up, ready) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            node.enter_on_this_thread().unwrap();
            let tcp = TcpListener::bind(("0.0.0.0", NODE_SERVICE)).unwrap();
            let udp = UdpSocket::bind(("0.0.0.0", NODE_SERVICE)).unwrap();
            tcp.set_nonblocking(true).unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            up.send(()).unwrap();
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((mut stream, _)) = tcp.accept() {
                    let _ = stream.write_all(BANNER);
                }
                if let Ok((_, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(BANNER, from);
                }
            }
        });
        // Stops the service however `f` ends, or the scope would wait for
        // it forever after a failed assertion.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(stop);
        ready.recv_timeout(Duration::from_secs(5)).unwrap();
        f();
    });
}

/// What the node's service says over TCP at `addr`, from the client;
/// `None`: no connection within 2 s.
fn tcp_banner(client: &NetNs, addr: &str) -> Option<Vec<u8>> {
    let addr: SocketAddr = format!("{addr}:{NODE_SERVICE}").parse().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            client.enter_on_this_thread().unwrap();
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut got = vec![0u8; BANNER.len()];
            stream.read_exact(&mut got).ok()?;
            Some(got)
        })
        .join()
        .unwrap()
    })
}

/// The node's service's answer over UDP at `addr`, from the client;
/// `None`: none within 1 s.
fn udp_banner(client: &NetNs, addr: &str) -> Option<Vec<u8>> {
    let addr: SocketAddr = format!("{addr}:{NODE_SERVICE}").parse().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            client.enter_on_this_thread().unwrap();
            let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            socket.send_to(b"hello", addr).unwrap();
            let mut buf = [0u8; 64];
            let (n, _) = socket.recv_from(&mut buf).ok()?;
            Some(buf[..n].to_vec())
        })
        .join()
        .unwrap()
    })
}

/// The node's service answers on the node's address, never on the SSH IP;
/// the mapped port still reaches the pod, and ping the node.
fn the_ssh_ip_exposes_only_its_mapped_port(attach: &str) {
    privilege::require();
    let bed = bed(attach);
    let client = bed.client();
    with_node_service(&bed.topo.nodes[0].ns, || {
        assert_eq!(
            tcp_banner(client, NODE_IP).as_deref(),
            Some(BANNER),
            "control: the service answers on the node's own address"
        );
        assert_eq!(udp_banner(client, NODE_IP).as_deref(), Some(BANNER));
        assert_eq!(
            tcp_banner(client, EXTERNAL_IP),
            None,
            "{attach}: the node's TCP service answered on the SSH IP"
        );
        assert_eq!(
            udp_banner(client, EXTERNAL_IP),
            None,
            "{attach}: the node's UDP service answered on the SSH IP"
        );
    });
    assert!(outcome(&bed, "unmapped_port") >= 2, "{attach}: counted");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1", "{attach}");
    // Ping from an unprivileged ICMP socket, which needs no ping binary.
    client
        .sysctl("net.ipv4.ping_group_range", "0 2147483647")
        .unwrap();
    cmd::run(client.command("python3").args([
        "-c",
        &format!(
            "import socket\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n\
             s.settimeout(2)\n\
             s.sendto(b'\\x08\\x00\\x00\\x00\\x00\\x01\\x00\\x01ping', ('{EXTERNAL_IP}', 0))\n\
             assert s.recv(64)[0] == 0, 'no echo reply'\n"
        ),
    ]))
    .unwrap_or_else(|e| panic!("{attach}: ping of the SSH IP: {e:#}"));
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_an_unmapped_port_on_the_ssh_ip_gets_no_answer_from_the_nodes_service() {
    the_ssh_ip_exposes_only_its_mapped_port("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_an_unmapped_port_on_the_ssh_ip_gets_no_answer_from_the_nodes_service() {
    the_ssh_ip_exposes_only_its_mapped_port("xdp");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn generic_xdp_an_unmapped_port_on_the_ssh_ip_gets_no_answer_from_the_nodes_service() {
    the_ssh_ip_exposes_only_its_mapped_port("xdp-generic");
}

/// Whether a TCP connection to the frontend opens within 2 s.
fn connects(client: &NetNs) -> bool {
    let frontend: SocketAddr = FRONTEND.parse().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            client.enter_on_this_thread().unwrap();
            TcpStream::connect_timeout(&frontend, Duration::from_secs(2)).is_ok()
        })
        .join()
        .unwrap()
    })
}

/// Makes the client send its frames for the SSH IP to `mac` (its route's
/// next hop, the node, resolved to it).
fn next_hop_mac(client: &NetNs, mac: &str) {
    client
        .ip(&[
            "neigh",
            "replace",
            NODE_IP,
            "lladdr",
            mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])
        .unwrap();
}

/// Frames to another host's MAC (as a switch floods after a failover) and
/// to the broadcast MAC reach the node and are not translated: no DNAT,
/// nothing reaches the pod; with the node's own MAC again, they are.
fn a_frame_for_another_mac_is_not_translated(attach: &str) {
    privilege::require();
    let bed = bed(attach);
    let client = bed.client();
    let untranslated = |what: &str| {
        assert_eq!(outcome(&bed, "dnat"), 0, "{attach}: {what} translated");
        assert_eq!(
            outcome(&bed, "half_opened"),
            0,
            "{attach}: {what} wrote state"
        );
    };
    next_hop_mac(client, "02:00:00:00:00:99");
    assert!(
        !connects(client),
        "{attach}: a SYN for another MAC reached the pod"
    );
    untranslated("a frame for another MAC");
    assert!(outcome(&bed, "not_for_node") > 0, "{attach}: counted");
    next_hop_mac(client, "ff:ff:ff:ff:ff:ff");
    assert!(
        !connects(client),
        "{attach}: a broadcast SYN reached the pod"
    );
    untranslated("a broadcast frame");
    assert!(
        outcome(&bed, "unmapped_port") > 0,
        "{attach}: a broadcast frame to the SSH IP is dropped"
    );
    client
        .ip(&["neigh", "del", NODE_IP, "dev", "eth0"])
        .unwrap();
    assert!(connects(client), "{attach}: control, the node's own MAC");
    assert!(outcome(&bed, "dnat") > 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_a_frame_for_another_mac_is_not_translated() {
    a_frame_for_another_mac_is_not_translated("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_a_frame_for_another_mac_is_not_translated() {
    a_frame_for_another_mac_is_not_translated("xdp");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn generic_xdp_a_frame_for_another_mac_is_not_translated() {
    a_frame_for_another_mac_is_not_translated("xdp-generic");
}
