//! BIG TCP (IPv4 GSO and GRO packets over 64 KiB, whose total length field
//! is 0) through the frontend, end to end: every link on the way takes
//! such packets, the data arrives intact both ways, and the programs
//! translated packets of their real length.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use common::{Bed, EXTERNAL_IP, FRONTEND};
use netlink_packet_route::link::LinkAttribute;
use ssh_fwd_tests::{NetNs, Topology, cmd, privilege, topology::EXT_IFACE};

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

#[derive(PartialEq)]
enum Direction {
    Up,
    Down,
}

/// 16 MiB up or down through the frontend, arriving bit-identical.
fn copy(bed: &Bed, dir: &Path, way: Direction) {
    let data = dir.join("random.bin");
    cmd::run(
        Command::new("head")
            .args(["-c", "16M", "/dev/urandom"])
            .stdout(std::fs::File::create(&data).unwrap()),
    )
    .unwrap();
    let sha = |path: &Path| cmd::run(Command::new("sha256sum").arg(path)).unwrap()[..64].to_owned();
    let expected = sha(&data);
    let ssh = bed.ssh();
    let limit = Duration::from_secs(90);
    if way == Direction::Up {
        let up = cmd::run(
            ssh.command(bed.client(), EXTERNAL_IP, 8022, "sha256sum", limit)
                .stdin(std::fs::File::open(&data).unwrap()),
        )
        .unwrap();
        assert_eq!(&up[..64], expected, "the upload arrived altered");
        return;
    }
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

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn big_tcp_packets_are_translated_by_their_real_length_both_ways() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    big_tcp(&topo.client, "eth0");
    big_tcp(&topo.nodes[0].ns, EXT_IFACE);
    big_tcp(&topo.nodes[0].ns, &topo.pods[0].node_iface);
    big_tcp(&topo.pods[0].ns, "eth0");
    let bed = Bed::start(topo, &[("big", FRONTEND, "10.244.1.5:22")], &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let counters = || bed.bpffs[0].list().unwrap()["counters"].clone();
    let big = |c: &serde_json::Value| c["big_tcp"].as_u64().unwrap_or(0);
    copy(&bed, dir.path(), Direction::Up);
    let up = counters();
    copy(&bed, dir.path(), Direction::Down);
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
