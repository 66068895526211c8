//! Rewritten packets carry right checksums whatever checksum state the
//! kernel hands the programs (`skb->ip_summed`).
//!
//! BPF_PROG_TEST_RUN cannot set that state: the `__sk_buff` it takes may
//! carry only mark, priority, ifindex, cb, tstamp, wire_len, gso_segs,
//! gso_size and hwtstamp (`convert___skb_to_skb` in net/bpf/test_run.c
//! refuses anything else), and the skb it builds is CHECKSUM_NONE. So each
//! state is produced for real, with real TCP stacks at both ends:
//!
//! - CHECKSUM_PARTIAL: the default on a veth. The sender's TCP leaves its
//!   checksum to be completed (the field holds the pseudo-header sum) and
//!   the skb keeps that state across the veth: requests reach the ingress
//!   hooks so, replies the reply program.
//! - CHECKSUM_COMPLETE: a VXLAN device with UDP checksums, whose outer
//!   checksum the node verifies in software (the sender's link has no
//!   transmit offload); decapsulated, the inner packet reaches the hooks on
//!   the VXLAN device with `skb->csum` covering it. GRO is off there, as it
//!   would coalesce data segments into CHECKSUM_PARTIAL ones.
//! - CHECKSUM_NONE is what `datapath.rs`'s bulk copies with software
//!   checksums produce.
//!
//! The receivers verify: the node's links towards them have transmit
//! offload off, so a CHECKSUM_PARTIAL packet is completed from the
//! program's pseudo-header sum as it leaves (as a NIC completes it on the
//! wire), a peer redirect (which would hand the pod the packet still
//! partial, unverified) is ruled out by a qdisc on the pod's link, and the
//! receiving TCP checks every checksum. `tcpdump -vv` checks each one too.

use std::{
    io::BufRead as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND};
use ssh_fwd_tests::{NetNs, Topology, cmd, privilege, topology::EXT_IFACE};

/// `tcpdump -vv` of the packets `iface` receives, until stopped.
struct Capture {
    child: Child,
    out: PathBuf,
}

impl Capture {
    fn start(ns: &NetNs, iface: &str, filter: &str, out: PathBuf) -> Self {
        let mut child = ns
            .command("tcpdump")
            .args(["-i", iface, "-Q", "in", "-n", "-vv", "-l", filter])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Capture has begun once tcpdump says "listening on".
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("tcpdump did not start listening");
        Self { child, out }
    }

    /// Stops the capture and returns what it printed.
    fn stop(mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        std::fs::read_to_string(&self.out).unwrap()
    }
}

/// How many TCP checksums tcpdump found correct; fails on any wrong one
/// (TCP or IPv4 header).
fn assert_checksums_correct(capture: &str, what: &str) -> usize {
    let wrong: Vec<&str> = capture
        .lines()
        .filter(|l| l.contains("incorrect") || l.contains("bad cksum"))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: wrong checksums, e.g.:\n{}",
        wrong.join("\n")
    );
    capture.matches("(correct)").count()
}

