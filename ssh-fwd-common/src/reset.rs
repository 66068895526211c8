//! The RST a denied segment is answered with (`--deny-action reset`), as a
//! pure function of the segment: what a closed port answers (RFC 9293,
//! 3.10.7.1), from the frontend to the client, with both checksums summed
//! from scratch. The kernel programs write these 40 bytes over the
//! segment's IPv4 and TCP headers, swap the MAC addresses and cut the frame
//! to [`RESET_FRAME_LEN`]: the answer is never larger than what it answers.
//! An IPv6 segment gets [`headers6`], 60 bytes over its IPv6 and TCP
//! headers, cut to [`RESET6_FRAME_LEN`].

use crate::{
    csum,
    ipv6::{IPV6_HLEN, NEXTHDR_TCP, pseudo_seed6},
    maps::{Endpoint, Endpoint6},
    packet::{ETH_HLEN, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_MIN_LEN, TCP_CHECK_OFF, TCP_MIN_LEN},
    tcp::{Segment, TCP_ACK, TCP_RST},
};

/// The IPv4 and TCP headers of a reset: no IPv4 options, no TCP options,
/// no payload.
pub const RESET_HEADERS_LEN: usize = IPV4_MIN_LEN + TCP_MIN_LEN;
/// A reset's whole frame: Ethernet, IPv4, TCP.
pub const RESET_FRAME_LEN: usize = ETH_HLEN + RESET_HEADERS_LEN;
/// The IPv6 and TCP headers of a reset: no extension headers, no TCP
/// options, no payload.
pub const RESET6_HEADERS_LEN: usize = IPV6_HLEN + TCP_MIN_LEN;
/// An IPv6 reset's whole frame: Ethernet, IPv6, TCP.
pub const RESET6_FRAME_LEN: usize = ETH_HLEN + RESET6_HEADERS_LEN;

/// The TTL (or hop limit) a reset leaves with, as a host's own packet
/// would.
pub const RESET_TTL: u8 = 64;

/// The sequence fields and flags of a reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reset {
    pub flags: u8,
    /// Host order.
    pub seq: u32,
    /// Host order; 0 without ACK.
    pub ack: u32,
}

/// The reset that answers `seg`, or `None` for a RST, which is never
/// answered. A segment with ACK gets `<SEQ=SEG.ACK><CTL=RST>`; one without
/// (a SYN) gets `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`, where SYN and
/// FIN count one each.
#[inline(always)]
pub const fn reset_for(seg: &Segment) -> Option<Reset> {
    if seg.has(TCP_RST) {
        return None;
    }
    if seg.has(TCP_ACK) {
        return Some(Reset {
            flags: TCP_RST,
            seq: seg.ack,
            ack: 0,
        });
    }
    Some(Reset {
        flags: TCP_RST | TCP_ACK,
        seq: 0,
        ack: seg.end(),
    })
}

/// The IPv4 and TCP headers of `reset` sent `from` the frontend `to` the
/// client, checksums included. The IPv4 identification is 0 with DF set,
/// as for any atomic datagram (RFC 6864); the window is 0.
#[inline(always)]
pub fn headers(from: Endpoint, to: Endpoint, reset: Reset) -> [u8; RESET_HEADERS_LEN] {
    let mut h = [0u8; RESET_HEADERS_LEN];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(RESET_HEADERS_LEN as u16).to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = RESET_TTL;
    h[9] = IPPROTO_TCP;
    h[12..16].copy_from_slice(&from.addr.to_ne_bytes());
    h[16..20].copy_from_slice(&to.addr.to_ne_bytes());
    let t = IPV4_MIN_LEN;
    h[t..t + 2].copy_from_slice(&from.port.to_ne_bytes());
    h[t + 2..t + 4].copy_from_slice(&to.port.to_ne_bytes());
    h[t + 4..t + 8].copy_from_slice(&reset.seq.to_be_bytes());
    h[t + 8..t + 12].copy_from_slice(&reset.ack.to_be_bytes());
    h[t + 12] = ((TCP_MIN_LEN / 4) as u8) << 4;
    h[t + 13] = reset.flags;
    let ip_check = !csum::fold(sum_words(&h, 0, IPV4_MIN_LEN));
    h[IPV4_CHECK_OFF..IPV4_CHECK_OFF + 2].copy_from_slice(&ip_check.to_ne_bytes());
    let tcp_check = !csum::fold(pseudo_seed(from, to) as u32 + sum_words(&h, t, TCP_MIN_LEN));
    h[t + TCP_CHECK_OFF..t + TCP_CHECK_OFF + 2].copy_from_slice(&tcp_check.to_ne_bytes());
    h
}

