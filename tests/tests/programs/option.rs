//! The frontend option through the real programs: added to a translated
//! SYN as it leaves for another node, learned and removed on the node of
//! the pod, byte for byte against `ssh_fwd_common::ipopt`.

use ssh_fwd::datapath::object::{PROG_EGRESS_TC, PROG_INGRESS_TC};
use ssh_fwd_common::{
    conntrack::{
        TCP_ACK, TCP_SYN,
        mss::{self, TCPOLEN_MSS, TCPOPT_MSS},
    },
    fixtures::{Frame, checksums_verify},
    ipopt,
    maps::{Endpoint, IFACE_CLUSTER, IFACE_EXTERNAL, IFACE_POD_PEER},
    packet::{self, Side},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded,
    conntrack::{BACKEND, CLIENT, CLIENT_ISN, Ingress, SERVER_ISN, entries, frontend, request},
    counters, delta, from_pod, load, load_with, own, set_iface_index_flags, test_run_tc_on,
    test_run_xdp_on,
};
use ssh_fwd::datapath::conntrack::Entry;

/// Interface indexes the tests mark: an external interface, and a pod's.
const OUTSIDE: u32 = 7;
const POD: u32 = 9;
/// `lo`, where test runs without a context arrive.
const LO: u32 = 1;

/// Egress of `frame` as it leaves the node, having come in on `ingress`.
fn egress_from(l: &Loaded, ingress: u32, frame: &[u8]) -> Vec<u8> {
    test_run_tc_on(l, PROG_EGRESS_TC, frame, ingress, 0).1
}

fn mark_interfaces(l: &Loaded) {
    set_iface_index_flags(l, OUTSIDE, IFACE_EXTERNAL);
    set_iface_index_flags(l, POD, IFACE_POD_PEER);
}

const SHARED: (&str, &str, &str) = ("second", "198.18.0.10:9022", "10.244.1.5:22");

/// The SYN as the pod's node receives it: translated, from the client.
fn translated_syn() -> Vec<u8> {
    syn_to_pod(CLIENT_ISN)
}

/// A SYN from the client's address and port to the pod, with ISN `seq`.
pub(super) fn syn_to_pod(seq: u32) -> Vec<u8> {
    Frame {
        src: CLIENT,
        sport: 40_000,
        dst: BACKEND,
        dport: 22,
        tcp_flags: TCP_SYN,
        seq,
        ..Frame::default()
    }
    .build()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_translated_syn_leaving_the_node_carries_its_frontend() {
    privilege::require();
    let l = load(&[JOB, SHARED]);
    mark_interfaces(&l);
    let (_, translated) = Ingress::Tc.run(&l, &request(9022, TCP_SYN, CLIENT_ISN, 0, 0));
    let tcp = packet::classify(&translated).expect("classify");
    assert_eq!(
        packet::endpoint(&translated, tcp, Side::Destination),
        Endpoint::new(BACKEND, 22)
    );
    let before = counters(&l);
    let out = egress_from(&l, OUTSIDE, &translated);
    assert_eq!(out, ipopt::add(&translated, frontend(9022)));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("frontend_option_added", 1)]
    );
    // A SYN to the pod that no frontend translated (in-cluster): nothing.
    let in_cluster = Frame {
        sport: 40_001,
        ..Frame::default()
    };
    let in_cluster = Frame {
        dst: BACKEND,
        dport: 22,
        tcp_flags: TCP_SYN,
        ..in_cluster
    }
    .build();
    assert_eq!(egress_from(&l, OUTSIDE, &in_cluster), in_cluster);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_to_a_pod_carries_a_frontend_only_if_this_node_translated_it() {
    privilege::require();
    let l = load(&[JOB, SHARED]);
    mark_interfaces(&l);
    // An off-path sender sprays SYNs with a pod's address (here CLIENT)
    // through a frontend of another pod: the half-open entry of that
    // 4-tuple names the frontend.
    let spoofed_isn = 555;
    Ingress::Tc.run(&l, &request(9022, TCP_SYN, spoofed_isn, 0, 0));
    // The pod's own SYN to the other pod's address, with its own ISN:
    // whether it leaves from the pod or is routed through from outside,
    // it carries nothing (the other pod's SYN-ACK would otherwise come
    // back from the frontend, and the pod would drop it).
    let own = syn_to_pod(CLIENT_ISN);
    for ingress in [0, POD, OUTSIDE] {
        assert_eq!(egress_from(&l, ingress, &own), own, "in on {ingress}");
    }
    // The SYN with the entry's ISN from a pod: not one this node
    // translated either.
    let same_isn = syn_to_pod(spoofed_isn);
    assert_eq!(egress_from(&l, POD, &same_isn), same_isn);
    // Only the SYN the ingress translated (from outside, the entry's ISN).
    assert_eq!(
        egress_from(&l, OUTSIDE, &same_isn),
        ipopt::add(&same_isn, frontend(9022))
    );
}

