//! Neighbour discovery for `--announce l2` over IPv6 (RFC 4861), the twin
//! of [`crate::arp`]: which frames are Neighbour Solicitations the node
//! answers for an announced SSH IP, the Neighbour Advertisement written
//! over one, the unsolicited advertisement a new holder sends, and which
//! advertisements say another MAC holds the address.
//!
//! Only the frames that carry neighbour discovery plainly: Ethernet, an
//! IPv6 header followed directly by ICMPv6, hop limit 255 (RFC 4861 7.1.1:
//! anything else crossed a router and is not on-link), code 0, and at most
//! one option, the link-layer address. A solicitation from the unspecified
//! address (duplicate address detection) is not answered: the SSH IP is
//! on no interface, so no host of the link tests it, and the answer would
//! need a longer frame.
//!
//! Addresses are [`Addr6`], raw words of wire bytes, as the maps hold them;
//! MACs their six bytes.

use crate::{
    csum,
    ipv6::{
        ETH_P_IPV6, IPV6_DADDR_OFF, IPV6_HLEN, IPV6_HOP_LIMIT_OFF, IPV6_NEXT_HEADER_OFF,
        IPV6_PAYLOAD_LEN_OFF, IPV6_SADDR_OFF, NEXTHDR_ICMPV6,
    },
    maps::Addr6,
    packet::{ETH_HLEN, ETH_TYPE_OFF},
};

/// ICMPv6 Neighbour Solicitation and Advertisement.
pub const NDP_SOLICIT: u8 = 135;
pub const NDP_ADVERT: u8 = 136;
/// The ICMPv6 body of a solicitation or advertisement: type, code,
/// checksum, 4 bytes of flags (reserved in a solicitation), the target.
pub const NDP_BODY_LEN: usize = 24;
/// A link-layer address option for Ethernet: type, length 1 (8 bytes), MAC.
pub const NDP_LLA_LEN: usize = 8;
/// A frame without an option, and with the link-layer address option.
pub const NDP_FRAME_LEN: usize = ETH_HLEN + IPV6_HLEN + NDP_BODY_LEN;
pub const NDP_FRAME_LLA_LEN: usize = NDP_FRAME_LEN + NDP_LLA_LEN;

/// Option types (RFC 4861 4.6.1).
const OPT_SOURCE_LLA: u8 = 1;
const OPT_TARGET_LLA: u8 = 2;
/// Advertisement flags, in the first byte of the flags word.
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;
/// The hop limit neighbour discovery is sent and accepted with.
const HOP_LIMIT: u8 = 255;

const ICMP_OFF: usize = ETH_HLEN + IPV6_HLEN;
const CHECK_OFF: usize = ICMP_OFF + 2;
const FLAGS_OFF: usize = ICMP_OFF + 4;
const TARGET_OFF: usize = ICMP_OFF + 8;
const OPT_OFF: usize = ICMP_OFF + NDP_BODY_LEN;

/// The fields of a neighbour discovery frame the rules read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ndp {
    /// [`NDP_SOLICIT`] or [`NDP_ADVERT`].
    pub kind: u8,
    pub src: Addr6,
    pub target: Addr6,
    /// The sender's MAC: its link-layer address option's, else the
    /// Ethernet source.
    pub mac: [u8; 6],
    /// The frame's length: [`NDP_FRAME_LEN`] or [`NDP_FRAME_LLA_LEN`].
    pub len: usize,
}

impl Ndp {
    /// A solicitation the holder of `target` answers: not duplicate
    /// address detection (from the unspecified address).
    pub const fn asks(&self) -> bool {
        self.kind == NDP_SOLICIT && !is_unspecified(self.src)
    }

    /// An advertisement: its sender says it holds `target`.
    pub const fn claims_target(&self) -> bool {
        self.kind == NDP_ADVERT
    }
}

#[inline(always)]
const fn is_unspecified(a: Addr6) -> bool {
    a.0[0] == 0 && a.0[1] == 0 && a.0[2] == 0 && a.0[3] == 0
}