/// The reset's pseudo-header sum (folded, not complemented): what its TCP
/// checksum field holds while the checksum is still to be completed by the
/// device (CHECKSUM_PARTIAL).
#[inline(always)]
pub const fn pseudo_seed(from: Endpoint, to: Endpoint) -> u16 {
    csum::pseudo_seed(from.addr, to.addr, IPPROTO_TCP, TCP_MIN_LEN as u16)
}

/// The raw 16-bit words of `h[start..start + len]`, summed (no fold: at
/// most 10 words, far from overflow). A fixed count the verifier sees
/// unrolled.
/// [`headers`] for IPv6: the IPv6 header (no flow label, hop limit
/// [`RESET_TTL`]) and the TCP header with its checksum over the IPv6
/// pseudo-header.
#[inline(always)]
pub fn headers6(from: Endpoint6, to: Endpoint6, reset: Reset) -> [u8; RESET6_HEADERS_LEN] {
    let mut h = [0u8; RESET6_HEADERS_LEN];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(TCP_MIN_LEN as u16).to_be_bytes());
    h[6] = NEXTHDR_TCP;
    h[7] = RESET_TTL;
    h[8..24].copy_from_slice(&from.addr.octets());
    h[24..40].copy_from_slice(&to.addr.octets());
    let t = IPV6_HLEN;
    h[t..t + 2].copy_from_slice(&from.port.to_ne_bytes());
    h[t + 2..t + 4].copy_from_slice(&to.port.to_ne_bytes());
    h[t + 4..t + 8].copy_from_slice(&reset.seq.to_be_bytes());
    h[t + 8..t + 12].copy_from_slice(&reset.ack.to_be_bytes());
    h[t + 12] = ((TCP_MIN_LEN / 4) as u8) << 4;
    h[t + 13] = reset.flags;
    let tcp_check =
        !csum::fold(pseudo_seed6_reset(from, to) as u32 + sum_words(&h, t, TCP_MIN_LEN));
    h[t + TCP_CHECK_OFF..t + TCP_CHECK_OFF + 2].copy_from_slice(&tcp_check.to_ne_bytes());
    h
}

/// The pseudo-header sum of an IPv6 reset: what its checksum field holds
/// when a device is to complete it.
#[inline(always)]
pub const fn pseudo_seed6_reset(from: Endpoint6, to: Endpoint6) -> u16 {
    pseudo_seed6(from.addr, to.addr, TCP_MIN_LEN as u16)
}

