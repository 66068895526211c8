//! IPv6 through the programs: the DNAT of a frontend's segments (with and
//! without extension headers) compared byte for byte with the host
//! reference `ssh_fwd_common::ipv6::rewrite`, the reverse NAT of the
//! replies, the connection confirmed by the server as for IPv4, and every
//! packet the IPv6 path refuses or passes, counted under its outcome.
//! ICMPv6 errors of such a connection are translated both ways.
//! The mapping is installed by the agent's plan, into `FRONTENDS6` and
//! `REVERSE6`.

use std::net::Ipv6Addr;

use aya::maps::HashMap;
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_RST, TCP_SYN, trust::source_key6},
    fixtures6::{Extension, Frame6, Icmp6Error},
    icmp::Quoted,
    ipv6::{self, NEXTHDR_ICMPV6, icmp::ICMPV6_DEST_UNREACH},
    maps::{self, Addr6, Conn6, ConnKey6, Endpoint6, Owner},
    packet::{ETH_HLEN, Side},
};
use ssh_fwd_tests::privilege;

use super::{
    Loaded, POD_IFINDEX, TC_ACT_UNSPEC, XDP_PASS,
    conntrack::{BANNER, CLIENT_ISN, Ingress, SERVER_ISN, each_ingress},
    counters, delta, from_pod, load, map,
};

pub(super) const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
pub(super) const FRONTEND: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
pub(super) const BACKEND: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x244, 1, 0, 0, 0, 5);
const PSH: u8 = 0x08;

pub(super) fn frontend() -> Endpoint6 {
    Endpoint6::new6(FRONTEND, 8022)
}

pub(super) fn backend() -> Endpoint6 {
    Endpoint6::new6(BACKEND, 22)
}

/// The object with one IPv6 mapping, `[FRONTEND]:8022 -> [BACKEND]:22`,
/// installed as the agent installs it, whose backend is a pod of this
/// node.
pub(super) fn load6() -> Loaded {
    let l = load(&[("job6", "[2001:db8:f::10]:8022", "[fd00:10:244:1::5]:22")]);
    own6(&l);
    l
}

/// Records `BACKEND` as a pod address of this node, as the agent does.
pub(super) fn own6(l: &Loaded) {
    let mut owners: HashMap<_, Addr6, Owner> = map(l, maps::OWNERS6);
    let owner = Owner {
        ifindex: POD_IFINDEX,
        master: 0,
    };
    owners.insert(Addr6::new(BACKEND), owner, 0).expect("owner");
}

/// A segment from the client (port 40000) to the frontend.
pub(super) fn request(flags: u8, seq: u32, ack: u32, payload: usize) -> Frame6 {
    Frame6 {
        src: CLIENT,
        dst: FRONTEND,
        sport: 40_000,
        dport: 8022,
        tcp_flags: flags,
        seq,
        ack,
        payload: vec![b'c'; payload],
        ..Frame6::default()
    }
}

/// A segment from the backend to the client.
pub(super) fn reply(flags: u8, seq: u32, ack: u32, payload: usize) -> Frame6 {
    Frame6 {
        src: BACKEND,
        dst: CLIENT,
        sport: 22,
        dport: 40_000,
        tcp_flags: flags,
        seq,
        ack,
        payload: vec![b's'; payload],
        ..Frame6::default()
    }
}

/// The host reference's rewrite of one side of `frame`.
pub(super) fn rewritten(frame: &[u8], side: Side, to: Endpoint6) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let tcp = ipv6::classify(&expected).expect("classify");
    ipv6::rewrite(&mut expected, tcp, side, to);
    expected
}

