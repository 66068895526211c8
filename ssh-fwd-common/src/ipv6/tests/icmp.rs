use super::*;
use crate::{
    fixtures6::Icmp6Error,
    icmp::Quoted,
    ipv6::icmp::{
        ICMPV6_CHECK_OFF, ICMPV6_PKT_TOOBIG, ICMPV6_TIME_EXCEED, Quote, is_error, parse, translate,
    },
    maps::Endpoint6,
};

const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const FRONTEND: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
const BACKEND: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x244, 1, 0, 0, 0, 5);
/// Where the ICMPv6 header of a built error is.
const ICMP_OFF: usize = ETH_HLEN + IPV6_HLEN;
/// Where its quote is.
const QUOTE_OFF: usize = ICMP_OFF + 8;

fn reply(from: Endpoint6) -> Frame6 {
    Frame6 {
        src: from.ip6(),
        sport: from.port(),
        dst: CLIENT,
        dport: 40_000,
        seq: 0xdead_beef,
        payload: vec![9; 1400],
        ..Frame6::default()
    }
}

fn too_big(to: Ipv6Addr, about: Frame6) -> Icmp6Error {
    Icmp6Error::packet_too_big(ROUTER, to, 1280, about)
}

/// The Internet checksum of the ICMPv6 message in `frame`, built by
/// [`Icmp6Error::build`], summed from scratch with its pseudo-header over
/// the frame's own outer addresses: 0 if the message's checksum verifies.
fn icmp_checksum(frame: &[u8]) -> u16 {
    upper_checksum(frame, ICMP_OFF, NEXTHDR_ICMPV6)
}

#[test]
fn a_packet_too_big_quote_gives_the_quoted_ends_and_as_much_as_it_reaches() {
    let frontend = Endpoint6::new6(FRONTEND, 8022);
    let about = reply(frontend);
    for (quote_len, seq, check) in [
        (IPV6_HLEN + 4, None, false),
        (IPV6_HLEN + 8, Some(0xdead_beef), false),
        (IPV6_HLEN + 17, Some(0xdead_beef), false),
        (IPV6_HLEN + 18, Some(0xdead_beef), true),
        (1232, Some(0xdead_beef), true),
    ] {
        let error = Icmp6Error {
            quote_len,
            ..too_big(FRONTEND, about.clone())
        };
        let frame = error.build();
        assert_eq!(icmp_checksum(&frame), 0);
        let located = locate(&frame).unwrap();
        assert_eq!(
            (located.protocol, located.l4_off),
            (Upper::Icmpv6, ICMP_OFF)
        );
        let q = parse(&frame, located.l4_off).expect("quotes TCP");
        assert_eq!(
            q,
            Quote {
                icmp: ICMP_OFF,
                ip: QUOTE_OFF,
                tcp: QUOTE_OFF + IPV6_HLEN,
                source: frontend,
                destination: Endpoint6::new6(CLIENT, 40_000),
                seq,
                has_tcp_check: check,
            },
            "quote of {quote_len}"
        );
    }
}

#[test]
fn only_errors_quoting_tcp_far_enough_for_the_ports_are_parsed() {
    let about = reply(Endpoint6::new6(FRONTEND, 8022));
    let with = |f: fn(&mut Icmp6Error)| {
        let mut error = too_big(FRONTEND, about.clone());
        f(&mut error);
        error.build()
    };
    let echo_request = with(|e| e.icmp_type = 128);
    assert_eq!(parse(&echo_request, ICMP_OFF), None);
    let short = with(|e| e.quote_len = IPV6_HLEN + 3);
    assert_eq!(parse(&short, ICMP_OFF), None);
    let udp = with(|e| e.about.protocol = 17);
    assert_eq!(parse(&udp, ICMP_OFF), None);
    let fragment = with(|e| e.about.extensions = vec![Extension::fragment(0, true)]);
    assert_eq!(parse(&fragment, ICMP_OFF), None);
    let cut_in_extensions = with(|e| {
        e.about.extensions = vec![Extension::hop_by_hop(8), Extension::destination(8)];
        e.quote_len = IPV6_HLEN + 8 + 2;
    });
    assert_eq!(parse(&cut_in_extensions, ICMP_OFF), None);
    let time_exceeded = with(|e| e.icmp_type = ICMPV6_TIME_EXCEED);
    assert!(parse(&time_exceeded, ICMP_OFF).is_some());
    for icmp_type in 0..=u8::MAX {
        assert_eq!(is_error(icmp_type), (1..=3).contains(&icmp_type));
    }
    assert_eq!(ICMPV6_PKT_TOOBIG, 2);
}