#[inline(always)]
fn sum_words(h: &[u8], start: usize, len: usize) -> u32 {
    let mut sum = 0u32;
    let mut i = 0;
    while i < len {
        sum += u16::from_ne_bytes([h[start + i], h[start + i + 1]]) as u32;
        i += 2;
    }
    sum
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixtures::reference_checksum as verify;
    use crate::tcp::{TCP_FIN, TCP_SYN};
    use core::net::Ipv4Addr;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    const FRONTEND: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
    const CLIENT: Endpoint = Endpoint::new(Ipv4Addr::new(203, 0, 113, 9), 40_000);

    fn segment(flags: u8, seq: u32, ack: u32, payload: u32) -> Segment {
        Segment {
            flags,
            seq,
            ack,
            payload,
        }
    }

    #[test]
    fn a_syn_is_answered_with_rst_ack_acknowledging_the_syn_and_its_payload() {
        let r = reset_for(&segment(TCP_SYN, 1000, 77, 0)).unwrap();
        assert_eq!(
            r,
            Reset {
                flags: TCP_RST | TCP_ACK,
                seq: 0,
                ack: 1001
            }
        );
        let r = reset_for(&segment(TCP_SYN, 1000, 0, 12)).unwrap();
        assert_eq!(r.ack, 1013, "payload counted");
        let r = reset_for(&segment(TCP_SYN | TCP_FIN, u32::MAX, 0, 0)).unwrap();
        assert_eq!(r.ack, 1, "SYN and FIN count one each, wrapping");
    }

    #[test]
    fn a_segment_with_ack_is_answered_at_its_ack_number_without_ack() {
        let r = reset_for(&segment(TCP_ACK, 1000, 5555, 40)).unwrap();
        assert_eq!(
            r,
            Reset {
                flags: TCP_RST,
                seq: 5555,
                ack: 0
            }
        );
        let fin = reset_for(&segment(TCP_FIN | TCP_ACK, 1, 9, 0)).unwrap();
        assert_eq!(fin.seq, 9);
    }

    #[test]
    fn a_rst_is_never_answered() {
        assert_eq!(reset_for(&segment(TCP_RST, 1, 0, 0)), None);
        assert_eq!(reset_for(&segment(TCP_RST | TCP_ACK, 1, 2, 0)), None);
    }

    #[test]
    fn headers_swap_the_ends_and_carry_valid_checksums_for_random_segments() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..10_000 {
            let from = Endpoint::new(Ipv4Addr::from(rng.random::<u32>()), rng.random());
            let to = Endpoint::new(Ipv4Addr::from(rng.random::<u32>()), rng.random());
            let seg = segment(
                rng.random::<u8>() & !TCP_RST,
                rng.random(),
                rng.random(),
                rng.random_range(0..1500),
            );
            let reset = reset_for(&seg).unwrap();
            let h = headers(from, to, reset);
            let (ip, tcp) = h.split_at(IPV4_MIN_LEN);
            assert_eq!(verify(ip), 0, "IPv4 header checksum");
            let mut pseudo = std::vec::Vec::new();
            pseudo.extend_from_slice(&from.ip().octets());
            pseudo.extend_from_slice(&to.ip().octets());
            pseudo.extend_from_slice(&[0, IPPROTO_TCP, 0, TCP_MIN_LEN as u8]);
            pseudo.extend_from_slice(tcp);
            assert_eq!(verify(&pseudo), 0, "TCP checksum with the pseudo-header");
            assert_eq!(&ip[..4], &[0x45, 0, 0, 40]);
            assert_eq!((ip[8], ip[9]), (RESET_TTL, IPPROTO_TCP));
            assert_eq!(ip[12..16], from.ip().octets());
            assert_eq!(ip[16..20], to.ip().octets());
            assert_eq!(u16::from_be_bytes([tcp[0], tcp[1]]), from.port());
            assert_eq!(u16::from_be_bytes([tcp[2], tcp[3]]), to.port());
            assert_eq!(u32::from_be_bytes(tcp[4..8].try_into().unwrap()), reset.seq);
            assert_eq!(
                u32::from_be_bytes(tcp[8..12].try_into().unwrap()),
                reset.ack
            );
            assert_eq!((tcp[12], tcp[13]), (0x50, reset.flags));
            assert_eq!(tcp[14..16], [0, 0], "window");
            assert_eq!(tcp[18..20], [0, 0], "urgent pointer");
        }
    }

    #[test]
    fn ipv6_headers_swap_the_ends_and_carry_a_valid_checksum_for_random_segments() {
        use crate::fixtures6::pseudo_header;
        use core::net::Ipv6Addr;
        let mut rng = StdRng::seed_from_u64(0x5eed6);
        for _ in 0..10_000 {
            let from = Endpoint6::new6(Ipv6Addr::from(rng.random::<u128>()), rng.random());
            let to = Endpoint6::new6(Ipv6Addr::from(rng.random::<u128>()), rng.random());
            let seg = segment(
                rng.random::<u8>() & !TCP_RST,
                rng.random(),
                rng.random(),
                rng.random_range(0..1500),
            );
            let reset = reset_for(&seg).unwrap();
            let h = headers6(from, to, reset);
            let (ip, tcp) = h.split_at(IPV6_HLEN);
            let mut all =
                pseudo_header(from.ip6(), to.ip6(), NEXTHDR_TCP, TCP_MIN_LEN as u32).to_vec();
            all.extend_from_slice(tcp);
            assert_eq!(verify(&all), 0, "TCP checksum with the IPv6 pseudo-header");
            assert_eq!(&ip[..8], &[0x60, 0, 0, 0, 0, 20, NEXTHDR_TCP, RESET_TTL]);
            assert_eq!(ip[8..24], from.ip6().octets());
            assert_eq!(ip[24..40], to.ip6().octets());
            assert_eq!(u16::from_be_bytes([tcp[0], tcp[1]]), from.port());
            assert_eq!(u16::from_be_bytes([tcp[2], tcp[3]]), to.port());
            assert_eq!(u32::from_be_bytes(tcp[4..8].try_into().unwrap()), reset.seq);
            assert_eq!((tcp[12], tcp[13]), (0x50, reset.flags));
        }
        // A field holding only the pseudo-header sum completes to it.
        let reset = reset_for(&segment(TCP_SYN, 42, 0, 0)).unwrap();
        let from = Endpoint6::new6("2001:db8::10".parse().unwrap(), 8022);
        let to = Endpoint6::new6("2001:db8:1::2".parse().unwrap(), 40_000);
        let h = headers6(from, to, reset);
        let mut partial = h;
        partial[IPV6_HLEN + TCP_CHECK_OFF..IPV6_HLEN + TCP_CHECK_OFF + 2]
            .copy_from_slice(&pseudo_seed6_reset(from, to).to_ne_bytes());
        let mut sum = 0u32;
        for pair in partial[IPV6_HLEN..].chunks(2) {
            sum += u32::from(u16::from_ne_bytes([pair[0], pair[1]]));
        }
        assert_eq!(
            !csum::fold(sum),
            u16::from_ne_bytes([
                h[IPV6_HLEN + TCP_CHECK_OFF],
                h[IPV6_HLEN + TCP_CHECK_OFF + 1]
            ]),
            "completing the pseudo-header sum over the segment gives the checksum"
        );
    }

    #[test]
    fn the_pseudo_seed_completes_to_the_checksum_the_headers_carry() {
        let reset = reset_for(&segment(TCP_SYN, 42, 0, 0)).unwrap();
        let h = headers(FRONTEND, CLIENT, reset);
        // What a device does with a CHECKSUM_PARTIAL segment: sum it with
        // the seed in the checksum field, and store the complement.
        let mut tcp = [0u8; TCP_MIN_LEN];
        tcp.copy_from_slice(&h[IPV4_MIN_LEN..]);
        tcp[TCP_CHECK_OFF..TCP_CHECK_OFF + 2]
            .copy_from_slice(&pseudo_seed(FRONTEND, CLIENT).to_ne_bytes());
        let completed = csum::checksum(&tcp, 0);
        let carried = u16::from_ne_bytes([h[IPV4_MIN_LEN + 16], h[IPV4_MIN_LEN + 17]]);
        assert!(
            csum::same(completed, carried),
            "{completed:#x} {carried:#x}"
        );
    }
}
