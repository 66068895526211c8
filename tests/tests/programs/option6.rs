//! The frontend option over IPv6 through the real programs: a Destination
//! Options header added to a translated SYN as it leaves for another node,
//! learned and removed on the node of the pod, byte for byte against
//! `ssh_fwd_common::ipopt::v6`.

use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    object::{PROG_EGRESS_TC, PROG_INGRESS_TC, Settings},
};
use ssh_fwd_common::{
    conntrack::{
        TCP_ACK, TCP_SYN,
        mss::{self, TCPOLEN_MSS, TCPOPT_MSS},
    },
    fixtures6::{Extension, Frame6},
    ipopt::{self, Carried, SEALED_LEN6},
    maps::{Endpoint6, IFACE_CLUSTER, IFACE_EXTERNAL, IFACE_POD_PEER},
    packet::Side,
};
use ssh_fwd_tests::privilege;

use super::{
    Loaded,
    conntrack::{CLIENT_ISN, Ingress, SERVER_ISN, each_ingress},
    counters, delta, from_pod,
    ipv6::{
        BACKEND, CLIENT, backend, frontend, own6, pass_verdict, request, rewritten,
        tcp_checksum_verifies,
    },
    load, load_with,
    option::narrow_link,
    set_iface_index_flags, test_run_tc_on, test_run_xdp_on,
};

/// Interface indexes the tests mark: an external interface, and a pod's.
const OUTSIDE: u32 = 7;
const POD: u32 = 9;
/// `lo`, where test runs without a context arrive.
const LO: u32 = 1;

pub(super) const JOB6: (&str, &str, &str) =
    ("job6", "[2001:db8:f::10]:8022", "[fd00:10:244:1::5]:22");
const OTHER6: (&str, &str, &str) = ("other6", "[2001:db8:f::10]:9500", "[fd00:10:244:9::9]:22");

/// The cluster's key in the sealed tests, and another cluster's.
const KEY: [u64; 2] = [0x0123_4567_89ab_cdef, 0x0fed_cba9_8765_4321];
const OTHER_KEY: [u64; 2] = [KEY[0], KEY[1] ^ 1];

/// The frontend node: the mapping's backend is no pod of it.
fn load_frontend_node(key: Option<[u64; 2]>) -> Loaded {
    let l = load(&[JOB6]);
    write_key(&l, key);
    set_iface_index_flags(&l, OUTSIDE, IFACE_EXTERNAL);
    set_iface_index_flags(&l, POD, IFACE_POD_PEER);
    l
}

pub(super) fn write_key(l: &Loaded, key: Option<[u64; 2]>) {
    ssh_fwd::datapath::key::KeyMap::open_pinned(&l.layout)
        .expect("CROSS_NODE_KEY pinned")
        .write(key)
        .expect("write CROSS_NODE_KEY");
}

/// The pod's node: the backend is its pod, the test runs arrive on `lo`
/// marked `flags`.
fn load_pod_node(mappings: &[(&str, &str, &str)], key: Option<[u64; 2]>, flags: u32) -> Loaded {
    let l = load(mappings);
    own6(&l);
    write_key(&l, key);
    set_iface_index_flags(&l, LO, flags);
    l
}

/// Egress of `frame` as it leaves the node, having come in on `ingress`.
fn egress_from(l: &Loaded, ingress: u32, frame: &[u8]) -> (u32, Vec<u8>) {
    test_run_tc_on(l, PROG_EGRESS_TC, frame, ingress, 0)
}

/// A SYN from the client to the pod, as the pod's node receives it
/// (translated), with ISN `seq`.
pub(super) fn syn_to_pod(seq: u32) -> Vec<u8> {
    Frame6 {
        src: CLIENT,
        dst: BACKEND,
        sport: 40_000,
        dport: 22,
        tcp_flags: TCP_SYN,
        seq,
        ..Frame6::default()
    }
    .build()
}

/// The half-open entries of IPv6: (client, frontend).
fn half_open6(l: &Loaded) -> Vec<(Endpoint6, Endpoint6)> {
    ConnTables::open_pinned(&l.layout)
        .expect("tables")
        .entries6()
        .into_iter()
        .filter_map(|e| match e {
            Entry::HalfOpen(k, h) => Some((k.client(), h.frontend)),
            _ => None,
        })
        .collect()
}