/// The pod's SYN-ACK to the client, announcing an MSS of `mss`.
fn syn_ack_with_mss(mss: u16) -> Vec<u8> {
    let [hi, lo] = mss.to_be_bytes();
    let mut frame = Frame {
        src: BACKEND,
        sport: 22,
        dst: CLIENT,
        dport: 40_000,
        tcp_flags: TCP_SYN | TCP_ACK,
        seq: SERVER_ISN,
        ack: CLIENT_ISN + 1,
        payload: vec![TCPOPT_MSS, TCPOLEN_MSS, hi, lo, 1, 1, 4, 2],
        ..Frame::default()
    }
    .build();
    mss::payload_as_options(&mut frame);
    frame
}

/// A veth pair with both ends in the test's namespace, MTU 1280: the link
/// between the nodes, as the pod's node sees it. Returns its index.
pub(super) fn narrow_link(l: &Loaded) -> u32 {
    l.netns
        .ip(&[
            "link", "add", "nodes", "mtu", "1280", "type", "veth", "peer", "name", "nodesp",
        ])
        .expect("veth");
    for link in ["nodes", "nodesp"] {
        l.netns.ip(&["link", "set", link, "up"]).expect("link up");
    }
    ssh_fwd::datapath::netdev::index("nodes").expect("index")
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_pods_node_lowers_the_mss_of_the_syn_ack_to_what_the_link_from_the_other_node_carries() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB, SHARED]);
        own(&l, BACKEND);
        let link = narrow_link(&l);
        set_iface_index_flags(&l, link, IFACE_CLUSTER);
        let syn = ipopt::add(&translated_syn(), frontend(9022));
        match ingress {
            Ingress::Tc => test_run_tc_on(&l, PROG_INGRESS_TC, &syn, link, link),
            Ingress::Xdp => test_run_xdp_on(&l, &syn, link),
        };
        let syn_ack = syn_ack_with_mss(1460);
        let (_, out) = from_pod(&l, &syn_ack);
        let mut expected = syn_ack.clone();
        let tcp = packet::classify(&expected).expect("classify");
        packet::rewrite(&mut expected, tcp, Side::Source, frontend(9022));
        assert!(mss::clamp(&mut expected, 1240));
        assert_eq!(out, expected, "{ingress:?}: from the frontend, MSS 1240");
        assert!(checksums_verify(&out));
        // A connection that entered this node directly keeps the pod's MSS.
        let l = load(&[JOB, SHARED]);
        own(&l, BACKEND);
        let link = narrow_link(&l);
        let direct = request(9022, TCP_SYN, CLIENT_ISN, 0, 0);
        match ingress {
            Ingress::Tc => test_run_tc_on(&l, PROG_INGRESS_TC, &direct, link, link),
            Ingress::Xdp => test_run_xdp_on(&l, &direct, link),
        };
        let (_, out) = from_pod(&l, &syn_ack);
        let mut expected = syn_ack.clone();
        packet::rewrite(&mut expected, tcp, Side::Source, frontend(9022));
        assert_eq!(out, expected, "{ingress:?}: the MSS untouched");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_pods_node_learns_the_frontend_and_the_pod_gets_the_syn_as_sent() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB, SHARED]);
        set_iface_index_flags(&l, LO, IFACE_CLUSTER);
        let syn = translated_syn();
        let before = counters(&l);
        let (_, out) = ingress.run(&l, &ipopt::add(&syn, frontend(9022)));
        assert_eq!(out, syn, "{ingress:?}: the option is removed");
        assert!(delta(&before, &counters(&l)).contains(&("frontend_option_learned", 1)));
        let learned: Vec<_> = entries(&l)
            .into_iter()
            .filter_map(|e| match e {
                Entry::HalfOpen(k, h) => Some((k.client(), h.frontend)),
                _ => None,
            })
            .collect();
        assert_eq!(
            learned,
            [(Endpoint::new(CLIENT, 40_000), frontend(9022))],
            "{ingress:?}"
        );
        // A SYN without the option to the pod: in-cluster, no state.
        let l = load(&[JOB]);
        assert_eq!(ingress.run(&l, &syn).1, syn);
        assert!(entries(&l).is_empty(), "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_option_naming_a_frontend_of_another_backend_is_removed_and_ignored() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB, ("other", "198.18.0.10:9500", "10.244.9.9:22")]);
        set_iface_index_flags(&l, LO, IFACE_CLUSTER);
        let syn = translated_syn();
        let before = counters(&l);
        let (_, out) = ingress.run(&l, &ipopt::add(&syn, Endpoint::new(frontend(0).ip(), 9500)));
        assert_eq!(out, syn, "{ingress:?}");
        assert!(delta(&before, &counters(&l)).contains(&("frontend_option_rejected", 1)));
        assert!(entries(&l).is_empty(), "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_option_from_anywhere_but_a_cluster_interface_is_removed_and_ignored() {
    privilege::require();
    let plain = ssh_fwd::datapath::object::Settings {
        cross_node_plain: true,
        ..ssh_fwd::datapath::object::Settings::default()
    };
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        // An external interface, one that is both external and the way to
        // the other nodes, an interface the agent does not know, and a
        // cluster interface under --cross-node plain.
        for (flags, settings) in [
            (IFACE_EXTERNAL, None),
            (IFACE_EXTERNAL | IFACE_CLUSTER, None),
            (0, None),
            (IFACE_CLUSTER, Some(plain)),
        ] {
            let l = match settings {
                Some(s) => load_with(&[JOB, SHARED], s),
                None => load(&[JOB, SHARED]),
            };
            set_iface_index_flags(&l, LO, flags);
            let syn = translated_syn();
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &ipopt::add(&syn, frontend(9022)));
            assert_eq!(out, syn, "{ingress:?} flags {flags}: the option is removed");
            let d = delta(&before, &counters(&l));
            assert!(
                d.contains(&("frontend_option_untrusted", 1)),
                "{ingress:?} flags {flags}: {d:?}"
            );
            assert!(
                entries(&l).is_empty(),
                "{ingress:?} flags {flags}: no state"
            );
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_translated_syn_without_room_for_the_option_is_dropped_and_counted() {
    privilege::require();
    let l = load(&[JOB, SHARED]);
    mark_interfaces(&l);
    // A client SYN whose IPv4 header is already 56 bytes (36 bytes of
    // options): the 8-byte option no longer fits in 60.
    let full = Frame {
        ip_options: vec![1; 36],
        tcp_flags: TCP_SYN,
        seq: CLIENT_ISN,
        dport: 9022,
        ..Frame::default()
    }
    .build();
    let (_, translated) = Ingress::Tc.run(&l, &full);
    let before = counters(&l);
    let (verdict, _) = test_run_tc_on(&l, PROG_EGRESS_TC, &translated, OUTSIDE, 0);
    assert_eq!(verdict, 2, "TC_ACT_SHOT");
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("frontend_option_no_room", 1)]
    );
}

