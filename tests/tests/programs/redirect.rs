//! The route-and-redirect step on crafted packets: requests redirected to
//! the pod's interface (into the pod's namespace where the agent vouched for
//! a peer), and replies reverse-NATed on the pod's interface and redirected
//! out of an external one - or left alone when their route leaves elsewhere.

use std::net::Ipv4Addr;

use ssh_fwd_common::{
    fixtures::{Frame, checksums_verify},
    maps,
    packet::{self, Side},
};
use ssh_fwd_tests::{NetNs, privilege};

use super::{
    JOB, Loaded, TC_ACT_REDIRECT, TC_ACT_UNSPEC, backend,
    conntrack::{Ingress, handshake},
    counters, delta, load, reply, reverse_natted, set_iface_index_flags, test_run_tc,
};
use ssh_fwd::datapath::object::{PROG_INGRESS_TC, PROG_REPLY_TC};

/// The node's end of the pod's link, and the pod, in [`add_pod_route`].
const POD1_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
const POD_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x05];

fn mac(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// What a node has for its pods: a connected route out of the pod's
/// interface, forwarding on, and (if `neighbour`) the pod's MAC address.
fn add_pod_route(ns: &NetNs, neighbour: bool) {
    let pod1_mac = mac(POD1_MAC);
    // A veth with both ends here (this kernel may lack the dummy driver).
    ns.ip(&[
        "link", "add", "pod1", "address", &pod1_mac, "type", "veth", "peer", "name", "pod1p",
    ])
    .expect("veth");
    for link in ["pod1", "pod1p"] {
        ns.ip(&["link", "set", link, "up"]).expect("link up");
    }
    ns.ip(&["addr", "add", "10.244.1.1/24", "dev", "pod1"])
        .expect("address");
    if neighbour {
        let pod_mac = mac(POD_MAC);
        ns.ip(&[
            "neigh",
            "add",
            "10.244.1.5",
            "lladdr",
            &pod_mac,
            "dev",
            "pod1",
            "nud",
            "permanent",
        ])
        .expect("neighbour");
    }
    ns.sysctl("net.ipv4.ip_forward", "1").expect("forwarding");
}

/// The reference: DNAT, then a router's TTL decrement and next-hop MACs.
fn rewritten_and_forwarded(frame: &[u8], src_mac: [u8; 6], dst_mac: [u8; 6]) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let tcp = packet::classify(&expected).expect("classify");
    packet::rewrite(&mut expected, tcp, Side::Destination, backend());
    assert!(packet::forward(&mut expected, src_mac, dst_mac));
    expected
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_ingress_redirects_hits_out_of_the_route_interface_with_ttl_and_macs_set() {
    privilege::require();
    let l = load(&[JOB]);
    add_pod_route(&l.netns, true);
    let frame = Frame {
        payload: b"SSH-2.0-OpenSSH_9.2\r\n".to_vec(),
        ..Frame::default()
    }
    .build();
    let before = counters(&l);
    let (verdict, out) = test_run_tc(&l, PROG_INGRESS_TC, &frame);
    assert_eq!(verdict, TC_ACT_REDIRECT);
    assert_eq!(out, rewritten_and_forwarded(&frame, POD1_MAC, POD_MAC));
    assert!(checksums_verify(&out));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("dnat", 1), ("redirected", 1)]
    );
    // A TTL that expires here is the stack's (ICMP time exceeded, about
    // the frontend): untranslated, not redirected.
    let dying = Frame {
        ttl: 1,
        ..Frame::default()
    }
    .build();
    let before = counters(&l);
    let (verdict, out) = test_run_tc(&l, PROG_INGRESS_TC, &dying);
    assert_eq!(verdict, TC_ACT_UNSPEC);
    assert_eq!(out, dying, "untouched");
    assert_eq!(delta(&before, &counters(&l)), vec![("ttl_expired", 1)]);
    // Not a frontend: no lookup, no redirect.
    let other = Frame {
        dport: 8023,
        ..Frame::default()
    }
    .build();
    assert_eq!(
        test_run_tc(&l, PROG_INGRESS_TC, &other),
        (TC_ACT_UNSPEC, other)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_ingress_without_a_neighbour_entry_redirects_through_neighbour_resolution() {
    privilege::require();
    let l = load(&[JOB]);
    add_pod_route(&l.netns, false);
    let frame = Frame::default().build();
    let (verdict, out) = test_run_tc(&l, PROG_INGRESS_TC, &frame);
    assert_eq!(verdict, TC_ACT_REDIRECT);
    // The kernel writes the Ethernet header once it knows the neighbour.
    let (dst, src) = (
        frame[..6].try_into().unwrap(),
        frame[6..12].try_into().unwrap(),
    );
    assert_eq!(out, rewritten_and_forwarded(&frame, src, dst));
}

/// Writes `IFACES[index of name] = flags`, as the agent's interface scan
/// would.
fn set_iface_flags(l: &Loaded, name: &str, flags: u32) {
    let index = ssh_fwd::datapath::netdev::index(name).expect("interface in the test's namespace");
    set_iface_index_flags(l, index, flags);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_ingress_delivers_into_the_pod_namespace_when_the_route_leads_to_a_pod_end() {
    privilege::require();
    let l = load(&[JOB]);
    add_pod_route(&l.netns, true);
    set_iface_flags(&l, "pod1", maps::IFACE_POD_PEER);
    let frame = Frame::default().build();
    let before = counters(&l);
    let (verdict, out) = test_run_tc(&l, PROG_INGRESS_TC, &frame);
    assert_eq!(verdict, TC_ACT_REDIRECT);
    // The pod's stack takes the frame as it is: the pod's MAC must be on it.
    assert_eq!(out, rewritten_and_forwarded(&frame, POD1_MAC, POD_MAC));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("dnat", 1), ("redirected", 1), ("redirected_peer", 1)]
    );
    // An external interface is not a pod end: an ordinary redirect.
    set_iface_flags(&l, "pod1", maps::IFACE_EXTERNAL);
    let before = counters(&l);
    assert_eq!(test_run_tc(&l, PROG_INGRESS_TC, &frame).0, TC_ACT_REDIRECT);
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("dnat", 1), ("redirected", 1)]
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_ingress_uses_neighbour_resolution_not_a_peer_redirect_while_the_pod_mac_is_unknown() {
    privilege::require();
    let l = load(&[JOB]);
    add_pod_route(&l.netns, false);
    set_iface_flags(&l, "pod1", maps::IFACE_POD_PEER);
    let before = counters(&l);
    assert_eq!(
        test_run_tc(&l, PROG_INGRESS_TC, &Frame::default().build()).0,
        TC_ACT_REDIRECT
    );
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("dnat", 1), ("redirected", 1)]
    );
}

