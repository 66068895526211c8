//! ICMP errors of forwarded connections through the real programs, byte for
//! byte against `ssh_fwd_common::icmp`'s host reference.

use std::net::Ipv4Addr;

use ssh_fwd::datapath::object::PROG_EGRESS_TC;
use ssh_fwd_common::{
    conntrack::TCP_SYN,
    fixtures::{Frame, IcmpError},
    icmp::{self, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, Quoted},
    maps::Endpoint,
    packet::IPV4_MIN_LEN,
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, TC_ACT_UNSPEC,
    conntrack::{BACKEND, BANNER, CLIENT, Ingress, SERVER_ISN, frontend, handshake, request},
    counters, delta, load, own, test_run_tc,
};

const ROUTER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const SHARED: (&str, &str, &str) = ("second", "198.18.0.10:9022", "10.244.1.5:22");

fn backend() -> Endpoint {
    Endpoint::new(BACKEND, 22)
}

/// A router's "fragmentation needed" to `to` about the packet `about`.
fn frag_needed_error(to: Ipv4Addr, about: Frame, quote_len: usize) -> IcmpError {
    IcmpError {
        src: ROUTER,
        dst: to,
        icmp_type: ICMP_DEST_UNREACH,
        code: ICMP_FRAG_NEEDED,
        mtu: 1280,
        about,
        quote_len,
    }
}

fn frag_needed(to: Ipv4Addr, about: Frame, quote_len: usize) -> Vec<u8> {
    frag_needed_error(to, about, quote_len).build()
}

/// A 1400-byte reply from `from` to the client, the first data the server
/// sends after its banner.
fn reply_about(from: Endpoint) -> Frame {
    Frame {
        src: from.ip(),
        sport: from.port(),
        dst: CLIENT,
        dport: 40_000,
        seq: AFTER_BANNER,
        payload: vec![1; 1400],
        ..Frame::default()
    }
}

/// The server's next sequence number after the handshake's banner.
const AFTER_BANNER: u32 = SERVER_ISN + 1 + BANNER as u32;

fn request_about(to: Endpoint) -> Frame {
    Frame {
        src: CLIENT,
        sport: 40_000,
        dst: to.ip(),
        dport: to.port(),
        payload: vec![2; 1400],
        ..Frame::default()
    }
}

