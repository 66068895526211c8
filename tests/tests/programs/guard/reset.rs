//! `--deny-action reset` on crafted packets: a denied segment comes back as
//! a RST from the frontend (XDP_TX in XDP, a redirect in tc), parsed here
//! field by field with both checksums summed from scratch; a denied RST is
//! dropped unanswered; with `drop`, or for an allowed source, nothing
//! changes.

use ssh_fwd::datapath::object::{DenyAction, Settings};
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN},
    csum,
    fixtures::{Frame, checksums_verify},
    packet::{self, ETH_HLEN, Side},
    reset::{RESET_FRAME_LEN, RESET_TTL},
};

use super::{
    super::{
        TC_ACT_REDIRECT,
        conntrack::{CLIENT, CLIENT_ISN, Ingress, each_ingress, entries, frontend},
        counters, delta,
    },
    STRANGER, allow, guarded_with, job_counters, passed, syn,
};

const XDP_TX: u32 = 3;

fn reset_settings() -> Settings {
    Settings {
        deny_action: DenyAction::Reset,
        ..Settings::default()
    }
}

fn answered(ingress: Ingress) -> u32 {
    match ingress {
        Ingress::Tc => TC_ACT_REDIRECT,
        Ingress::Xdp => XDP_TX,
    }
}

/// Checks `out` is the RST from the frontend on 8022 to `STRANGER`:40000
/// that answers `sent`, with `flags`, `seq` and `ack`.
fn assert_reset(out: &[u8], sent: &[u8], flags: u8, seq: u32, ack: u32) {
    assert_eq!(out.len(), RESET_FRAME_LEN, "Ethernet, IPv4 and TCP only");
    assert_eq!(out[..6], sent[6..12], "to the sender's MAC");
    assert_eq!(out[6..12], sent[..6], "from the MAC it was sent to");
    assert!(checksums_verify(out), "both checksums verify from scratch");
    let tcp = packet::classify(out).expect("a TCP frame");
    assert_eq!(tcp.l4_off, ETH_HLEN + 20, "no IPv4 options");
    assert_eq!(out[ETH_HLEN + 2..ETH_HLEN + 4], [0, 40], "total length");
    assert_eq!(out[ETH_HLEN + 8], RESET_TTL);
    assert_eq!(out[tcp.l4_off + 12], 0x50, "no TCP options");
    let from = packet::endpoint(out, tcp, Side::Source);
    let to = packet::endpoint(out, tcp, Side::Destination);
    assert_eq!((from.ip(), from.port()), (frontend(8022).ip(), 8022));
    assert_eq!((to.ip(), to.port()), (STRANGER, 40_000));
    let seg = packet::segment(out, tcp);
    assert_eq!(
        (seg.flags, seg.seq, seg.ack, seg.payload),
        (flags, seq, ack, 0)
    );
}