/// The node's external interface and the client's router, in
/// [`add_client_route`].
const EXT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xe0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xc0, 0x02];

/// A route to the client out of `ext0`, with the client's MAC known.
fn add_client_route(ns: &NetNs) {
    ns.ip(&[
        "link",
        "add",
        "ext0",
        "address",
        &mac(EXT_MAC),
        "type",
        "veth",
        "peer",
        "name",
        "ext0p",
    ])
    .expect("veth");
    for link in ["ext0", "ext0p"] {
        ns.ip(&["link", "set", link, "up"]).expect("link up");
    }
    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "ext0"])
        .expect("address");
    ns.ip(&[
        "neigh",
        "add",
        "192.0.2.2",
        "lladdr",
        &mac(CLIENT_MAC),
        "dev",
        "ext0",
        "nud",
        "permanent",
    ])
    .expect("neighbour");
    ns.sysctl("net.ipv4.ip_forward", "1").expect("forwarding");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn reply_program_restores_the_frontend_and_redirects_out_of_the_external_interface() {
    privilege::require();
    let l = load(&[JOB]);
    add_client_route(&l.netns);
    set_iface_flags(&l, "ext0", maps::IFACE_EXTERNAL);
    handshake(&l, Ingress::Tc, 8022);
    let c0 = l.maps.mapping_counters(0).expect("slot 0");
    let frame = reply();
    let before = counters(&l);
    let (verdict, out) = test_run_tc(&l, PROG_REPLY_TC, &frame);
    assert_eq!(verdict, TC_ACT_REDIRECT);
    let mut expected = reverse_natted(&frame);
    assert!(packet::forward(&mut expected, EXT_MAC, CLIENT_MAC));
    assert_eq!(out, expected);
    assert!(checksums_verify(&out));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("reply_redirected", 1), ("reverse_nat", 1)]
    );
    let c = l.maps.mapping_counters(0).expect("slot 0");
    assert_eq!(
        (c.packets_out - c0.packets_out, c.bytes_out - c0.bytes_out),
        (1, frame.len() as u64)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn reply_program_rewrites_only_tracked_connections_whatever_the_route() {
    privilege::require();
    let l = load(&[JOB]);
    super::own(&l, Ipv4Addr::new(10, 244, 1, 5));
    // The route to the client leaves through ext0, which is not flagged
    // external: the state decides, not the route.
    add_client_route(&l.netns);
    let frame = reply();
    let before = counters(&l);
    assert_eq!(
        test_run_tc(&l, PROG_REPLY_TC, &frame),
        (TC_ACT_UNSPEC, frame.clone())
    );
    assert_eq!(delta(&before, &counters(&l)), vec![("reply_untracked", 1)]);
    handshake(&l, Ingress::Tc, 8022);
    assert_eq!(test_run_tc(&l, PROG_REPLY_TC, &frame).0, TC_ACT_REDIRECT);
    // TTL about to expire: the stack's, untouched (egress tracks it then).
    let dying = Frame {
        src: Ipv4Addr::new(10, 244, 1, 5),
        sport: 22,
        dst: Ipv4Addr::new(192, 0, 2, 2),
        ttl: 1,
        ..Frame::default()
    }
    .build();
    let before = counters(&l);
    assert_eq!(
        test_run_tc(&l, PROG_REPLY_TC, &dying),
        (TC_ACT_UNSPEC, dying)
    );
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("reply_left_to_stack", 1)]
    );
    // No route to the client at all: the stack's, untouched.
    let unroutable = Frame {
        src: Ipv4Addr::new(10, 244, 1, 5),
        sport: 22,
        dst: Ipv4Addr::new(203, 0, 113, 9),
        ..Frame::default()
    }
    .build();
    assert_eq!(
        test_run_tc(&l, PROG_REPLY_TC, &unroutable),
        (TC_ACT_UNSPEC, unroutable)
    );
    // Not from a backend (any other pod traffic): one lookup, untouched.
    let other = Frame {
        src: Ipv4Addr::new(10, 244, 1, 5),
        sport: 40_022,
        dst: Ipv4Addr::new(192, 0, 2, 2),
        ..Frame::default()
    }
    .build();
    let before = counters(&l);
    assert_eq!(
        test_run_tc(&l, PROG_REPLY_TC, &other),
        (TC_ACT_UNSPEC, other)
    );
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("not_from_a_backend", 1)]
    );
}
