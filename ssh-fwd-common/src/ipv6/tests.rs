extern crate std;

use core::net::Ipv6Addr;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::{vec, vec::Vec};

use super::*;
use crate::fixtures::reference_checksum as verify;
use crate::fixtures6::{Extension, Frame6, pseudo_header};

mod icmp;
mod walk;

/// The Internet checksum of the `next_header` message at `l4_off` of an
/// IPv6 `frame` (to its end), summed from scratch with its pseudo-header
/// over the frame's own addresses: 0 if the message's checksum verifies.
fn upper_checksum(frame: &[u8], l4_off: usize, next_header: u8) -> u16 {
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&frame[at..at + 16]).unwrap());
    let l4 = &frame[l4_off..];
    let mut all = pseudo_header(
        addr(ETH_HLEN + IPV6_SADDR_OFF),
        addr(ETH_HLEN + IPV6_DADDR_OFF),
        next_header,
        l4.len() as u32,
    )
    .to_vec();
    all.extend_from_slice(l4);
    verify(&all)
}

/// Whether the TCP checksum of an IPv6 `frame` whose TCP header is at
/// `l4_off` verifies.
fn tcp_checksum_verifies(frame: &[u8], l4_off: usize) -> bool {
    upper_checksum(frame, l4_off, NEXTHDR_TCP) == 0
}

fn random_addr(rng: &mut StdRng) -> Ipv6Addr {
    Ipv6Addr::from(rng.random::<u128>())
}

/// 0 to 4 extension headers in RFC 8200's order (Hop-by-Hop only first),
/// each a random multiple of 8 bytes, together at most `budget` bytes.
fn random_extensions(rng: &mut StdRng, budget: usize) -> Vec<Extension> {
    let count = rng.random_range(0..=IPV6_MAX_EXT_HEADERS);
    let mut left = budget;
    let mut out = Vec::new();
    for i in 0..count {
        let units = rng.random_range(1..=(left / 8).clamp(1, 12));
        let ext = match rng.random_range(0..3) {
            0 if i == 0 => Extension::hop_by_hop(units * 8),
            1 => Extension::routing((units - 1) / 2, 0),
            _ => Extension::destination(units * 8),
        };
        if ext.wire_len() > left {
            break;
        }
        left -= ext.wire_len();
        out.push(ext);
    }
    out
}

fn random_frame(rng: &mut StdRng) -> Frame6 {
    Frame6 {
        src: random_addr(rng),
        dst: random_addr(rng),
        sport: rng.random(),
        dport: rng.random(),
        payload: (0..rng.random_range(0..1400))
            .map(|_| rng.random())
            .collect(),
        extensions: random_extensions(rng, IPV6_MAX_EXT_LEN),
        tcp_flags: rng.random(),
        seq: rng.random(),
        ack: rng.random(),
        ..Frame6::default()
    }
}

#[test]
fn the_pseudo_header_sum_is_rfc_8200s_layout_summed() {
    let mut rng = StdRng::seed_from_u64(0x6_8200);
    for _ in 0..10_000 {
        let (src, dst) = (random_addr(&mut rng), random_addr(&mut rng));
        let len: u32 = if rng.random() {
            rng.random()
        } else {
            rng.random_range(0..70_000)
        };
        let next_header = rng.random();
        let sum = pseudo_header_sum(src.octets(), dst.octets(), len, next_header);
        // Raw words against big-endian ones: the same bytes on the wire.
        assert_eq!(
            (!csum::fold(sum)).to_ne_bytes(),
            verify(&pseudo_header(src, dst, next_header, len)).to_be_bytes(),
            "{src} {dst} {len} {next_header}"
        );
    }
}

#[test]
fn an_address_diff_moves_a_checksum_as_a_recomputation_does() {
    let mut rng = StdRng::seed_from_u64(0xadd7);
    for _ in 0..10_000 {
        let mut data: Vec<u8> = (0..rng.random_range(8..40) * 2)
            .map(|_| rng.random())
            .collect();
        let (old, new) = (random_addr(&mut rng), random_addr(&mut rng));
        let seed = |a: Ipv6Addr| pseudo_header(a, Ipv6Addr::LOCALHOST, NEXTHDR_TCP, 99);
        let check = |a: Ipv6Addr, data: &[u8]| verify(&[&seed(a)[..], data].concat());
        data[0..2].copy_from_slice(&[0, 0]);
        let before = check(old, &data);
        // `verify` sums big-endian words, `apply` raw ones.
        let before = u16::from_ne_bytes(before.to_be_bytes());
        let after = csum::apply(before, address_diff(old.octets(), new.octets()));
        data[0..2].copy_from_slice(&after.to_ne_bytes());
        assert_eq!(check(new, &data), 0, "{old} -> {new}");
    }
    assert_eq!(address_diff([7; 16], [7; 16]) % 0xffff, 0, "no change");
}

