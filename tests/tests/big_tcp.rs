//! BIG TCP (IPv4 GSO and GRO packets over 64 KiB, whose total length field
//! is 0) through the frontend, end to end: every link on the way takes
//! such packets, the data arrives intact both ways, and the programs
//! translated packets of their real length.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, TcpListener, TcpStream},
    time::Duration,
};

use crate::common::Bed;
use netlink_packet_route::link::LinkAttribute;
use ssh_fwd_tests::{NetNs, Topology, privilege, topology::EXT_IFACE};

/// Larger than an IPv4 total length can say.
const BIG: u32 = 180_000;

/// Lets `iface` take and build IPv4 packets of [`BIG`] bytes. Through
/// rtnetlink: Debian 12's `ip` does not know these attributes.
fn big_tcp(ns: &NetNs, iface: &str) {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread().unwrap();
            let name = std::ffi::CString::new(iface).unwrap();
            // SAFETY: a NUL-terminated name.
            let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
            assert_ne!(index, 0, "{iface} in {}", ns.name());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (connection, handle, _) = rtnetlink::new_connection().unwrap();
                tokio::spawn(connection);
                let mut message = rtnetlink::LinkUnspec::new_with_index(index).build();
                message.attributes.extend([
                    LinkAttribute::GsoIpv4MaxSize(BIG),
                    LinkAttribute::GroIpv4MaxSize(BIG),
                ]);
                handle.link().set(message).execute().await.unwrap();
            });
        })
        .join()
        .unwrap();
    });
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Up,
    Down,
}

/// The pod's port the transfers go to, behind [`RAW_FRONTEND`].
const RAW_PORT: u16 = 5001;
const RAW_FRONTEND: &str = "198.18.0.10:8023";
const LEN: usize = 16 << 20;

/// 16 MiB up or down through the frontend of a plain TCP server in the
/// pod, arriving bit-identical. Each sender writes it all at once, so its
/// socket always holds more than a packet's worth: the packets' size is
/// TCP's to choose, not a slow sender's (an ssh session starved of CPU
/// writes less than 64 KiB at a time).
fn copy(bed: &Bed, way: Direction) {
    let data: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let limit = Some(Duration::from_secs(60));
    let exchange = |stream: &mut TcpStream, send: bool| {
        stream.set_read_timeout(limit).unwrap();
        stream.set_write_timeout(limit).unwrap();
        if send {
            stream.write_all(&data).unwrap();
            stream.shutdown(Shutdown::Write).unwrap();
            return Vec::new();
        }
        let mut got = Vec::with_capacity(LEN);
        stream.read_to_end(&mut got).unwrap();
        got
    };
    let exchange = &exchange;
    let pod = &bed.topo.pods[0];
    let (listening, ready) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            pod.ns.enter_on_this_thread().unwrap();
            let listener = TcpListener::bind((pod.ip.as_str(), RAW_PORT)).unwrap();
            listening.send(()).unwrap();
            let (mut stream, _) = listener.accept().unwrap();
            exchange(&mut stream, way == Direction::Down)
        });
        let client = s.spawn(move || {
            bed.client().enter_on_this_thread().unwrap();
            ready.recv_timeout(Duration::from_secs(10)).unwrap();
            let mut stream =
                TcpStream::connect_timeout(&RAW_FRONTEND.parse().unwrap(), Duration::from_secs(10))
                    .unwrap();
            exchange(&mut stream, way == Direction::Up)
        });
        let (at_server, at_client) = (server.join().unwrap(), client.join().unwrap());
        let arrived = if way == Direction::Up {
            at_server
        } else {
            at_client
        };
        assert!(arrived == data, "{} bytes arrived altered", arrived.len());
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn big_tcp_packets_are_translated_by_their_real_length_both_ways() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    big_tcp(&topo.client, "eth0");
    big_tcp(&topo.nodes[0].ns, EXT_IFACE);
    big_tcp(&topo.nodes[0].ns, &topo.pods[0].node_iface);
    big_tcp(&topo.pods[0].ns, "eth0");
    let backend = format!("{}:{RAW_PORT}", topo.pods[0].ip);
    let bed = Bed::start(topo, &[("big", RAW_FRONTEND, &backend)], &[]).unwrap();
    let counters = || bed.bpffs[0].list().unwrap()["counters"].clone();
    let big = |c: &serde_json::Value| c["big_tcp"].as_u64().unwrap_or(0);
    copy(&bed, Direction::Up);
    let up = counters();
    copy(&bed, Direction::Down);
    let down = counters();
    println!(
        "packets over 64 KiB translated: {} up, {} down",
        big(&up),
        big(&down) - big(&up)
    );
    assert!(big(&up) > 0, "no request over 64 KiB: {up}");
    assert!(big(&down) > big(&up), "no reply over 64 KiB: {down}");
    assert_eq!(down["malformed"].as_u64().unwrap_or(0), 0);
}