/// A segment from `STRANGER`:40000 to the guarded job.
fn from_stranger(flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    Frame {
        src: STRANGER,
        sport: 40_000,
        dport: 8022,
        tcp_flags: flags,
        seq,
        ack,
        payload: payload.to_vec(),
        ..Frame::default()
    }
    .build()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_denied_syn_is_answered_with_a_rst_ack_and_an_allowed_one_is_forwarded() {
    ssh_fwd_tests::privilege::require();
    each_ingress(|ingress| {
        let l = guarded_with(allow(&["192.0.2.0/24"], false), reset_settings());
        let before = counters(&l);
        let sent = syn(STRANGER, 40_000, 8022);
        let (verdict, out) = ingress.run(&l, &sent);
        assert_eq!(verdict, answered(ingress), "{ingress:?}");
        assert_reset(&out, &sent, TCP_RST | TCP_ACK, 0, CLIENT_ISN + 1);
        assert_eq!(
            delta(&before, &counters(&l)),
            [("denied", 1), ("denied_reset", 1)],
            "{ingress:?}"
        );
        assert_eq!(job_counters(&l), (1, 0), "{ingress:?}: per mapping");
        assert!(entries(&l).is_empty(), "{ingress:?}: nothing written");
        let (verdict, out) = ingress.run(&l, &syn(CLIENT, 40_000, 8022));
        assert!(
            passed(ingress, verdict) && verdict != answered(ingress),
            "{ingress:?}"
        );
        assert_eq!(out.len(), sent.len(), "{ingress:?}: the allowed SYN whole");
        assert_eq!(entries(&l).len(), 1, "{ingress:?}: and tracked");
    });
}

/// A SYN with IPv4 options, TCP options (MSS, SACK permitted, window
/// scale) and a payload: the RST has none, and acknowledges the payload.
fn syn_with_options_and_payload() -> Vec<u8> {
    let tcp_options = [2, 4, 0x05, 0xb4, 4, 2, 3, 3, 7, 1, 1, 1];
    let data = b"early data";
    let mut frame = Frame {
        ip_options: vec![1, 1, 1, 1],
        ..Frame::default()
    };
    frame.payload = [&tcp_options[..], data].concat();
    frame = Frame {
        src: STRANGER,
        sport: 40_000,
        tcp_flags: TCP_SYN | TCP_FIN,
        seq: CLIENT_ISN,
        ack: 0,
        ..frame
    };
    let mut bytes = frame.build();
    // The first 12 bytes of the payload become options.
    let l4 = ETH_HLEN + 24;
    bytes[l4 + 12] = (5 + 3) << 4;
    bytes[l4 + 16..l4 + 18].fill(0);
    let seed = csum::pseudo_header_sum(
        STRANGER.octets(),
        frontend(8022).ip().octets(),
        6,
        (bytes.len() - l4) as u16,
    );
    let check = csum::checksum(&bytes[l4..], seed);
    bytes[l4 + 16..l4 + 18].copy_from_slice(&check.to_ne_bytes());
    assert!(checksums_verify(&bytes));
    assert_eq!(
        packet::segment(&bytes, packet::classify(&bytes).expect("TCP")).payload,
        10
    );
    bytes
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_with_options_and_payload_is_answered_by_a_bare_rst_acknowledging_all_of_it() {
    ssh_fwd_tests::privilege::require();
    each_ingress(|ingress| {
        let l = guarded_with(allow(&["192.0.2.0/24"], false), reset_settings());
        let sent = syn_with_options_and_payload();
        let (verdict, out) = ingress.run(&l, &sent);
        assert_eq!(verdict, answered(ingress), "{ingress:?}");
        // SYN 1, ten bytes, FIN 1.
        assert_reset(&out, &sent, TCP_RST | TCP_ACK, 0, CLIENT_ISN + 12);
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_enforced_segment_with_ack_is_answered_at_its_ack_and_a_rst_never_is() {
    ssh_fwd_tests::privilege::require();
    each_ingress(|ingress| {
        let l = guarded_with(allow(&["192.0.2.0/24"], true), reset_settings());
        let sent = from_stranger(TCP_ACK | 0x08, 5_000, 777_777, b"data");
        let (verdict, out) = ingress.run(&l, &sent);
        assert_eq!(verdict, answered(ingress), "{ingress:?}");
        assert_reset(&out, &sent, TCP_RST, 777_777, 0);
        for flags in [TCP_RST, TCP_RST | TCP_ACK] {
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &from_stranger(flags, 5_000, 777_777, b""));
            assert_eq!(verdict, ingress.dropped(), "{ingress:?}: {flags:#x}");
            assert_eq!(
                delta(&before, &counters(&l)),
                [("denied", 1)],
                "{ingress:?}"
            );
        }
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_drop_a_denied_syn_is_dropped_unanswered() {
    ssh_fwd_tests::privilege::require();
    each_ingress(|ingress| {
        let l = guarded_with(allow(&["192.0.2.0/24"], false), Settings::default());
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &syn(STRANGER, 40_000, 8022));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(delta(&before, &counters(&l)), [("denied", 1)]);
    });
}