#[test]
fn a_plain_segment_has_tcp_right_after_the_fixed_header() {
    let frame = Frame6::default().build();
    let tcp = classify(&frame).unwrap();
    assert_eq!(
        tcp,
        Ipv6TcpFrame {
            l4_off: 54,
            l4_len: 20
        }
    );
    assert!(tcp_checksum_verifies(&frame, tcp.l4_off));
    let dst = endpoint(&frame, tcp, Side::Destination);
    assert_eq!((dst.ip6(), dst.port()), (Frame6::default().dst, 8022));
    let src = endpoint(&frame, tcp, Side::Source);
    assert_eq!((src.ip6(), src.port()), (Frame6::default().src, 40_000));
}

#[test]
fn the_walk_finds_tcp_after_zero_to_four_extension_headers_of_random_lengths() {
    let mut rng = StdRng::seed_from_u64(0x3a1c);
    let mut counts = [0; IPV6_MAX_EXT_HEADERS + 1];
    for round in 0..10_000 {
        let frame = random_frame(&mut rng);
        counts[frame.extensions.len()] += 1;
        let bytes = frame.build();
        let tcp = classify(&bytes).unwrap_or_else(|r| panic!("round {round}: {r:?} {frame:?}"));
        let headers: usize = frame.extensions.iter().map(Extension::wire_len).sum();
        assert_eq!(tcp.l4_off, 54 + headers, "round {round}");
        assert_eq!(tcp.l4_len, 20 + frame.payload.len(), "round {round}");
        let seg = segment(&bytes, tcp);
        assert_eq!(
            (seg.flags, seg.seq, seg.ack, seg.payload as usize),
            (frame.tcp_flags, frame.seq, frame.ack, frame.payload.len())
        );
        assert_eq!(endpoint(&bytes, tcp, Side::Source).port(), frame.sport);
    }
    assert!(
        counts.iter().all(|&n| n > 500),
        "every count seen: {counts:?}"
    );
}

#[test]
fn extension_headers_at_the_length_limit_are_walked_and_past_it_passed() {
    let at_limit = vec![
        Extension::hop_by_hop(8),
        Extension::routing(14, 0),
        Extension::destination(IPV6_MAX_EXT_LEN - 8 - 232),
    ];
    let frame = |extensions| Frame6 {
        extensions,
        ..Frame6::default()
    };
    let bytes = frame(at_limit.clone()).build();
    assert_eq!(classify(&bytes).unwrap().l4_off, 54 + IPV6_MAX_EXT_LEN);
    let mut over = at_limit;
    over[2] = Extension::destination(IPV6_MAX_EXT_LEN - 8 - 232 + 8);
    let bytes = frame(over).build();
    assert_eq!(classify(&bytes), Err(PassReason::ExtensionsTooLong));
    let one_long = frame(vec![Extension::hop_by_hop(2048)]).build();
    assert_eq!(classify(&one_long), Err(PassReason::ExtensionsTooLong));
}

#[test]
fn five_or_more_extension_headers_are_too_many() {
    for count in 5..8 {
        let mut extensions = vec![Extension::hop_by_hop(8)];
        extensions.extend((1..count).map(|_| Extension::destination(8)));
        let frame = Frame6 {
            extensions,
            ..Frame6::default()
        }
        .build();
        assert_eq!(classify(&frame), Err(PassReason::TooManyExtensions));
    }
}

/// A default frame with `before` extension headers, then `last`.
fn after_extensions(before: usize, last: Extension) -> Vec<u8> {
    let mut extensions: Vec<_> = (0..before).map(|_| Extension::destination(16)).collect();
    extensions.push(last);
    Frame6 {
        extensions,
        payload: vec![1; 30],
        ..Frame6::default()
    }
    .build()
}