/// The host reference of a translation.
fn translated(frame: &[u8], which: Quoted, to: Endpoint) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let q = icmp::parse(&expected, IPV4_MIN_LEN).expect("quotes TCP");
    icmp::translate(&mut expected, &q, which, to);
    expected
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_error_addressed_to_a_frontend_reaches_the_backend_translated() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB]);
        handshake(&l, ingress, 8022);
        for quote_len in [IPV4_MIN_LEN + 8, 576] {
            let frame = frag_needed(frontend(8022).ip(), reply_about(frontend(8022)), quote_len);
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &frame);
            assert_eq!(
                out,
                translated(&frame, Quoted::Source, backend()),
                "{ingress:?}, quote of {quote_len}"
            );
            assert_eq!(delta(&before, &counters(&l)), vec![("icmp_translated", 1)]);
        }
        // About a frontend that is not ours: untouched.
        let other = Endpoint::new(frontend(8022).ip(), 8099);
        let frame = frag_needed(other.ip(), reply_about(other), 576);
        assert_eq!(ingress.run(&l, &frame).1, frame, "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_error_about_a_request_names_the_frontend_and_never_the_pod() {
    privilege::require();
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let about_backend = |quote_len| IcmpError {
        src: node,
        ..frag_needed_error(CLIENT, request_about(backend()), quote_len)
    };
    // A backend behind one frontend: its frontend, with or without state.
    let l = load(&[JOB]);
    let frame = about_backend(576).build();
    let (verdict, out) = test_run_tc(&l, PROG_EGRESS_TC, &frame);
    assert_eq!(verdict, TC_ACT_UNSPEC);
    assert_eq!(out, translated(&frame, Quoted::Destination, frontend(8022)));
    // A backend behind two: the frontend of the connection, from its state.
    let l = load(&[JOB, SHARED]);
    handshake(&l, Ingress::Tc, 9022);
    let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &frame);
    assert_eq!(out, translated(&frame, Quoted::Destination, frontend(9022)));
    // Without state the frontend is unknown: dropped, not leaked.
    let stranger = IcmpError {
        about: Frame {
            sport: 41_000,
            ..request_about(backend())
        },
        ..about_backend(576)
    }
    .build();
    let before = counters(&l);
    let (verdict, _) = test_run_tc(&l, PROG_EGRESS_TC, &stranger);
    assert_eq!(verdict, 2, "TC_ACT_SHOT");
    assert_eq!(delta(&before, &counters(&l)), vec![("icmp_dropped", 1)]);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_spoofed_syn_neither_blocks_an_error_for_the_pod_nor_renames_one_for_the_client() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        // The receiving node of a connection to a pod elsewhere: it never
        // sees a reply, so it holds no established entry for it. An
        // off-path sender's SYN from the client's 4-tuple through the other
        // frontend makes the half-open entry name that frontend.
        let l = load(&[JOB, SHARED]);
        ingress.run(&l, &request(9022, TCP_SYN, 555, 0, 0));
        // A router's "fragmentation needed" about the reply from the
        // frontend the client uses still reaches the pod.
        let frame = frag_needed(frontend(8022).ip(), reply_about(frontend(8022)), 576);
        let (_, out) = ingress.run(&l, &frame);
        assert_eq!(
            out,
            translated(&frame, Quoted::Source, backend()),
            "{ingress:?}"
        );
        // The node's own error about a data segment of the client's never
        // names the spoofed frontend: it cannot know the right one, so it
        // drops it (no pod address reaches the client either).
        let node = Ipv4Addr::new(192, 0, 2, 1);
        let about_data = IcmpError {
            src: node,
            ..frag_needed_error(CLIENT, request_about(backend()), 576)
        }
        .build();
        let before = counters(&l);
        let (verdict, _) = test_run_tc(&l, PROG_EGRESS_TC, &about_data);
        assert_eq!(verdict, 2, "{ingress:?}: TC_ACT_SHOT");
        assert_eq!(delta(&before, &counters(&l)), vec![("icmp_dropped", 1)]);
        // About the SYN that made the entry, its frontend is known.
        let about_syn = IcmpError {
            src: node,
            about: Frame {
                seq: 555,
                tcp_flags: TCP_SYN,
                payload: vec![],
                ..request_about(backend())
            },
            ..frag_needed_error(CLIENT, request_about(backend()), 576)
        }
        .build();
        let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &about_syn);
        assert_eq!(
            out,
            translated(&about_syn, Quoted::Destination, frontend(9022))
        );
        // An established connection through the other frontend still
        // refuses an error about this one.
        let l = load(&[JOB, SHARED]);
        handshake(&l, ingress, 9022);
        assert_eq!(ingress.run(&l, &frame).1, frame, "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_error_into_a_pod_quoting_a_sequence_number_its_server_did_not_send_is_dropped() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB]);
        handshake(&l, ingress, 8022);
        // The server has sent up to AFTER_BANNER; an error quoting a
        // segment beyond it, or far behind it, is no error of its.
        for seq in [
            AFTER_BANNER + 1_400,
            AFTER_BANNER.wrapping_sub((1 << 30) + 1),
        ] {
            let about = Frame {
                seq,
                ..reply_about(frontend(8022))
            };
            let frame = frag_needed(frontend(8022).ip(), about, 576);
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &frame);
            assert_eq!(verdict, ingress_drop(ingress), "{ingress:?} seq {seq}");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![("icmp_out_of_window", 1)],
                "{ingress:?}"
            );
        }
        // The pod's node tracks no connection for this client port: dropped.
        let stranger = Frame {
            dport: 41_000,
            ..reply_about(frontend(8022))
        };
        let frame = frag_needed(frontend(8022).ip(), stranger, 576);
        let (verdict, _) = ingress.run(&l, &frame);
        assert_eq!(verdict, ingress_drop(ingress), "{ingress:?}: untracked");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn on_the_pods_node_an_error_another_node_translated_reaches_the_pod_only_within_the_window() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB]);
        handshake(&l, ingress, 8022);
        own(&l, BACKEND);
        // Node A translated it already: addressed to the pod, quoting the
        // pod's reply.
        let within = frag_needed(BACKEND, reply_about(backend()), 576);
        let before = counters(&l);
        let (_, out) = ingress.run(&l, &within);
        assert_eq!(out, within, "{ingress:?}: passed on untouched");
        assert_eq!(delta(&before, &counters(&l)), vec![("not_tcp", 1)]);
        let beyond = frag_needed(
            BACKEND,
            Frame {
                seq: AFTER_BANNER + 5_000,
                ..reply_about(backend())
            },
            576,
        );
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &beyond);
        assert_eq!(verdict, ingress_drop(ingress), "{ingress:?}");
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("icmp_out_of_window", 1)]
        );
    }
}

fn ingress_drop(ingress: Ingress) -> u32 {
    match ingress {
        Ingress::Tc => 2,
        Ingress::Xdp => 1,
    }
}
