//! The frontend option of [`crate::ipopt`] over IPv6, where a SYN carries
//! it in a Destination Options header of its own. IPv6 has no room in its
//! fixed header, and a Destination Options header right after it is one a
//! router forwards without looking at (RFC 8200 4.1), as it does an IPv4
//! option.
//!
//! ```text
//! next header | length 2 (plain, 24 bytes) or 3 (sealed, 32 bytes)
//! type 0x1e   | data length 18 (plain) or 26 (sealed)
//! frontend address (16 bytes), frontend port (2 bytes)
//! sealed only: tag (8 bytes), SipHash-2-4 under the cluster's key
//! PadN (type 1, length 0)
//! ```
//!
//! Option type 0x1e is RFC 4727's experimental one whose two high bits
//! tell a node that does not know it to skip it, and whose third says no
//! router changes it. The header goes only on a SYN with no extension
//! headers of its own: right after the fixed header is where the kernel's
//! "adjust room at the network layer" inserts bytes, and a Hop-by-Hop
//! header would have to stay first. The node that reads it removes it
//! again, so the pod sees the SYN as the client sent it. Trust is decided
//! as for IPv4 (`conntrack::trust::option_trusted`); the tag binds the
//! IPv6 connection, its SYN and the frontend.

use super::Carried;
use crate::{
    csum,
    maps::{Addr6, Endpoint6},
    siphash::{Key, siphash24_words},
};
#[cfg(any(test, feature = "fixtures"))]
use crate::{
    ipv6::{IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_PAYLOAD_LEN_OFF, NEXTHDR_DEST},
    packet::ETH_HLEN,
};

pub const FRONTEND_OPTION_TYPE6: u8 = 0x1e;
/// The plain form's Destination Options header, in bytes.
pub const PLAIN_LEN6: usize = 24;
/// The sealed form's Destination Options header, in bytes.
pub const SEALED_LEN6: usize = 32;
/// The option's data length in each form: address, port (and tag).
const PLAIN_DATA: u8 = 18;
const SEALED_DATA: u8 = 26;
/// PadN with no data: the two bytes that end either form on a multiple of 8.
const PAD_N: [u8; 2] = [1, 0];

/// The header's 32-bit words as they lie in the packet, `next` naming the
/// header after it: 6 of a plain one, 8 of a sealed one (the last 2 zero
/// for a plain one).
#[inline(always)]
pub const fn words6(next: u8, c: &Carried<Addr6>) -> [u32; 8] {
    let [a, b] = c.frontend.port.to_ne_bytes();
    let [w1, w2, w3, w4] = c.frontend.addr.0;
    if c.is_sealed() {
        let t = c.tag.to_be_bytes();
        [
            u32::from_ne_bytes([next, 3, FRONTEND_OPTION_TYPE6, SEALED_DATA]),
            w1,
            w2,
            w3,
            w4,
            u32::from_ne_bytes([a, b, t[0], t[1]]),
            u32::from_ne_bytes([t[2], t[3], t[4], t[5]]),
            u32::from_ne_bytes([t[6], t[7], PAD_N[0], PAD_N[1]]),
        ]
    } else {
        [
            u32::from_ne_bytes([next, 2, FRONTEND_OPTION_TYPE6, PLAIN_DATA]),
            w1,
            w2,
            w3,
            w4,
            u32::from_ne_bytes([a, b, PAD_N[0], PAD_N[1]]),
            0,
            0,
        ]
    }
}

/// The length of the header that starts with `head` (its first four
/// bytes: next header, length, option type and data length), if it is
/// ours.
#[inline(always)]
pub const fn len_of6(head: [u8; 4]) -> Option<usize> {
    if head[2] != FRONTEND_OPTION_TYPE6 {
        return None;
    }
    match (head[1], head[3]) {
        (2, PLAIN_DATA) => Some(PLAIN_LEN6),
        (3, SEALED_DATA) => Some(SEALED_LEN6),
        _ => None,
    }
}

/// The header in its bytes (`SEALED_LEN6` of them, of which a plain one
/// uses the first 24), if it is ours: the header after it and the option.
#[inline(always)]
pub const fn read6(bytes: [u8; SEALED_LEN6]) -> Option<(u8, Carried<Addr6>)> {
    let Some(len) = len_of6([bytes[0], bytes[1], bytes[2], bytes[3]]) else {
        return None;
    };
    if bytes[len - 2] != PAD_N[0] || bytes[len - 1] != PAD_N[1] {
        return None;
    }
    let frontend = Endpoint6 {
        addr: Addr6([
            word_at(&bytes, 4),
            word_at(&bytes, 8),
            word_at(&bytes, 12),
            word_at(&bytes, 16),
        ]),
        port: u16::from_ne_bytes([bytes[20], bytes[21]]),
        _pad: [0; 3],
    };
    let tag = if len == SEALED_LEN6 {
        u64::from_be_bytes([
            bytes[22], bytes[23], bytes[24], bytes[25], bytes[26], bytes[27], bytes[28], bytes[29],
        ])
    } else {
        0
    };
    Some((bytes[0], Carried { frontend, len, tag }))
}