#[test]
fn fragments_ah_esp_and_no_next_header_are_passed_with_their_reason() {
    for before in 0..IPV6_MAX_EXT_HEADERS {
        let cases = [
            (Extension::fragment(0, true), PassReason::Fragment),
            (Extension::fragment(185, true), PassReason::Fragment),
            (Extension::fragment(185, false), PassReason::Fragment),
            (Extension::fragment(0, false), PassReason::Fragment),
            (Extension::auth(), PassReason::Authenticated),
            (Extension::esp(), PassReason::Encrypted),
            (Extension::routing(2, 1), PassReason::NotFinalDestination),
        ];
        for (last, reason) in cases {
            let frame = after_extensions(before, last.clone());
            assert_eq!(classify(&frame), Err(reason), "{before} before {last:?}");
        }
    }
    for before in 0..=IPV6_MAX_EXT_HEADERS {
        let mut extensions: Vec<_> = (0..before).map(|_| Extension::destination(8)).collect();
        let no_next = |extensions| Frame6 {
            extensions,
            protocol: NEXTHDR_NONE,
            ..Frame6::default()
        };
        assert_eq!(
            classify(&no_next(extensions.clone()).build()),
            Err(PassReason::NoNextHeader),
            "{before} before"
        );
        extensions.push(Extension::routing(1, 0));
        let too_many = if before == IPV6_MAX_EXT_HEADERS {
            PassReason::TooManyExtensions
        } else {
            PassReason::NoNextHeader
        };
        assert_eq!(classify(&no_next(extensions).build()), Err(too_many));
    }
}

