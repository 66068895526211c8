extern crate std;

use core::net::Ipv4Addr;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;
use crate::{
    fixtures::{Frame, IcmpError},
    packet::{IPPROTO_ICMP, IPV4_MIN_LEN},
};

const ROUTER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const FRONTEND: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
const BACKEND: Endpoint = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);

fn frag_needed(to: Ipv4Addr, about: Frame, quote_len: usize) -> IcmpError {
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

fn reply(from: Endpoint) -> Frame {
    Frame {
        src: from.ip(),
        sport: from.port(),
        dst: CLIENT,
        dport: 40_000,
        payload: std::vec![9; 100],
        ..Frame::default()
    }
}

fn request(to: Endpoint) -> Frame {
    Frame {
        src: CLIENT,
        sport: 40_000,
        dst: to.ip(),
        dport: to.port(),
        payload: std::vec![7; 100],
        ..Frame::default()
    }
}

#[test]
fn an_inbound_error_about_a_reply_becomes_one_about_the_backend_byte_for_byte() {
    for quote_len in [IPV4_MIN_LEN + 8, IPV4_MIN_LEN + 18, 1_000] {
        let mut frame = frag_needed(FRONTEND.ip(), reply(FRONTEND), quote_len).build();
        let q = parse(&frame, IPV4_MIN_LEN).expect("an error quoting TCP");
        assert_eq!((q.source, q.destination.ip()), (FRONTEND, CLIENT));
        assert_eq!(q.has_tcp_check, quote_len >= IPV4_MIN_LEN + 18);
        translate(&mut frame, &q, Quoted::Source, BACKEND);
        let expected = frag_needed(BACKEND.ip(), reply(BACKEND), quote_len).build();
        assert_eq!(frame, expected, "quote of {quote_len} bytes");
    }
}

#[test]
fn an_outbound_error_about_a_request_names_the_frontend_byte_for_byte() {
    for quote_len in [IPV4_MIN_LEN + 8, 576] {
        let node = Ipv4Addr::new(192, 0, 2, 1);
        let about = |to| IcmpError {
            src: node,
            ..frag_needed(CLIENT, request(to), quote_len)
        };
        let mut frame = about(BACKEND).build();
        let q = parse(&frame, IPV4_MIN_LEN).expect("quotes TCP");
        assert_eq!(q.destination, BACKEND);
        translate(&mut frame, &q, Quoted::Destination, FRONTEND);
        assert_eq!(frame, about(FRONTEND).build(), "quote of {quote_len} bytes");
    }
}

#[test]
fn translation_keeps_every_checksum_valid_on_random_packets() {
    let mut rng = StdRng::seed_from_u64(0x1c4d);
    for round in 0..2_000 {
        let from = Endpoint::new(Ipv4Addr::from(rng.random::<u32>()), rng.random());
        let to = Endpoint::new(Ipv4Addr::from(rng.random::<u32>()), rng.random());
        let options = (0..rng.random_range(0..=4usize) * 4).map(|_| 1).collect();
        let about = Frame {
            src: from.ip(),
            sport: from.port(),
            dst: Ipv4Addr::from(rng.random::<u32>()),
            dport: rng.random(),
            payload: (0..rng.random_range(0..600))
                .map(|_| rng.random())
                .collect(),
            ip_options: options,
            ..Frame::default()
        };
        let quote_len = rng.random_range(IPV4_MIN_LEN + 40 + 8..700);
        let mut frame = frag_needed(from.ip(), about.clone(), quote_len).build();
        let q = parse(&frame, IPV4_MIN_LEN).expect("quotes TCP");
        translate(&mut frame, &q, Quoted::Source, to);
        let expected = frag_needed(
            to.ip(),
            Frame {
                src: to.ip(),
                sport: to.port(),
                ..about
            },
            quote_len,
        )
        .build();
        assert_eq!(frame, expected, "round {round}");
    }
}

#[test]
fn only_errors_that_quote_tcp_are_taken() {
    let echo = IcmpError {
        icmp_type: 8,
        code: 0,
        ..frag_needed(FRONTEND.ip(), reply(FRONTEND), 100)
    }
    .build();
    assert_eq!(parse(&echo, IPV4_MIN_LEN), None);
    let udp = frag_needed(
        FRONTEND.ip(),
        Frame {
            protocol: 17,
            ..reply(FRONTEND)
        },
        100,
    )
    .build();
    assert_eq!(parse(&udp, IPV4_MIN_LEN), None);
    let cut = frag_needed(FRONTEND.ip(), reply(FRONTEND), IPV4_MIN_LEN + 2).build();
    assert_eq!(parse(&cut, IPV4_MIN_LEN), None, "too short for the ports");
    let time_exceeded = IcmpError {
        icmp_type: ICMP_TIME_EXCEEDED,
        code: 0,
        ..frag_needed(FRONTEND.ip(), reply(FRONTEND), 100)
    }
    .build();
    assert!(parse(&time_exceeded, IPV4_MIN_LEN).is_some());
    assert_eq!(time_exceeded[14 + 9], IPPROTO_ICMP);
}

fn conn_via(frontend: Endpoint) -> Conn {
    Conn {
        frontend,
        ..Conn::ZERO
    }
}

fn half_via(frontend: Endpoint, client_isn: u32) -> HalfOpen {
    HalfOpen {
        frontend,
        client_isn,
        ..HalfOpen::ZERO
    }
}

const OTHER: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 9022);