#[inline(always)]
const fn word_at(bytes: &[u8; SEALED_LEN6], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The tag of the sealed header of the SYN `client -> backend` with the
/// sequence number `isn`, naming `frontend` (as [`super::tag`], over IPv6
/// endpoints).
#[inline(always)]
pub const fn tag6(
    key: Key,
    client: Endpoint6,
    backend: Endpoint6,
    isn: u32,
    frontend: Endpoint6,
) -> u64 {
    // Another domain than IPv4's: the two never seal the same words.
    const DOMAIN: u64 = 0x1e60;
    let [c0, c1] = pair(client.addr);
    let [b0, b1] = pair(backend.addr);
    let [f0, f1] = pair(frontend.addr);
    siphash24_words(
        key,
        [
            c0,
            c1,
            b0,
            b1,
            ((isn as u64) << 32) | ((client.port as u64) << 16) | backend.port as u64,
            f0,
            f1,
            ((frontend.port as u64) << 16) | DOMAIN,
        ],
    )
}

/// An IPv6 address as two words for the hash.
#[inline(always)]
const fn pair(a: Addr6) -> [u64; 2] {
    [
        ((a.0[0] as u64) << 32) | a.0[1] as u64,
        ((a.0[2] as u64) << 32) | a.0[3] as u64,
    ]
}

/// The fixed header's words that the header's insertion (`add`) or removal
/// changes, given before: the payload length and the next header's word
/// (next header, hop limit), raw. `len` is the header's length, `next` the
/// next header it names (removal) or the new one it takes (insertion).
#[inline(always)]
pub const fn fixed_after(
    payload_len: u16,
    next_hop: u16,
    len: usize,
    next: u8,
    add: bool,
) -> (u16, u16) {
    let old = u16::from_be(payload_len);
    let new = if add {
        old.wrapping_add(len as u16)
    } else {
        old.wrapping_sub(len as u16)
    };
    let [_, hop] = next_hop.to_ne_bytes();
    (new.to_be(), u16::from_ne_bytes([next, hop]))
}

/// What the one's-complement sum of the packet from the fixed header on
/// gains when the header whose words are `words` (its first `len` bytes)
/// goes in (`add`) or out, with the fixed header's two words changing from
/// `before` to `after`: `skb->csum` of a CHECKSUM_COMPLETE skb takes it.
/// The kernel zeroes the bytes it inserts and takes out of `skb->csum` the
/// ones it removes; what is written over them and into the fixed header is
/// for the program to add.
#[inline(always)]
pub const fn sum_change(
    words: &[u32; 8],
    len: usize,
    before: [u16; 2],
    after: [u16; 2],
    add: bool,
) -> u32 {
    let mut sum = csum::diff16(before[0], after[0]) + csum::diff16(before[1], after[1]);
    if add {
        let mut i = 0;
        while i < len / 4 && i < 8 {
            let [a, b, c, d] = words[i].to_ne_bytes();
            sum += u16::from_ne_bytes([a, b]) as u32 + u16::from_ne_bytes([c, d]) as u32;
            i += 1;
        }
    }
    sum
}

/// Host reference of the insertion of `option` on a frame whose IPv6
/// header has no extension headers.
#[cfg(any(test, feature = "fixtures"))]
pub fn add_carried6(frame: &[u8], option: &Carried<Addr6>) -> alloc::vec::Vec<u8> {
    let at = ETH_HLEN + IPV6_HLEN;
    let next = frame[ETH_HLEN + IPV6_NEXT_HEADER_OFF];
    let mut out = frame[..at].to_vec();
    for w in &words6(next, option)[..option.len / 4] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&frame[at..]);
    fix_fixed(&mut out, frame, option, NEXTHDR_DEST, true);
    out
}

/// Host reference of the insertion of the plain header.
#[cfg(any(test, feature = "fixtures"))]
pub fn add6(frame: &[u8], frontend: Endpoint6) -> alloc::vec::Vec<u8> {
    add_carried6(
        frame,
        &Carried {
            frontend,
            len: PLAIN_LEN6,
            tag: 0,
        },
    )
}

