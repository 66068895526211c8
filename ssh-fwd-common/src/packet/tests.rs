extern crate std;

use core::net::Ipv4Addr;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::vec;

use super::*;
use crate::fixtures::{Frame, checksums_verify};

#[test]
fn plain_tcp_frame_classifies_with_l4_after_20_byte_header() {
    let f = Frame::default().build();
    assert_eq!(classify(&f), Ok(TcpFrame { l4_off: 34 }));
    assert!(checksums_verify(&f));
}

#[test]
fn ip_options_move_the_tcp_header() {
    let f = Frame {
        ip_options: vec![0x94, 0x04, 0, 0, 1, 1, 1, 1], // router alert + NOPs
        ..Frame::default()
    }
    .build();
    assert_eq!(classify(&f), Ok(TcpFrame { l4_off: 42 }));
    let tcp = classify(&f).unwrap();
    assert_eq!(endpoint(&f, tcp, Side::Destination).port(), 8022);
}

#[test]
fn non_tcp_fragments_short_and_non_ipv4_frames_are_passed_with_their_outcome() {
    let udp = Frame {
        protocol: 17,
        ..Frame::default()
    }
    .build();
    assert_eq!(classify(&udp), Err(Outcome::PassNotTcp));
    let first_fragment = Frame {
        frag: 0x2000,
        ..Frame::default()
    }
    .build();
    assert_eq!(classify(&first_fragment), Err(Outcome::PassFragment));
    let later_fragment = Frame {
        frag: 0x0010,
        ..Frame::default()
    }
    .build();
    assert_eq!(classify(&later_fragment), Err(Outcome::PassFragment));
    let full = Frame::default().build();
    assert_eq!(classify(&full[..13]), Err(Outcome::Malformed));
    assert_eq!(classify(&full[..33]), Err(Outcome::Malformed));
    assert_eq!(classify(&full[..53]), Err(Outcome::Malformed));
    let mut ipv6 = full.clone();
    ipv6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert_eq!(classify(&ipv6), Err(Outcome::PassNotIp));
    let mut bad_ihl = full.clone();
    bad_ihl[14] = 0x44;
    assert_eq!(classify(&bad_ihl), Err(Outcome::Malformed));
    let mut options_past_end = Frame {
        ip_options: vec![1; 40],
        ..Frame::default()
    }
    .build();
    options_past_end.truncate(14 + 60 + 10);
    assert_eq!(classify(&options_past_end), Err(Outcome::Malformed));
}

#[test]
fn rewrite_keeps_checksums_valid_on_many_random_frames() {
    let mut rng = StdRng::seed_from_u64(0x5353_4846);
    for round in 0..5_000 {
        let options_len = rng.random_range(0..=10usize) * 4;
        let frame = Frame {
            src: Ipv4Addr::from(rng.random::<u32>()),
            dst: Ipv4Addr::from(rng.random::<u32>()),
            sport: rng.random(),
            dport: rng.random(),
            payload: (0..rng.random_range(0..1500))
                .map(|_| rng.random())
                .collect(),
            ip_options: (0..options_len).map(|_| 1).collect(),
            ..Frame::default()
        };
        let mut bytes = frame.build();
        let tcp = classify(&bytes).unwrap();
        let side = if round % 2 == 0 {
            Side::Destination
        } else {
            Side::Source
        };
        let to = Endpoint::new(Ipv4Addr::from(rng.random::<u32>()), rng.random());
        rewrite(&mut bytes, tcp, side, to);
        assert_eq!(endpoint(&bytes, tcp, side), to);
        assert!(
            checksums_verify(&bytes),
            "round {round}: {frame:?} -> {to:?}"
        );

        // And the result is byte-identical to building the rewritten frame anew.
        let expected = match side {
            Side::Destination => Frame {
                dst: to.ip(),
                dport: to.port(),
                ..frame
            },
            Side::Source => Frame {
                src: to.ip(),
                sport: to.port(),
                ..frame
            },
        }
        .build();
        assert_eq!(bytes, expected, "round {round}");
    }
}

#[test]
fn forwarding_decrements_ttl_and_sets_next_hop_macs_like_a_fresh_frame() {
    let (src_mac, dst_mac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 5]);
    for ttl in [2u8, 64, 255] {
        let frame = Frame {
            ttl,
            ..Frame::default()
        };
        let mut bytes = frame.build();
        assert!(forward(&mut bytes, src_mac, dst_mac));
        assert!(checksums_verify(&bytes), "ttl {ttl}");
        let mut expected = Frame {
            ttl: ttl - 1,
            ..frame
        }
        .build();
        expected[..6].copy_from_slice(&dst_mac);
        expected[6..12].copy_from_slice(&src_mac);
        assert_eq!(bytes, expected, "ttl {ttl}");
    }
}

#[test]
fn a_ttl_that_would_expire_is_left_to_the_stack() {
    for ttl in [0u8, 1] {
        let mut bytes = Frame {
            ttl,
            ..Frame::default()
        }
        .build();
        let before = bytes.clone();
        assert!(!forward(&mut bytes, [0; 6], [0; 6]));
        assert_eq!(bytes, before);
        assert_eq!(forwarded_ttl_word(u16::from_ne_bytes([ttl, 6])), None);
    }
    assert_eq!(
        forwarded_ttl_word(u16::from_ne_bytes([64, 6])),
        Some(u16::from_ne_bytes([63, 6]))
    );
}

#[test]
fn a_big_tcp_packet_takes_its_length_from_the_frame() {
    let frame_len = ETH_HLEN + 100_000;
    assert_eq!(ipv4_total_len(1500u16.to_be(), frame_len), Some(1500));
    assert_eq!(ipv4_total_len(0, frame_len), Some(100_000));
    // A total length of 0 in anything 64 KiB or smaller is malformed.
    assert_eq!(ipv4_total_len(0, ETH_HLEN + 65_535), None);
    assert_eq!(tcp_payload_of(100_000, 20, 8 << 4), 100_000 - 52);
}