fn client() -> Endpoint6 {
    Endpoint6::new6(CLIENT, 40_000)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_translated_ipv6_syn_leaving_the_node_carries_its_frontend_in_a_destination_options_header() {
    privilege::require();
    each_ingress(|ingress| {
        for key in [None, Some(KEY)] {
            let l = load_frontend_node(key);
            let syn = request(TCP_SYN, CLIENT_ISN, 0, 0).build();
            let (_, translated) = ingress.run(&l, &syn);
            assert_eq!(
                translated,
                rewritten(&syn, Side::Destination, backend()),
                "{ingress:?}: translated for a backend on another node"
            );
            let before = counters(&l);
            let (verdict, out) = egress_from(&l, OUTSIDE, &translated);
            let expected = match key {
                None => ipopt::add6(&translated, frontend()),
                Some(key) => ipopt::add_sealed6(&translated, frontend(), key),
            };
            assert_eq!((verdict, &out), (pass_verdict(Ingress::Tc), &expected));
            assert!(tcp_checksum_verifies(&out), "{ingress:?} {key:?}");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![("frontend_option_added", 1)],
                "{ingress:?} {key:?}"
            );
            // A SYN to the pod that no frontend translated (in-cluster), or
            // the translated one leaving from a pod: nothing added.
            let in_cluster = syn_to_pod(CLIENT_ISN + 7);
            assert_eq!(egress_from(&l, OUTSIDE, &in_cluster).1, in_cluster);
            assert_eq!(egress_from(&l, POD, &translated).1, translated);
        }
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_translated_ipv6_syn_with_extension_headers_of_its_own_is_dropped_and_counted() {
    privilege::require();
    let l = load_frontend_node(None);
    // A Hop-by-Hop header must stay first: no room before it.
    let syn = Frame6 {
        extensions: vec![Extension::hop_by_hop(8)],
        ..request(TCP_SYN, CLIENT_ISN, 0, 0)
    }
    .build();
    let (_, translated) = Ingress::Tc.run(&l, &syn);
    assert_eq!(translated, rewritten(&syn, Side::Destination, backend()));
    let before = counters(&l);
    let (verdict, out) = egress_from(&l, OUTSIDE, &translated);
    assert_eq!((verdict, out), (2, translated), "TC_ACT_SHOT, untouched");
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("frontend_option_no_room", 1)]
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_pods_node_learns_an_ipv6_frontend_and_the_pod_gets_the_syn_as_sent() {
    privilege::require();
    each_ingress(|ingress| {
        for (key, flags) in [
            (None, IFACE_CLUSTER),
            (Some(KEY), IFACE_EXTERNAL),
            (Some(KEY), IFACE_CLUSTER),
        ] {
            let l = load_pod_node(&[JOB6], key, flags);
            let syn = syn_to_pod(CLIENT_ISN);
            let with = match key {
                None => ipopt::add6(&syn, frontend()),
                Some(key) => ipopt::add_sealed6(&syn, frontend(), key),
            };
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &with);
            assert_eq!(
                (verdict, &out),
                (pass_verdict(ingress), &syn),
                "{ingress:?} {key:?} flags {flags}: the header is removed"
            );
            let d = delta(&before, &counters(&l));
            assert!(
                d.contains(&("frontend_option_learned", 1)),
                "{ingress:?} {key:?} flags {flags}: {d:?}"
            );
            assert_eq!(
                half_open6(&l),
                [(client(), frontend())],
                "{ingress:?} {key:?} flags {flags}"
            );
        }
        // A SYN without the header to the pod: in-cluster, no state.
        let l = load_pod_node(&[JOB6], None, IFACE_CLUSTER);
        let syn = syn_to_pod(CLIENT_ISN);
        assert_eq!(ingress.run(&l, &syn).1, syn);
        assert!(half_open6(&l).is_empty(), "{ingress:?}");
    });
}

/// The pod's SYN-ACK to the client, announcing an MSS of `mss`.
fn syn_ack_with_mss(mss: u16) -> Vec<u8> {
    let [hi, lo] = mss.to_be_bytes();
    let frame = Frame6 {
        src: BACKEND,
        sport: 22,
        dst: CLIENT,
        dport: 40_000,
        tcp_flags: TCP_SYN | TCP_ACK,
        seq: SERVER_ISN,
        ack: CLIENT_ISN + 1,
        payload: vec![TCPOPT_MSS, TCPOLEN_MSS, hi, lo, 1, 1, 4, 2],
        ..Frame6::default()
    };
    let mut bytes = frame.build();
    mss::payload_as_options_at(&mut bytes, frame.l4_off());
    bytes
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_pods_node_lowers_the_mss_of_the_ipv6_syn_ack_to_what_the_link_carries() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load_pod_node(&[JOB6], None, 0);
        let link = narrow_link(&l);
        set_iface_index_flags(&l, link, IFACE_CLUSTER);
        let syn = ipopt::add6(&syn_to_pod(CLIENT_ISN), frontend());
        match ingress {
            Ingress::Tc => test_run_tc_on(&l, PROG_INGRESS_TC, &syn, link, link),
            Ingress::Xdp => test_run_xdp_on(&l, &syn, link),
        };
        let syn_ack = syn_ack_with_mss(1440);
        let (_, out) = from_pod(&l, &syn_ack);
        let mut expected = rewritten(&syn_ack, Side::Source, frontend());
        // 1280 less the IPv6 and TCP headers.
        assert!(mss::clamp_at(&mut expected, 54, 1220));
        assert_eq!(out, expected, "{ingress:?}: from the frontend, MSS 1220");
        assert!(tcp_checksum_verifies(&out));
    });
}