#[test]
fn other_transports_and_icmpv6_are_not_tcp_and_not_ipv6_is_not_ipv6() {
    for protocol in [17, 135, 139, NEXTHDR_ICMPV6] {
        let frame = Frame6 {
            protocol,
            extensions: vec![Extension::destination(8)],
            payload: vec![0; 24],
            ..Frame6::default()
        }
        .build();
        assert_eq!(classify(&frame), Err(PassReason::NotTcp), "{protocol}");
    }
    let icmp = Frame6 {
        protocol: NEXTHDR_ICMPV6,
        payload: vec![0; 24],
        ..Frame6::default()
    }
    .build();
    let located = locate(&icmp).unwrap();
    assert_eq!((located.protocol, located.l4_off), (Upper::Icmpv6, 54));
    let mut ipv4 = Frame6::default().build();
    ipv4[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    assert_eq!(classify(&ipv4), Err(PassReason::NotIpv6));
}

#[test]
fn a_wrong_version_or_a_late_hop_by_hop_header_is_malformed() {
    let mut frame = Frame6::default().build();
    frame[ETH_HLEN] = 0x40;
    assert_eq!(classify(&frame), Err(PassReason::Malformed));
    let late = Frame6 {
        extensions: vec![Extension::destination(8), Extension::hop_by_hop(8)],
        ..Frame6::default()
    }
    .build();
    assert_eq!(classify(&late), Err(PassReason::Malformed));
}

#[test]
fn every_cut_of_a_frame_is_truncated() {
    let mut rng = StdRng::seed_from_u64(0xc07);
    for _ in 0..200 {
        let frame = random_frame(&mut rng).build();
        assert!(classify(&frame).is_ok());
        for len in 0..frame.len() {
            assert_eq!(classify(&frame[..len]), Err(PassReason::Truncated), "{len}");
        }
    }
}

#[test]
fn a_payload_length_shorter_than_the_headers_is_truncated() {
    let frame = Frame6 {
        extensions: vec![Extension::hop_by_hop(8), Extension::destination(24)],
        payload: vec![5; 64],
        ..Frame6::default()
    }
    .build();
    for payload_len in [0u16, 4, 8, 20, 32, 32 + 19] {
        let mut cut = frame.clone();
        cut[ETH_HLEN + 4..ETH_HLEN + 6].copy_from_slice(&payload_len.to_be_bytes());
        assert_eq!(classify(&cut), Err(PassReason::Truncated), "{payload_len}");
    }
}

#[test]
fn a_big_tcp_packet_takes_its_payload_length_from_the_frame() {
    assert_eq!(ipv6_payload_len(1500u16.to_be(), 100_000), 1500);
    assert_eq!(ipv6_payload_len(0, ETH_HLEN + IPV6_HLEN + 100_000), 100_000);
    assert_eq!(ipv6_payload_len(0, ETH_HLEN + IPV6_HLEN + 65_535), 0);
    let mut frame = Frame6 {
        payload: vec![3; 70_000],
        ..Frame6::default()
    }
    .build();
    frame[ETH_HLEN + 4..ETH_HLEN + 6].copy_from_slice(&[0, 0]);
    let tcp = classify(&frame).unwrap();
    assert_eq!(segment(&frame, tcp).payload, 70_000);
}

#[test]
fn rewrite_gives_the_checksum_a_from_scratch_build_has_for_10_000_random_segments() {
    let mut rng = StdRng::seed_from_u64(0x6_6666);
    for round in 0..10_000 {
        let frame = random_frame(&mut rng);
        let mut bytes = frame.build();
        let tcp = classify(&bytes).unwrap();
        let side = if rng.random() {
            Side::Destination
        } else {
            Side::Source
        };
        let to = Endpoint6::new6(random_addr(&mut rng), rng.random());
        rewrite(&mut bytes, tcp, side, to);
        assert_eq!(endpoint(&bytes, tcp, side), to);
        assert!(tcp_checksum_verifies(&bytes, tcp.l4_off), "round {round}");

        let mut expected = match side {
            Side::Destination => Frame6 {
                dst: to.ip6(),
                dport: to.port(),
                ..frame
            },
            Side::Source => Frame6 {
                src: to.ip6(),
                sport: to.port(),
                ..frame
            },
        }
        .build();
        // The same number, though perhaps as the other zero (RFC 1624).
        let check = tcp.l4_off + TCP_CHECK_OFF..tcp.l4_off + TCP_CHECK_OFF + 2;
        let word = |f: &[u8]| u16::from_ne_bytes(f[check.clone()].try_into().unwrap());
        assert!(csum::same(word(&bytes), word(&expected)), "round {round}");
        expected[check.clone()].copy_from_slice(&bytes[check.clone()]);
        assert_eq!(bytes, expected, "round {round}");
    }
}

#[test]
fn the_pseudo_seed_from_raw_words_is_the_pseudo_header_sum() {
    let mut rng = StdRng::seed_from_u64(6);
    for _ in 0..1000 {
        let (src, dst) = (random_addr(&mut rng), random_addr(&mut rng));
        let len: u16 = rng.random_range(20..=u16::MAX);
        let bytes = pseudo_header(src, dst, NEXTHDR_TCP, u32::from(len));
        // The folded sum of the pseudo-header alone (the complement of its
        // checksum), as raw bytes: the reference reads words big-endian.
        let expected = (!verify(&bytes)).to_be();
        let seed = pseudo_seed6(Addr6::new(src), Addr6::new(dst), len);
        assert!(csum::same(seed, expected), "{src} -> {dst}, {len} bytes");
    }
}

#[test]
fn every_pass_reason_has_its_counter() {
    use PassReason::*;
    assert_eq!(pass_outcome(NotIpv6), Outcome::PassNotIp);
    assert_eq!(pass_outcome(NotTcp), Outcome::PassNotTcp);
    assert_eq!(pass_outcome(Fragment), Outcome::PassFragment);
    for r in [
        Authenticated,
        Encrypted,
        NoNextHeader,
        NotFinalDestination,
        TooManyExtensions,
        ExtensionsTooLong,
    ] {
        assert_eq!(pass_outcome(r), Outcome::PassIpv6Extensions, "{r:?}");
    }
    assert_eq!(pass_outcome(Truncated), Outcome::Malformed);
    assert_eq!(pass_outcome(Malformed), Outcome::Malformed);
}

#[test]
fn a_forwarded_packet_loses_one_hop_and_one_about_to_expire_stays() {
    for hop in [0, 1] {
        assert_eq!(forwarded_hop_word(u16::from_ne_bytes([6, hop])), None);
    }
    assert_eq!(
        forwarded_hop_word(u16::from_ne_bytes([6, 64])),
        Some(u16::from_ne_bytes([6, 63]))
    );
}

#[test]
fn the_words_diff_is_the_address_diff() {
    let mut rng = StdRng::seed_from_u64(16);
    for _ in 0..1000 {
        let (old, new) = (random_addr(&mut rng), random_addr(&mut rng));
        let check: u16 = rng.random();
        let words = words_diff(Addr6::new(old), Addr6::new(new));
        let bytes = address_diff(old.octets(), new.octets());
        assert_eq!(csum::apply(check, words), csum::apply(check, bytes));
    }
}
