//! The data path end to end with real OpenSSH: login, bulk data both ways in
//! every attach mode, and what the client sees.

use std::{process::Stdio, time::Duration};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND, mapping_counters};
use ssh_fwd_tests::{Topology, cmd, privilege};

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ssh_login_through_frontend_lands_in_the_pod() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job-4711", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let (inbound, outbound) = mapping_counters(&bed.bpffs[0], FRONTEND).unwrap();
    assert!(
        inbound > 5 && outbound > 5,
        "counters move both ways: {inbound} in, {outbound} out"
    );
    let list = bed.bpffs[0].list().unwrap();
    assert_eq!(list["mappings"][0]["name"], "job-4711");
    // The same packets, read a moment apart: the session's last ACK may
    // arrive in between.
    let (inbound_after, _) = mapping_counters(&bed.bpffs[0], FRONTEND).unwrap();
    let dnat = list["counters"]["dnat"].as_u64().unwrap_or(0);
    assert!(
        (inbound..=inbound_after).contains(&dnat),
        "dnat {dnat} counts the mapping's requests ({inbound}, then {inbound_after})"
    );
}

/// 64 MiB up and 64 MiB down, with software checksums on every veth so the
/// receiving TCP stacks verify each packet's checksum.
fn bulk_copy_is_bit_identical(mode: &str, software_checksums: bool) {
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("bulk", FRONTEND, "10.244.1.5:22")],
        &["--attach", mode],
    )
    .unwrap();
    if software_checksums {
        bed.topo.software_checksums().unwrap();
    }
    crate::common::copy_64mib_both_ways(&bed, EXTERNAL_IP, mode);
    let bytes_out = bed.bpffs[0].list().unwrap()["mappings"][0]["bytes_out"]
        .as_u64()
        .unwrap();
    assert!(
        bytes_out > 64 << 20,
        "egress counted the download: {bytes_out} bytes"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_is_bit_identical_with_tc_ingress() {
    privilege::require();
    bulk_copy_is_bit_identical("tc", true);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_is_bit_identical_with_native_xdp() {
    privilege::require();
    bulk_copy_is_bit_identical("xdp", true);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_is_bit_identical_with_generic_xdp() {
    privilege::require();
    bulk_copy_is_bit_identical("xdp-generic", true);
}

/// With offloads on (the veth default), pod replies reach tc egress with the
/// checksum still to be completed (CHECKSUM_PARTIAL); the rewrite must keep
/// that state consistent.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_is_bit_identical_with_checksum_offload_on() {
    privilege::require();
    bulk_copy_is_bit_identical("tc", false);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn client_sees_only_the_frontend_address() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("client.pcap");
    let mut capture = bed
        .client()
        .command("tcpdump")
        // --immediate-mode: with TPACKET_V3 a capture stopped early loses the
        // packets of its last, unfinished block. -Z root: Debian's tcpdump
        // otherwise drops to its own user and may
        // not be able to write into the test's private directory.
        .args([
            "--immediate-mode",
            "-i",
            "eth0",
            "-n",
            "-U",
            "-Z",
            "root",
            "-w",
        ])
        .arg(&pcap)
        .arg("tcp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Capture has begun once tcpdump says "listening on".
    let stderr = capture.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
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

    // While a session is open, the socket's peer is the frontend.
    let mut session = crate::common::Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    let sockets = cmd::run(
        bed.client()
            .command("ss")
            .args(["-Htn", "state", "established"]),
    )
    .unwrap();
    assert!(sockets.contains(FRONTEND), "client socket peer: {sockets}");
    assert!(
        !sockets.contains("10.244."),
        "client socket shows the pod: {sockets}"
    );
    session.echo("seen").unwrap();
    drop(session);
    // SAFETY: stopping our own child.
    unsafe { libc::kill(capture.id() as i32, libc::SIGINT) };
    capture.wait().unwrap();

    let text = cmd::run(
        std::process::Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(&pcap),
    )
    .unwrap();
    let packets: Vec<&str> = text.lines().filter(|l| l.contains(" IP ")).collect();
    assert!(packets.len() > 10, "captured too little: {text}");
    for p in &packets {
        assert!(
            p.contains("198.18.0.10.8022"),
            "a packet not to/from the frontend: {p}"
        );
        assert!(
            !p.contains("10.244."),
            "the pod address leaked to the client: {p}"
        );
    }
}