/// Whether the TCP checksum of an IPv6 frame verifies.
pub(super) fn tcp_checksum_verifies(frame: &[u8]) -> bool {
    let tcp = ipv6::classify(frame).expect("classify");
    let mut all = ssh_fwd_common::fixtures6::pseudo_header(
        Ipv6Addr::from(<[u8; 16]>::try_from(&frame[22..38]).expect("source")),
        Ipv6Addr::from(<[u8; 16]>::try_from(&frame[38..54]).expect("destination")),
        ipv6::NEXTHDR_TCP,
        tcp.l4_len as u32,
    )
    .to_vec();
    all.extend_from_slice(&frame[tcp.l4_off..]);
    ssh_fwd_common::fixtures::reference_checksum(&all) == 0
}

pub(super) fn pass_verdict(ingress: Ingress) -> u32 {
    match ingress {
        Ingress::Tc => TC_ACT_UNSPEC,
        Ingress::Xdp => XDP_PASS,
    }
}

pub(super) fn conns(l: &Loaded) -> Vec<(ConnKey6, Conn6)> {
    let conns: HashMap<_, ConnKey6, Conn6> = map(l, maps::CONNS6);
    conns.iter().map(|e| e.expect("entry")).collect()
}

fn sources(l: &Loaded) -> Vec<(u64, u64)> {
    let sources: HashMap<_, u64, u64> = map(l, maps::SOURCES6);
    sources.iter().map(|e| e.expect("entry")).collect()
}