/// A SYN to the pod that the pod's node must not believe.
struct Case {
    what: &'static str,
    /// Under `--cross-node plain`.
    plain: bool,
    /// This node's key.
    key: Option<[u64; 2]>,
    /// The flags of the interface it arrives on.
    flags: u32,
    frame: Vec<u8>,
    /// The counter that says why.
    counter: &'static str,
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_header_the_pods_node_may_not_believe_is_removed_and_ignored() {
    privilege::require();
    let syn = syn_to_pod(CLIENT_ISN);
    let moved = ipopt::add_carried6(
        &syn,
        &Carried {
            frontend: frontend(),
            len: SEALED_LEN6,
            tag: ipopt::tag6(KEY, client(), backend(), CLIENT_ISN + 1, frontend()),
        },
    );
    each_ingress(|ingress| {
        let cases = [
            Case {
                what: "plain on an external interface",
                plain: false,
                key: None,
                flags: IFACE_EXTERNAL,
                frame: ipopt::add6(&syn, frontend()),
                counter: "frontend_option_untrusted",
            },
            Case {
                what: "plain on one both external and cluster",
                plain: false,
                key: None,
                flags: IFACE_EXTERNAL | IFACE_CLUSTER,
                frame: ipopt::add6(&syn, frontend()),
                counter: "frontend_option_untrusted",
            },
            Case {
                what: "plain on an unknown interface",
                plain: false,
                key: None,
                flags: 0,
                frame: ipopt::add6(&syn, frontend()),
                counter: "frontend_option_untrusted",
            },
            Case {
                what: "plain under --cross-node plain",
                plain: true,
                key: None,
                flags: IFACE_CLUSTER,
                frame: ipopt::add6(&syn, frontend()),
                counter: "frontend_option_untrusted",
            },
            Case {
                what: "sealed under another key",
                plain: false,
                key: Some(KEY),
                flags: IFACE_CLUSTER,
                frame: ipopt::add_sealed6(&syn, frontend(), OTHER_KEY),
                counter: "frontend_option_forged",
            },
            Case {
                what: "a tag of another SYN",
                plain: false,
                key: Some(KEY),
                flags: IFACE_CLUSTER,
                frame: moved.clone(),
                counter: "frontend_option_forged",
            },
            Case {
                what: "sealed, no key here",
                plain: false,
                key: None,
                flags: IFACE_CLUSTER,
                frame: ipopt::add_sealed6(&syn, frontend(), KEY),
                counter: "frontend_option_forged",
            },
            Case {
                what: "naming a frontend of another backend",
                plain: false,
                key: None,
                flags: IFACE_CLUSTER,
                frame: ipopt::add6(&syn, Endpoint6::new6(frontend().ip6(), 9500)),
                counter: "frontend_option_rejected",
            },
        ];
        for Case {
            what,
            plain,
            key,
            flags,
            frame,
            counter,
        } in cases
        {
            let mappings = [JOB6, OTHER6];
            let l = if plain {
                let l = load_with(
                    &mappings,
                    Settings {
                        cross_node_plain: true,
                        ..Settings::default()
                    },
                );
                own6(&l);
                set_iface_index_flags(&l, LO, flags);
                l
            } else {
                load_pod_node(&mappings, key, flags)
            };
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &frame);
            assert_eq!(
                (verdict, &out),
                (pass_verdict(ingress), &syn),
                "{ingress:?}, {what}: removed"
            );
            let d = delta(&before, &counters(&l));
            assert!(d.contains(&(counter, 1)), "{ingress:?}, {what}: {d:?}");
            assert!(half_open6(&l).is_empty(), "{ingress:?}, {what}: no state");
        }
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_syn_whose_hop_limit_expires_here_touches_nothing_but_loses_its_header() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load_pod_node(&[JOB6], None, IFACE_CLUSTER);
        let last_hop = Frame6 {
            src: CLIENT,
            dst: BACKEND,
            sport: 40_000,
            dport: 22,
            tcp_flags: TCP_SYN,
            seq: CLIENT_ISN,
            hop_limit: 1,
            ..Frame6::default()
        }
        .build();
        let (_, out) = ingress.run(&l, &ipopt::add6(&last_hop, frontend()));
        assert_eq!(out, last_hop, "{ingress:?}");
        assert!(half_open6(&l).is_empty(), "{ingress:?}");
    });
}