/// The cluster's key in the sealed tests, and another cluster's.
const KEY: [u64; 2] = [0x0123_4567_89ab_cdef, 0x0fed_cba9_8765_4321];
const OTHER_KEY: [u64; 2] = [KEY[0], KEY[1] ^ 1];

/// The object loaded with `key` (if any) in force, as the agent puts it.
fn load_keyed(key: Option<[u64; 2]>) -> Loaded {
    let l = load(&[JOB, SHARED]);
    ssh_fwd::datapath::key::KeyMap::open_pinned(&l.layout)
        .expect("CROSS_NODE_KEY pinned")
        .write(key)
        .expect("write CROSS_NODE_KEY");
    l
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_a_key_a_translated_syn_leaving_the_node_carries_a_sealed_frontend() {
    privilege::require();
    let l = load_keyed(Some(KEY));
    mark_interfaces(&l);
    let (_, translated) = Ingress::Tc.run(&l, &request(9022, TCP_SYN, CLIENT_ISN, 0, 0));
    let out = egress_from(&l, OUTSIDE, &translated);
    assert_eq!(out, ipopt::add_sealed(&translated, frontend(9022), KEY));
    assert!(checksums_verify(&out));
    // Room for 8 bytes is not room for 16.
    let tight = Frame {
        ip_options: vec![1; 32],
        tcp_flags: TCP_SYN,
        seq: CLIENT_ISN,
        dport: 9022,
        ..Frame::default()
    }
    .build();
    let (_, translated) = Ingress::Tc.run(&l, &tight);
    let before = counters(&l);
    let (verdict, _) = test_run_tc_on(&l, PROG_EGRESS_TC, &translated, OUTSIDE, 0);
    assert_eq!(verdict, 2, "TC_ACT_SHOT");
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("frontend_option_no_room", 1)]
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_sealed_option_is_believed_on_any_interface_only_under_the_same_key() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        for flags in [
            IFACE_EXTERNAL,
            IFACE_EXTERNAL | IFACE_CLUSTER,
            IFACE_CLUSTER,
        ] {
            let l = load_keyed(Some(KEY));
            set_iface_index_flags(&l, LO, flags);
            let syn = translated_syn();
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &ipopt::add_sealed(&syn, frontend(9022), KEY));
            assert_eq!(out, syn, "{ingress:?} flags {flags}: the option is removed");
            let d = delta(&before, &counters(&l));
            assert!(
                d.contains(&("frontend_option_learned", 1)),
                "{ingress:?} flags {flags}: {d:?}"
            );
            assert_eq!(entries(&l).len(), 1, "{ingress:?} flags {flags}");
        }
        // Another cluster's key, a tag moved to another handshake, a node
        // without a key: removed, counted, no state.
        let syn = translated_syn();
        let moved = ipopt::add_carried(
            &syn,
            &ipopt::Carried {
                frontend: frontend(9022),
                len: ipopt::SEALED_LEN,
                tag: ipopt::tag(
                    KEY,
                    Endpoint::new(CLIENT, 40_000),
                    Endpoint::new(BACKEND, 22),
                    CLIENT_ISN + 1,
                    frontend(9022),
                ),
            },
        );
        for (what, key, frame) in [
            (
                "another key",
                Some(KEY),
                ipopt::add_sealed(&syn, frontend(9022), OTHER_KEY),
            ),
            ("a tag of another SYN", Some(KEY), moved),
            (
                "no key here",
                None,
                ipopt::add_sealed(&syn, frontend(9022), KEY),
            ),
        ] {
            let l = load_keyed(key);
            set_iface_index_flags(&l, LO, IFACE_CLUSTER);
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &frame);
            assert_eq!(out, syn, "{ingress:?}, {what}: the option is removed");
            let d = delta(&before, &counters(&l));
            assert!(
                d.contains(&("frontend_option_forged", 1)),
                "{ingress:?}, {what}: {d:?}"
            );
            assert!(entries(&l).is_empty(), "{ingress:?}, {what}: no state");
        }
    }
}