/// The handshake and the server's banner, as `conntrack::handshake` for
/// IPv4: each request rewritten exactly as the reference, each reply
/// restored exactly.
fn handshake(l: &Loaded, ingress: Ingress) {
    for frame in [
        request(TCP_SYN, CLIENT_ISN, 0, 0),
        request(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    ] {
        let frame = frame.build();
        let (verdict, out) = ingress.run(l, &frame);
        assert_eq!(verdict, pass_verdict(ingress));
        assert_eq!(out, rewritten(&frame, Side::Destination, backend()));
        assert!(tcp_checksum_verifies(&out));
        if frame == request(TCP_SYN, CLIENT_ISN, 0, 0).build() {
            let synack = reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0).build();
            let (verdict, out) = from_pod(l, &synack);
            assert_eq!(verdict, TC_ACT_UNSPEC);
            assert_eq!(out, rewritten(&synack, Side::Source, frontend()));
            assert!(tcp_checksum_verifies(&out));
        }
    }
    let banner = reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER).build();
    let (_, out) = from_pod(l, &banner);
    assert_eq!(out, rewritten(&banner, Side::Source, frontend()));
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_connection_is_translated_exactly_and_confirmed_by_the_server() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load6();
        let before = counters(&l);
        handshake(&l, ingress);
        let after = counters(&l);
        let d = delta(&before, &after);
        for (outcome, n) in [
            ("dnat", 2),
            ("half_opened", 1),
            ("conn_claimed", 1),
            ("conn_established", 1),
            ("reverse_nat", 2),
        ] {
            assert!(
                d.contains(&(outcome, n)),
                "{ingress:?}: {outcome} x{n} in {d:?}"
            );
        }
        let c = conns(&l);
        assert_eq!(c.len(), 1, "{ingress:?}: one connection");
        let (key, conn) = c[0];
        assert_eq!(key.client().ip6(), CLIENT);
        assert_eq!(key.backend(), backend());
        assert_eq!(conn.frontend, frontend());
        // The quota counts the client's /64.
        assert_eq!(sources(&l), vec![(source_key6(Addr6::new(CLIENT)), 1)]);
        // Data both ways follows the connection.
        let data = request(
            TCP_ACK | PSH,
            CLIENT_ISN + 1,
            SERVER_ISN + 1 + BANNER as u32,
            500,
        )
        .build();
        let (_, out) = ingress.run(&l, &data);
        assert_eq!(out, rewritten(&data, Side::Destination, backend()));
        // A RST from the server in sequence ends it, and gives the quota
        // back.
        let rst = reply(TCP_RST, SERVER_ISN + 1 + BANNER as u32, 0, 0).build();
        let (_, out) = from_pod(&l, &rst);
        assert_eq!(out, rewritten(&rst, Side::Source, frontend()));
        assert!(conns(&l).is_empty(), "{ingress:?}: the RST ended it");
        assert_eq!(sources(&l), vec![(source_key6(Addr6::new(CLIENT)), 0)]);
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn extension_headers_are_walked_to_tcp_or_passed_untouched_and_said_why() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load6();
        // Walked over: the segment behind them is rewritten exactly.
        for extensions in [
            vec![Extension::hop_by_hop(8)],
            vec![Extension::hop_by_hop(8), Extension::destination(16)],
            vec![Extension::routing(2, 0), Extension::destination(8)],
        ] {
            let frame = Frame6 {
                extensions: extensions.clone(),
                ..request(TCP_SYN, CLIENT_ISN, 0, 0)
            }
            .build();
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &frame);
            assert_eq!(verdict, pass_verdict(ingress), "{extensions:?}");
            assert_eq!(
                out,
                rewritten(&frame, Side::Destination, backend()),
                "{extensions:?}"
            );
            assert!(tcp_checksum_verifies(&out));
            assert!(delta(&before, &counters(&l)).contains(&("dnat", 1)));
        }
        // Passed untouched, counted under why.
        let passed: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "authentication header",
                Frame6 {
                    extensions: vec![Extension::auth()],
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "ipv6_extensions",
            ),
            (
                "segments left",
                Frame6 {
                    extensions: vec![Extension::routing(2, 1)],
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "ipv6_extensions",
            ),
            (
                "five extension headers",
                Frame6 {
                    extensions: vec![Extension::destination(8); 5],
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "ipv6_extensions",
            ),
            (
                "fragment",
                Frame6 {
                    extensions: vec![Extension::fragment(0, true)],
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "fragment",
            ),
            (
                "icmpv6",
                Frame6 {
                    protocol: NEXTHDR_ICMPV6,
                    payload: vec![135, 0, 0, 0, 0, 0, 0, 0],
                    ..request(0, 0, 0, 0)
                }
                .build(),
                "not_tcp",
            ),
            (
                "another port",
                Frame6 {
                    dport: 8023,
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "not_to_a_frontend",
            ),
            (
                "hop limit 1",
                Frame6 {
                    hop_limit: 1,
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "ttl_expired",
            ),
            (
                "payload length past the frame",
                {
                    let mut f = request(TCP_SYN, CLIENT_ISN, 0, 0).build();
                    f[18..20].copy_from_slice(&200u16.to_be_bytes());
                    f
                },
                "malformed",
            ),
        ];
        for (case, frame, outcome) in passed {
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &frame);
            assert_eq!(verdict, pass_verdict(ingress), "{ingress:?} {case}");
            assert_eq!(out, frame, "{ingress:?} {case}: untouched");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![(outcome, 1)],
                "{ingress:?} {case}"
            );
        }
        assert!(conns(&l).is_empty());
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_segment_the_pod_would_drop_writes_nothing() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load6();
        let refused: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "bad checksum",
                {
                    let mut f = request(TCP_SYN, CLIENT_ISN, 0, 0).build();
                    let check = 14 + 40 + 16;
                    f[check] ^= 0x5a;
                    f
                },
                "bad_checksum",
            ),
            (
                "link-local source",
                Frame6 {
                    src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "martian_source",
            ),
            (
                "the frontend's own address",
                Frame6 {
                    src: FRONTEND,
                    ..request(TCP_SYN, CLIENT_ISN, 0, 0)
                }
                .build(),
                "martian_source",
            ),
        ];
        for (case, frame, outcome) in refused {
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &frame);
            assert_eq!(verdict, ingress.dropped(), "{ingress:?} {case}");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![(outcome, 1)],
                "{ingress:?} {case}"
            );
        }
        // No half-open entry: the SYN-ACK of such a handshake is not ours.
        let synack = reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0).build();
        let (_, out) = from_pod(&l, &synack);
        assert_eq!(out, synack, "{ingress:?}: nothing to restore");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_reply_from_another_interface_is_a_spoof_and_moves_nothing() {
    privilege::require();
    let l = load6();
    let syn = request(TCP_SYN, CLIENT_ISN, 0, 0).build();
    Ingress::Tc.run(&l, &syn);
    let synack = reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0).build();
    let before = counters(&l);
    let (verdict, _) = super::test_run_tc_on(&l, object_egress(), &synack, POD_IFINDEX + 7, 0);
    assert_eq!(verdict, 2, "dropped");
    assert_eq!(delta(&before, &counters(&l)), vec![("spoofed_reply", 1)]);
}