/// Host reference of the insertion of the sealed header under `key`, on a
/// SYN frame built by `crate::fixtures6`.
#[cfg(any(test, feature = "fixtures"))]
pub fn add_sealed6(frame: &[u8], frontend: Endpoint6, key: Key) -> alloc::vec::Vec<u8> {
    use crate::ipv6::{IPV6_DADDR_OFF, IPV6_SADDR_OFF};
    let ip = ETH_HLEN;
    let l4 = ip + IPV6_HLEN;
    let addr = |at: usize| Addr6::from_octets(core::array::from_fn(|i| frame[at + i]));
    let port = |at: usize| u16::from_ne_bytes(core::array::from_fn(|i| frame[at + i]));
    let client = Endpoint6 {
        addr: addr(ip + IPV6_SADDR_OFF),
        port: port(l4),
        _pad: [0; 3],
    };
    let backend = Endpoint6 {
        addr: addr(ip + IPV6_DADDR_OFF),
        port: port(l4 + 2),
        _pad: [0; 3],
    };
    let isn = u32::from_be_bytes(core::array::from_fn(|i| frame[l4 + 4 + i]));
    add_carried6(
        frame,
        &Carried {
            frontend,
            len: SEALED_LEN6,
            tag: tag6(key, client, backend, isn, frontend),
        },
    )
}

/// Host reference of the removal of the first extension header, if it is
/// ours.
#[cfg(any(test, feature = "fixtures"))]
pub fn strip6(frame: &[u8]) -> Option<(alloc::vec::Vec<u8>, Carried<Addr6>)> {
    let at = ETH_HLEN + IPV6_HLEN;
    if *frame.get(ETH_HLEN + IPV6_NEXT_HEADER_OFF)? != NEXTHDR_DEST {
        return None;
    }
    let len = len_of6(frame.get(at..at + 4)?.try_into().ok()?)?;
    let mut bytes = [0u8; SEALED_LEN6];
    bytes[..len].copy_from_slice(frame.get(at..at + len)?);
    let (next, option) = read6(bytes)?;
    let mut out = frame[..at].to_vec();
    out.extend_from_slice(&frame[at + len..]);
    fix_fixed(&mut out, frame, &option, next, false);
    Some((out, option))
}