#[test]
fn an_inbound_error_about_a_reply_becomes_one_about_the_backend_byte_for_byte() {
    let (frontend, backend) = (
        Endpoint6::new6(FRONTEND, 8022),
        Endpoint6::new6(BACKEND, 22),
    );
    for quote_len in [IPV6_HLEN + 8, IPV6_HLEN + 18, 1232] {
        let error = |to, about| Icmp6Error {
            quote_len,
            ..too_big(to, about)
        };
        let mut frame = error(FRONTEND, reply(frontend)).build();
        let q = parse(&frame, ICMP_OFF).unwrap();
        translate(&mut frame, &q, Quoted::Source, backend);
        assert_eq!(frame, error(BACKEND, reply(backend)).build(), "{quote_len}");
    }
}

/// The translated frame equals `expected` but for the checksums, which
/// must be the same one's complement numbers (RFC 1624: an incremental
/// update may give the other zero).
fn assert_same_but_zeros(mut frame: Vec<u8>, expected: &[u8], q: &Quote, round: usize) {
    let mut at = vec![q.icmp + ICMPV6_CHECK_OFF];
    if q.has_tcp_check {
        at.push(q.tcp + TCP_CHECK_OFF);
    }
    for at in at {
        let word = |f: &[u8]| u16::from_ne_bytes([f[at], f[at + 1]]);
        assert!(
            csum::same(word(&frame), word(expected)),
            "round {round}: checksum at {at}"
        );
        frame[at..at + 2].copy_from_slice(&expected[at..at + 2]);
    }
    assert_eq!(frame, expected, "round {round}");
}

/// A quote cut inside the TCP checksum keeps its one quoted byte as it
/// was (the new one depends on the byte cut off): `expected` with that
/// byte from `original` and its ICMPv6 checksum summed anew.
fn with_the_cut_checksum_byte_kept(expected: &mut [u8], original: &[u8], q: &Quote) {
    let at = q.tcp + TCP_CHECK_OFF;
    if expected.len() != at + 1 {
        return;
    }
    expected[at] = original[at];
    let check = ICMP_OFF + ICMPV6_CHECK_OFF;
    expected[check..check + 2].copy_from_slice(&[0, 0]);
    let sum = icmp_checksum(expected);
    expected[check..check + 2].copy_from_slice(&sum.to_be_bytes());
}

#[test]
fn translation_keeps_the_icmpv6_checksum_equal_to_one_from_scratch_on_random_errors() {
    let mut rng = StdRng::seed_from_u64(0x1c6d);
    for round in 0..5_000 {
        let mut about = random_frame(&mut rng);
        // A Packet Too Big quotes what fits 1280 bytes; the rest is cut.
        about.payload.resize(rng.random_range(0..1500), 0x77);
        let to = Endpoint6::new6(random_addr(&mut rng), rng.random());
        let which = if rng.random() {
            Quoted::Source
        } else {
            Quoted::Destination
        };
        let (outer_to, sender) = (random_addr(&mut rng), random_addr(&mut rng));
        let headers = about.l4_off() - ETH_HLEN;
        let error = Icmp6Error {
            quote_len: rng.random_range(headers + 4..1300),
            ..Icmp6Error::packet_too_big(sender, outer_to, 1280, about.clone())
        };
        let original = error.build();
        let mut frame = original.clone();
        let q = parse(&frame, ICMP_OFF).expect("quotes TCP");
        assert_eq!(q.tcp, QUOTE_OFF + headers, "round {round}");
        translate(&mut frame, &q, which, to);
        assert_eq!(icmp_checksum(&frame), 0, "round {round}");
        let mut expected = match which {
            Quoted::Source => Icmp6Error {
                dst: to.ip6(),
                about: Frame6 {
                    src: to.ip6(),
                    sport: to.port(),
                    ..about
                },
                ..error
            },
            Quoted::Destination => Icmp6Error {
                about: Frame6 {
                    dst: to.ip6(),
                    dport: to.port(),
                    ..about
                },
                ..error
            },
        }
        .build();
        with_the_cut_checksum_byte_kept(&mut expected, &original, &q);
        assert_same_but_zeros(frame, &expected, &q, round);
    }
}