fn object_egress() -> &'static str {
    ssh_fwd::datapath::object::PROG_EGRESS_TC
}

const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);

/// The host reference's translation of the ICMPv6 error `frame`.
fn icmp_translated(frame: &[u8], which: Quoted, to: Endpoint6) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let icmp = ETH_HLEN + ipv6::IPV6_HLEN;
    let q = ipv6::icmp::parse(&expected, icmp).expect("quotes TCP");
    ipv6::icmp::translate(&mut expected, &q, which, to);
    expected
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_packet_too_big_about_a_reply_reaches_the_pod_and_one_out_of_window_does_not() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load6();
        handshake(&l, ingress);
        // The banner as the client's path saw it, too big for a link.
        let sent = Frame6 {
            src: FRONTEND,
            dst: CLIENT,
            sport: 8022,
            dport: 40_000,
            tcp_flags: TCP_ACK | PSH,
            seq: SERVER_ISN + 1,
            ack: CLIENT_ISN + 1,
            payload: vec![b's'; BANNER],
            ..Frame6::default()
        };
        let ptb = Icmp6Error::packet_too_big(ROUTER, FRONTEND, 1280, sent.clone()).build();
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &ptb);
        assert_eq!(verdict, pass_verdict(ingress), "{ingress:?}");
        assert_eq!(
            out,
            icmp_translated(&ptb, Quoted::Source, backend()),
            "{ingress:?}: the pod's own reply, to the pod, byte for byte"
        );
        assert_eq!(delta(&before, &counters(&l)), vec![("icmp_translated", 1)]);
        // A sequence number the server never sent: a blind attacker's.
        let forged = Icmp6Error::packet_too_big(
            ROUTER,
            FRONTEND,
            1280,
            Frame6 {
                seq: SERVER_ISN + 1_000_000,
                ..sent
            },
        )
        .build();
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &forged);
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("icmp_out_of_window", 1)]
        );
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_icmpv6_error_about_a_request_leaves_naming_the_frontend() {
    privilege::require();
    let l = load6();
    handshake(&l, Ingress::Tc);
    // A router between the node and the pod could not deliver the
    // client's segment, as translated.
    let about = Frame6 {
        dst: BACKEND,
        dport: 22,
        ..request(TCP_ACK | PSH, CLIENT_ISN + 1, SERVER_ISN + 1, 100)
    };
    let error = Icmp6Error {
        icmp_type: ICMPV6_DEST_UNREACH,
        mtu: 0,
        ..Icmp6Error::packet_too_big(ROUTER, CLIENT, 0, about)
    }
    .build();
    let before = counters(&l);
    let (verdict, out) = super::test_run_tc(&l, object_egress(), &error);
    assert_eq!(verdict, TC_ACT_UNSPEC);
    assert_eq!(
        out,
        icmp_translated(&error, Quoted::Destination, frontend())
    );
    assert_eq!(delta(&before, &counters(&l)), vec![("icmp_translated", 1)]);
}