/// `TcpInCsumErrors` of the namespace: segments its TCP dropped for a bad
/// checksum.
fn tcp_checksum_errors(ns: &NetNs) -> u64 {
    let snmp = cmd::run(ns.command("cat").arg("/proc/net/snmp")).unwrap();
    let tcp: Vec<Vec<&str>> = snmp
        .lines()
        .filter(|l| l.starts_with("Tcp:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let column = tcp[0].iter().position(|&h| h == "InCsumErrors").unwrap();
    tcp[1][column].parse().unwrap()
}

fn ethtool(ns: &NetNs, iface: &str, args: &[&str]) {
    cmd::run(ns.command("ethtool").args(["-K", iface]).args(args)).unwrap();
}

/// The node's links towards the pod and the client complete checksums in
/// software; the pod's link has a qdisc, so requests reach it through the
/// node's transmit path, never by a peer redirect.
fn receivers_verify(topo: &Topology) {
    let node = &topo.nodes[0].ns;
    let pod_link = &topo.pods[0].node_iface;
    ethtool(node, pod_link, &["tx", "off"]);
    ethtool(node, EXT_IFACE, &["tx", "off"]);
    cmd::run(
        node.command("tc")
            .args(["qdisc", "add", "dev", pod_link, "root", "pfifo"]),
    )
    .unwrap();
}

/// The client reaches the external IP through a VXLAN tunnel to the node
/// (UDP checksums on, over the client's link): `vx0` on both sides.
fn vxlan_to_the_node(topo: &Topology) {
    let client = &topo.client;
    let node = &topo.nodes[0].ns;
    for (ns, local, remote, addr) in [
        (client, "192.0.2.2", "192.0.2.1", "203.0.113.2/24"),
        (node, "192.0.2.1", "192.0.2.2", "203.0.113.1/24"),
    ] {
        ns.ip(&[
            "link", "add", "vx0", "type", "vxlan", "id", "42", "local", local, "remote", remote,
            "dstport", "4789", "udpcsum",
        ])
        .unwrap();
        ns.ip(&["addr", "add", addr, "dev", "vx0"]).unwrap();
        ns.ip(&["link", "set", "vx0", "up"]).unwrap();
    }
    client
        .ip(&[
            "route",
            "add",
            &format!("{EXTERNAL_IP}/32"),
            "via",
            "203.0.113.1",
        ])
        .unwrap();
}

/// 4 MiB up and 4 MiB down through the frontend, bit-identical.
fn copy_both_ways(bed: &Bed, dir: &Path) {
    let data = dir.join("random.bin");
    cmd::run(
        Command::new("head")
            .args(["-c", "4M", "/dev/urandom"])
            .stdout(std::fs::File::create(&data).unwrap()),
    )
    .unwrap();
    let sha = |path: &Path| cmd::run(Command::new("sha256sum").arg(path)).unwrap()[..64].to_owned();
    let expected = sha(&data);
    let ssh = bed.ssh();
    let limit = Duration::from_secs(60);
    let up = cmd::run(
        ssh.command(bed.client(), EXTERNAL_IP, 8022, "sha256sum", limit)
            .stdin(std::fs::File::open(&data).unwrap()),
    )
    .unwrap();
    assert_eq!(&up[..64], expected, "the upload arrived altered");
    let back = dir.join("back.bin");
    cmd::run(
        ssh.command(
            bed.client(),
            EXTERNAL_IP,
            8022,
            &format!("cat {}", data.display()),
            limit,
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&back).unwrap()),
    )
    .unwrap();
    assert_eq!(sha(&back), expected, "the download arrived altered");
}

/// Copies both ways through `bed` while capturing what the pod and the
/// client receive; every checksum must be right, and each receiver must
/// have dropped nothing for a bad one.
fn checksums_arrive_right(bed: &Bed, client_iface: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pod = &bed.topo.pods[0].ns;
    let client = bed.client();
    let (pod_errors, client_errors) = (tcp_checksum_errors(pod), tcp_checksum_errors(client));
    let at_pod = Capture::start(pod, "eth0", "tcp port 22", dir.path().join("pod.txt"));
    let at_client = Capture::start(
        client,
        client_iface,
        "tcp port 8022",
        dir.path().join("client.txt"),
    );
    copy_both_ways(bed, dir.path());
    let (at_pod, at_client) = (at_pod.stop(), at_client.stop());
    let requests = assert_checksums_correct(&at_pod, "requests at the pod");
    let replies = assert_checksums_correct(&at_client, "replies at the client");
    assert!(
        requests > 1000 && replies > 1000,
        "too few packets checked: {requests} requests, {replies} replies"
    );
    assert_eq!(
        tcp_checksum_errors(pod),
        pod_errors,
        "the pod dropped segments"
    );
    assert_eq!(
        tcp_checksum_errors(client),
        client_errors,
        "the client dropped segments"
    );
}

/// Requests leave the client, and replies the pod, with their checksums to
/// be completed (veth's default): CHECKSUM_PARTIAL at the ingress hook of
/// `mode` and at the reply program.
fn partial_checksums_are_rewritten_right(mode: &str) {
    let topo = Topology::single_node(1).unwrap();
    receivers_verify(&topo);
    let bed = Bed::start(
        topo,
        &[("partial", FRONTEND, "10.244.1.5:22")],
        &["--attach", mode],
    )
    .unwrap();
    checksums_arrive_right(&bed, "eth0");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn partial_checksums_are_rewritten_right_by_tc_ingress_and_the_reply_program() {
    privilege::require();
    partial_checksums_are_rewritten_right("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn partial_checksums_are_rewritten_right_by_native_xdp() {
    privilege::require();
    partial_checksums_are_rewritten_right("xdp");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn partial_checksums_are_rewritten_right_by_generic_xdp() {
    privilege::require();
    partial_checksums_are_rewritten_right("xdp-generic");
}

/// Requests come out of a VXLAN tunnel whose outer checksum the node
/// verified in software: CHECKSUM_COMPLETE at the hook on `vx0`.
fn complete_checksums_are_rewritten_right(mode: &str) {
    let topo = Topology::single_node(1).unwrap();
    vxlan_to_the_node(&topo);
    ethtool(&topo.client, "eth0", &["tx", "off"]);
    // Coalesced segments would be CHECKSUM_PARTIAL at the node, and at the
    // client tcpdump could not check them.
    ethtool(&topo.nodes[0].ns, "vx0", &["gro", "off"]);
    ethtool(&topo.client, "vx0", &["gro", "off"]);
    receivers_verify(&topo);
    ethtool(&topo.nodes[0].ns, "vx0", &["tx", "off"]);
    let bed = Bed::start(
        topo,
        &[("complete", FRONTEND, "10.244.1.5:22")],
        &["--attach", mode, "--external-iface", "vx0"],
    )
    .unwrap();
    checksums_arrive_right(&bed, "vx0");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn complete_checksums_are_rewritten_right_by_tc_ingress() {
    privilege::require();
    complete_checksums_are_rewritten_right("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn complete_checksums_are_rewritten_right_by_generic_xdp() {
    privilege::require();
    complete_checksums_are_rewritten_right("xdp-generic");
}