#[cfg(any(test, feature = "fixtures"))]
fn fix_fixed(out: &mut [u8], before: &[u8], option: &Carried<Addr6>, next: u8, add: bool) {
    let w = |f: &[u8], at: usize| u16::from_ne_bytes([f[at], f[at + 1]]);
    let (plen_at, next_at) = (
        ETH_HLEN + IPV6_PAYLOAD_LEN_OFF,
        ETH_HLEN + IPV6_NEXT_HEADER_OFF,
    );
    let (plen, next_hop) = fixed_after(
        w(before, plen_at),
        w(before, next_at),
        option.len,
        next,
        add,
    );
    out[plen_at..plen_at + 2].copy_from_slice(&plen.to_ne_bytes());
    out[next_at..next_at + 2].copy_from_slice(&next_hop.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::net::Ipv6Addr;

    use super::*;
    use crate::{
        fixtures6::{Extension, Frame6},
        ipv6::{NEXTHDR_TCP, Upper, locate},
    };

    const FRONTEND: Endpoint6 =
        Endpoint6::new6(Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10), 9022);
    const KEY: Key = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];

    fn syn(extensions: std::vec::Vec<Extension>) -> Frame6 {
        Frame6 {
            dst: Ipv6Addr::new(0xfd00, 0x244, 2, 0, 0, 0, 0, 5),
            dport: 22,
            tcp_flags: 0x02,
            extensions,
            ..Frame6::default()
        }
    }

    /// Our header as the fixture builds any Destination Options header.
    fn ours(tag: Option<u64>) -> Extension {
        let mut body = std::vec![FRONTEND_OPTION_TYPE6, if tag.is_some() { 26 } else { 18 }];
        body.extend_from_slice(&Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10).octets());
        body.extend_from_slice(&9022u16.to_be_bytes());
        if let Some(t) = tag {
            body.extend_from_slice(&t.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]);
        Extension {
            kind: NEXTHDR_DEST,
            body,
        }
    }

    #[test]
    fn the_header_goes_first_and_the_frame_is_the_one_built_with_it() {
        let frame = syn(std::vec![]).build();
        let with = add6(&frame, FRONTEND);
        assert_eq!(with.len(), frame.len() + PLAIN_LEN6);
        assert_eq!(with, syn(std::vec![ours(None)]).build());
        let (without, option) = strip6(&with).expect("ours");
        assert_eq!(option.frontend, FRONTEND);
        assert!(!option.is_sealed());
        assert_eq!(without, frame);
    }

    #[test]
    fn the_walk_reaches_tcp_past_it_in_both_forms() {
        let frame = syn(std::vec![]).build();
        for with in [add6(&frame, FRONTEND), add_sealed6(&frame, FRONTEND, KEY)] {
            let located = locate(&with).expect("walked to TCP");
            assert_eq!(located.protocol, Upper::Tcp);
            assert_eq!(
                located.l4_off,
                with.len() - frame.len() + ETH_HLEN + IPV6_HLEN
            );
        }
    }

    #[test]
    fn the_sealed_header_carries_a_tag_that_binds_the_connection_and_its_syn() {
        let f = syn(std::vec![]);
        let frame = f.build();
        let with = add_sealed6(&frame, FRONTEND, KEY);
        let (client, backend) = (Endpoint6::new6(f.src, f.sport), Endpoint6::new6(f.dst, 22));
        let tag = tag6(KEY, client, backend, f.seq, FRONTEND);
        assert_eq!(with, syn(std::vec![ours(Some(tag))]).build());
        let (without, option) = strip6(&with).expect("ours");
        assert_eq!(without, frame);
        assert!(option.is_sealed());
        assert_eq!((option.frontend, option.tag), (FRONTEND, tag));
        let other = Endpoint6::new6(Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x11), 9022);
        let other_port = Endpoint6::new6(f.src, f.sport + 1);
        for t in [
            tag6(KEY, other, backend, f.seq, FRONTEND),
            tag6(KEY, other_port, backend, f.seq, FRONTEND),
            tag6(KEY, client, other, f.seq, FRONTEND),
            tag6(KEY, client, backend, f.seq.wrapping_add(1), FRONTEND),
            tag6(KEY, client, backend, f.seq, other),
            tag6([KEY[0], KEY[1] ^ 1], client, backend, f.seq, FRONTEND),
        ] {
            assert_ne!(t, tag);
        }
    }

    #[test]
    fn other_destination_options_are_not_taken_for_ours() {
        // The fixture's own filler uses option type 0x1e too, with other
        // lengths; a Hop-by-Hop header first; ours without its padding.
        for ext in [
            std::vec![Extension::destination(24)],
            std::vec![Extension::destination(32)],
            std::vec![Extension::hop_by_hop(8), ours(None)],
            std::vec![Extension {
                kind: NEXTHDR_DEST,
                body: {
                    let mut b = ours(None).body;
                    b[20] = 0;
                    b
                },
            }],
        ] {
            assert_eq!(strip6(&syn(ext.clone()).build()), None, "{ext:?}");
        }
        assert_eq!(strip6(&syn(std::vec![]).build()), None);
    }

    #[test]
    fn the_sum_change_is_what_the_packet_sum_gains() {
        let frame = syn(std::vec![]).build();
        let sum = |f: &[u8]| {
            let mut s = 0u32;
            for c in f[ETH_HLEN..].chunks(2) {
                s += u32::from(u16::from_ne_bytes([c[0], *c.get(1).unwrap_or(&0)]));
            }
            csum::fold(s)
        };
        let w = |f: &[u8], at: usize| u16::from_ne_bytes([f[ETH_HLEN + at], f[ETH_HLEN + at + 1]]);
        let fixed = |f: &[u8]| [w(f, IPV6_PAYLOAD_LEN_OFF), w(f, IPV6_NEXT_HEADER_OFF)];
        for with in [add6(&frame, FRONTEND), add_sealed6(&frame, FRONTEND, KEY)] {
            let (_, option) = strip6(&with).expect("ours");
            let words = words6(NEXTHDR_TCP, &option);
            let grown = sum_change(&words, option.len, fixed(&frame), fixed(&with), true);
            assert_eq!(csum::fold(u32::from(sum(&frame)) + grown), sum(&with));
            // Removed: the kernel takes the header's bytes out itself.
            let header: u32 = with[ETH_HLEN + IPV6_HLEN..ETH_HLEN + IPV6_HLEN + option.len]
                .chunks(2)
                .map(|c| u32::from(!u16::from_ne_bytes([c[0], c[1]])))
                .sum();
            let shrunk = sum_change(&words, option.len, fixed(&with), fixed(&frame), false);
            assert_eq!(
                csum::fold(u32::from(sum(&with)) + header + shrunk),
                sum(&frame)
            );
        }
    }
}