#[test]
fn an_inbound_error_reaches_the_pod_only_about_what_its_server_sent() {
    let conn = Conn {
        server_next: 50_000,
        ..conn_via(FRONTEND)
    };
    let verdict = |c: Option<&Conn>, seq, local| inbound_verdict(c, FRONTEND, seq, local);
    assert_eq!(verdict(Some(&conn), Some(48_552), true), Inbound::Deliver);
    assert_eq!(verdict(Some(&conn), Some(50_001), true), Inbound::Drop);
    assert_eq!(verdict(Some(&conn), Some(7), true), Inbound::Deliver);
    assert_eq!(
        verdict(
            Some(&conn),
            Some(50_000u32.wrapping_sub((1 << 30) + 1)),
            true
        ),
        Inbound::Drop
    );
    assert_eq!(
        verdict(Some(&conn), None, true),
        Inbound::Drop,
        "no sequence"
    );
    // No connection on the pod's node: nothing to deliver to.
    assert_eq!(verdict(None, Some(1), true), Inbound::Drop);
    // A node whose backend is elsewhere translates; that node checks.
    assert_eq!(verdict(None, Some(1), false), Inbound::Deliver);
    assert!(to_backend_allowed(Some(&conn), Some(49_000)));
    assert!(!to_backend_allowed(Some(&conn), Some(60_000)));
    assert!(!to_backend_allowed::<u32>(None, Some(49_000)));
}

#[test]
fn only_an_established_connection_of_another_frontend_leaves_an_inbound_error_alone() {
    let other = Conn {
        server_next: 100,
        ..conn_via(OTHER)
    };
    assert_eq!(
        inbound_verdict(Some(&other), FRONTEND, Some(100), true),
        Inbound::NotOurs
    );
    let closed = Conn {
        flags: crate::maps::CONN_FIN_CLIENT | crate::maps::CONN_FIN_SERVER,
        ..other
    };
    assert_eq!(
        inbound_verdict(Some(&closed), FRONTEND, Some(100), true),
        Inbound::Deliver,
        "its 4-tuple is free"
    );
}

#[test]
fn an_outbound_error_names_a_frontend_only_an_off_path_sender_cannot_have_swapped() {
    let single = NatTarget {
        endpoint: FRONTEND,
        slot: 0,
        flags: 0,
    };
    let shared = NatTarget {
        flags: FLAG_SHARED_BACKEND,
        ..single
    };
    // The established entry decides, whatever the half-open one says.
    let spoofed = half_via(OTHER, 555);
    assert_eq!(
        outbound_frontend(Some(&conn_via(FRONTEND)), Some(&spoofed), 7, &shared),
        Some(FRONTEND)
    );
    // The half-open entry only about the SYN that made it.
    assert_eq!(
        outbound_frontend(None, Some(&spoofed), 555, &shared),
        Some(OTHER)
    );
    assert_eq!(
        outbound_frontend(None, Some(&spoofed), 1_000, &shared),
        None
    );
    assert_eq!(
        outbound_frontend(None, Some(&spoofed), 1_000, &single),
        Some(FRONTEND)
    );
    assert_eq!(outbound_frontend(None, None, 1_000, &shared), None);
}