#[inline(always)]
fn addr_at(frame: &[u8], at: usize) -> Addr6 {
    let word = |i: usize| {
        u32::from_ne_bytes([
            frame[at + 4 * i],
            frame[at + 4 * i + 1],
            frame[at + 4 * i + 2],
            frame[at + 4 * i + 3],
        ])
    };
    Addr6([word(0), word(1), word(2), word(3)])
}

#[inline(always)]
fn put_addr(frame: &mut [u8], at: usize, a: Addr6) {
    for (i, w) in a.0.iter().enumerate() {
        frame[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
}

#[inline(always)]
fn mac_at(frame: &[u8], at: usize) -> [u8; 6] {
    let mut mac = [0; 6];
    mac.copy_from_slice(&frame[at..at + 6]);
    mac
}

/// Reads the first `len` bytes of `frame` as a neighbour discovery frame;
/// `None` for anything else. `len` is the frame's length ([`NDP_FRAME_LEN`]
/// or [`NDP_FRAME_LLA_LEN`]; any other is not one the rules take). The
/// checksum is not checked: an answer goes only to the asker, and a
/// claim is only news (see [`crate::arp`]).
#[inline(always)]
pub fn parse(frame: &[u8; NDP_FRAME_LLA_LEN], len: usize) -> Option<Ndp> {
    if len != NDP_FRAME_LEN && len != NDP_FRAME_LLA_LEN {
        return None;
    }
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    let kind = frame[ICMP_OFF];
    let ok = be16(ETH_TYPE_OFF) == ETH_P_IPV6
        && frame[ETH_HLEN] >> 4 == 6
        && be16(ETH_HLEN + IPV6_PAYLOAD_LEN_OFF) as usize == len - ICMP_OFF
        && frame[ETH_HLEN + IPV6_NEXT_HEADER_OFF] == NEXTHDR_ICMPV6
        && frame[ETH_HLEN + IPV6_HOP_LIMIT_OFF] == HOP_LIMIT
        && (kind == NDP_SOLICIT || kind == NDP_ADVERT)
        && frame[ICMP_OFF + 1] == 0;
    if !ok {
        return None;
    }
    let option = if kind == NDP_SOLICIT {
        OPT_SOURCE_LLA
    } else {
        OPT_TARGET_LLA
    };
    let mac = if len == NDP_FRAME_LLA_LEN {
        // Only the link-layer address option fits in 8 bytes.
        if frame[OPT_OFF] != option || frame[OPT_OFF + 1] != 1 {
            return None;
        }
        mac_at(frame, OPT_OFF + 2)
    } else {
        mac_at(frame, 6)
    };
    Some(Ndp {
        kind,
        src: addr_at(frame, ETH_HLEN + IPV6_SADDR_OFF),
        target: addr_at(frame, TARGET_OFF),
        mac,
        len,
    })
}

/// The ICMPv6 checksum of the `len`-byte message at [`ICMP_OFF`] in
/// `frame`, its field taken as zero, with the pseudo-header of the
/// frame's addresses.
#[inline(always)]
fn checksum(frame: &[u8; NDP_FRAME_LLA_LEN], len: usize) -> u16 {
    let mut sum = 0u32;
    let mut add = |b: &[u8]| {
        for pair in b.chunks(2) {
            sum += u32::from(u16::from_ne_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    };
    add(&frame[ETH_HLEN + IPV6_SADDR_OFF..ETH_HLEN + IPV6_DADDR_OFF + 16]);
    add(&(len as u32).to_be_bytes());
    add(&[0, 0, 0, NEXTHDR_ICMPV6]);
    add(&frame[ICMP_OFF..CHECK_OFF]);
    add(&frame[CHECK_OFF + 2..ICMP_OFF + len]);
    !csum::fold(sum)
}

/// Writes over the solicitation in `frame` (read as `ndp`, which
/// [`Ndp::asks`]) the advertisement from `mac`, which holds the target:
/// back to the asker, solicited and overriding, from the target address,
/// with the target's link-layer address if the solicitation carried its
/// own (a unicast one may not, RFC 4861 7.2.4, and then need not have it
/// back). The frame keeps its length.
#[inline(always)]
pub fn answer(frame: &mut [u8; NDP_FRAME_LLA_LEN], ndp: &Ndp, mac: [u8; 6]) {
    frame[..6].copy_from_slice(&ndp.mac);
    frame[6..12].copy_from_slice(&mac);
    frame[ETH_HLEN..ETH_HLEN + 4].copy_from_slice(&[0x60, 0, 0, 0]);
    put_addr(frame, ETH_HLEN + IPV6_SADDR_OFF, ndp.target);
    put_addr(frame, ETH_HLEN + IPV6_DADDR_OFF, ndp.src);
    frame[ICMP_OFF] = NDP_ADVERT;
    frame[FLAGS_OFF..FLAGS_OFF + 4].copy_from_slice(&[FLAG_SOLICITED | FLAG_OVERRIDE, 0, 0, 0]);
    if ndp.len == NDP_FRAME_LLA_LEN {
        frame[OPT_OFF] = OPT_TARGET_LLA;
        frame[OPT_OFF + 1] = 1;
        frame[OPT_OFF + 2..OPT_OFF + 8].copy_from_slice(&mac);
    }
    let check = checksum(frame, ndp.len - ICMP_OFF);
    frame[CHECK_OFF..CHECK_OFF + 2].copy_from_slice(&check.to_ne_bytes());
}

/// The all-nodes multicast address, and its Ethernet address.
pub const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

/// An unsolicited advertisement (RFC 4861 7.2.6): `mac` holds `addr`, to
/// all nodes, overriding what their caches hold. What a new holder sends
/// on taking an SSH IP over, as a gratuitous ARP for IPv4.
pub fn unsolicited(mac: [u8; 6], addr: Addr6) -> [u8; NDP_FRAME_LLA_LEN] {
    let mut frame = [0u8; NDP_FRAME_LLA_LEN];
    frame[..6].copy_from_slice(&ALL_NODES_MAC);
    frame[6..12].copy_from_slice(&mac);
    frame[ETH_TYPE_OFF..ETH_TYPE_OFF + 2].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
    frame[ETH_HLEN] = 0x60;
    frame[ETH_HLEN + IPV6_PAYLOAD_LEN_OFF..ETH_HLEN + IPV6_PAYLOAD_LEN_OFF + 2]
        .copy_from_slice(&((NDP_BODY_LEN + NDP_LLA_LEN) as u16).to_be_bytes());
    frame[ETH_HLEN + IPV6_NEXT_HEADER_OFF] = NEXTHDR_ICMPV6;
    frame[ETH_HLEN + IPV6_HOP_LIMIT_OFF] = HOP_LIMIT;
    put_addr(&mut frame, ETH_HLEN + IPV6_SADDR_OFF, addr);
    frame[ETH_HLEN + IPV6_DADDR_OFF..ETH_HLEN + IPV6_DADDR_OFF + 16].copy_from_slice(&ALL_NODES);
    frame[ICMP_OFF] = NDP_ADVERT;
    frame[FLAGS_OFF] = FLAG_OVERRIDE;
    put_addr(&mut frame, TARGET_OFF, addr);
    frame[OPT_OFF] = OPT_TARGET_LLA;
    frame[OPT_OFF + 1] = 1;
    frame[OPT_OFF + 2..OPT_OFF + 8].copy_from_slice(&mac);
    let check = checksum(&frame, NDP_BODY_LEN + NDP_LLA_LEN);
    frame[CHECK_OFF..CHECK_OFF + 2].copy_from_slice(&check.to_ne_bytes());
    frame
}

#[cfg(test)]
mod tests;
