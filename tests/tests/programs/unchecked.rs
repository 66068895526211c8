//! A SYN too long for the data path to check (its payload past
//! `verify::CHECKED_MAX`): it may write no state, and a SYN forwarded
//! without state would have its answer leave the node with the pod's own
//! address. It is dropped, in both families, through a frontend and with
//! the frontend carried from another node.

use ssh_fwd::datapath::conntrack::ConnTables;
use ssh_fwd_common::{
    conntrack::TCP_SYN, fixtures::Frame, fixtures6::Frame6, ipopt, maps::IFACE_CLUSTER,
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded,
    conntrack::{BACKEND, CLIENT, CLIENT_ISN, Ingress, each_ingress, request},
    counters, delta,
    ipv6::{self, frontend},
    load, set_iface_index_flags,
};

/// Past the 256 bytes a segment is checked up to.
const LONG: usize = 300;

/// Nothing in the connection tables of either family.
pub(super) fn no_state(l: &Loaded) -> bool {
    let tables = ConnTables::open_pinned(&l.layout).expect("tables");
    tables.entries().is_empty() && tables.entries6().is_empty()
}

/// `frame` is dropped as `syn_unverified`, writing nothing.
fn dropped(l: &Loaded, ingress: Ingress, frame: &[u8], what: &str) {
    let before = counters(l);
    let (verdict, _) = ingress.run(l, frame);
    assert_eq!(verdict, ingress.dropped(), "{ingress:?}, {what}");
    let d = delta(&before, &counters(l));
    assert!(
        d.contains(&("syn_unverified", 1)),
        "{ingress:?}, {what}: {d:?}"
    );
    assert!(no_state(l), "{ingress:?}, {what}: no state");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_too_long_to_check_is_dropped_through_a_frontend() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        dropped(
            &l,
            ingress,
            &request(8022, TCP_SYN, CLIENT_ISN, 0, LONG),
            "IPv4",
        );
        let l = ipv6::load6();
        let syn = ipv6::request(TCP_SYN, CLIENT_ISN, 0, LONG).build();
        dropped(&l, ingress, &syn, "IPv6");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_too_long_to_check_is_dropped_with_its_frontend_from_another_node() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, ("second", "198.18.0.10:9022", "10.244.1.5:22")]);
        set_iface_index_flags(&l, 1, IFACE_CLUSTER);
        let syn = Frame {
            src: CLIENT,
            sport: 40_000,
            dst: BACKEND,
            dport: 22,
            tcp_flags: TCP_SYN,
            seq: CLIENT_ISN,
            payload: vec![b'x'; LONG],
            ..Frame::default()
        }
        .build();
        let with = ipopt::add(&syn, super::conntrack::frontend(9022));
        dropped(&l, ingress, &with, "IPv4");
        let l = ipv6::load6();
        set_iface_index_flags(&l, 1, IFACE_CLUSTER);
        let syn = Frame6 {
            src: ipv6::CLIENT,
            dst: ipv6::BACKEND,
            sport: 40_000,
            dport: 22,
            tcp_flags: TCP_SYN,
            seq: CLIENT_ISN,
            payload: vec![b'x'; LONG],
            ..Frame6::default()
        }
        .build();
        dropped(&l, ingress, &ipopt::add6(&syn, frontend()), "IPv6");
    });
}