/// The IPv6 job admitting only `2001:db8:1::/48` (the client's), loaded
/// with `settings`.
fn guarded6(settings: ssh_fwd::datapath::object::Settings) -> Loaded {
    use ssh_fwd::mapping::{
        Mapping, MappingSet,
        guard::{Allow, Guard, Limit},
    };
    let mut l = super::load_with(&[], settings);
    let guard = Guard {
        allow: Allow::Only(["2001:db8:1::/48".parse().expect("range")].into()),
        limit: Limit::Off,
        enforce_established: false,
        draining: false,
    };
    let set = MappingSet::from_unique([Mapping {
        name: "job6".into(),
        frontend: "[2001:db8:f::10]:8022".parse().expect("frontend"),
        backend: "[fd00:10:244:1::5]:22".parse().expect("backend"),
        guard,
    }]);
    super::install(&mut l.maps, &set);
    own6(&l);
    l
}

/// A stranger outside the allowlist, in another /48.
const STRANGER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 9);

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_source_outside_the_allowlist_is_denied_and_answered_with_a_reset() {
    use ssh_fwd::datapath::object::{DenyAction, Settings};
    use ssh_fwd_common::reset::{RESET_TTL, RESET6_FRAME_LEN};
    privilege::require();
    each_ingress(|ingress| {
        // Dropped by default; the client inside the list is translated.
        let l = guarded6(Settings::default());
        let stranger = Frame6 {
            src: STRANGER,
            ..request(TCP_SYN, CLIENT_ISN, 0, 0)
        }
        .build();
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &stranger);
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(delta(&before, &counters(&l)), vec![("denied", 1)]);
        let allowed = request(TCP_SYN, CLIENT_ISN, 0, 0).build();
        let (_, out) = ingress.run(&l, &allowed);
        assert_eq!(out, rewritten(&allowed, Side::Destination, backend()));

        // With `--deny-action reset`: the RST from the frontend.
        let l = guarded6(Settings {
            deny_action: DenyAction::Reset,
            ..Settings::default()
        });
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &stranger);
        let answered = match ingress {
            Ingress::Tc => super::TC_ACT_REDIRECT,
            Ingress::Xdp => 3,
        };
        assert_eq!(verdict, answered, "{ingress:?}: sent back");
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("denied", 1), ("denied_reset", 1)]
        );
        assert_eq!(out.len(), RESET6_FRAME_LEN, "Ethernet, IPv6 and TCP only");
        assert_eq!(out[..6], stranger[6..12], "to the sender's MAC");
        assert!(
            tcp_checksum_verifies(&out),
            "the checksum verifies from scratch"
        );
        assert_eq!(out[ETH_HLEN + 7], RESET_TTL);
        let tcp = ipv6::classify(&out).expect("a TCP frame");
        assert_eq!(ipv6::endpoint(&out, tcp, Side::Source), frontend());
        let to = ipv6::endpoint(&out, tcp, Side::Destination);
        assert_eq!((to.ip6(), to.port()), (STRANGER, 40_000));
        let seg = ipv6::segment(&out, tcp);
        assert_eq!(
            (seg.flags, seg.ack),
            (TCP_RST | TCP_ACK, CLIENT_ISN + 1),
            "acknowledging the SYN"
        );
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_icmpv6_error_sent_to_the_pod_itself_passes_only_within_its_connection() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load6();
        handshake(&l, ingress);
        // About the pod's own reply, addressed to the pod's address.
        let sent = reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER);
        let inside = Icmp6Error::packet_too_big(ROUTER, BACKEND, 1280, sent.clone()).build();
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &inside);
        assert_eq!(
            (verdict, &out),
            (pass_verdict(ingress), &inside),
            "{ingress:?}"
        );
        assert_eq!(delta(&before, &counters(&l)), vec![("not_tcp", 1)]);
        let outside = Icmp6Error::packet_too_big(
            ROUTER,
            BACKEND,
            1280,
            Frame6 {
                seq: SERVER_ISN + 1_000_000,
                ..sent
            },
        )
        .build();
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &outside);
        assert_eq!(
            verdict,
            ingress.dropped(),
            "{ingress:?}: a blind attacker's"
        );
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("icmp_out_of_window", 1)]
        );
    });
}
