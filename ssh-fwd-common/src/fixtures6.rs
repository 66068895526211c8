//! Builders for well-formed Ethernet/IPv6/TCP frames, with extension
//! headers, and ICMPv6 errors quoting them, for packet tests on the host
//! and through BPF_PROG_TEST_RUN. Checksums are summed from scratch over a
//! pseudo-header laid out byte by byte as RFC 8200 8.1 draws it, not with
//! [`ipv6::pseudo_header_sum`](crate::ipv6::pseudo_header_sum), so the
//! tests compare the data path's arithmetic against an independent one.

use alloc::{vec, vec::Vec};
use core::net::Ipv6Addr;

use crate::{
    csum,
    ipv6::{
        ETH_P_IPV6, IPV6_HLEN, NEXTHDR_AUTH, NEXTHDR_DEST, NEXTHDR_ESP, NEXTHDR_FRAGMENT,
        NEXTHDR_HOP, NEXTHDR_ICMPV6, NEXTHDR_ROUTING, NEXTHDR_TCP, icmp::ICMPV6_PKT_TOOBIG,
    },
    packet::{ETH_HLEN, TCP_CHECK_OFF},
};

/// One extension header: its type and the bytes after its first two (next
/// header and length), which the builder fills in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    pub kind: u8,
    pub body: Vec<u8>,
}

impl Extension {
    /// A Hop-by-Hop or Destination Options header `len` bytes long (a
    /// multiple of 8), filled with experimental options (type 0x1e, RFC
    /// 4727) a receiver skips. Not padding: Linux drops more than 7 bytes
    /// of it in a row.
    pub fn options(kind: u8, len: usize) -> Self {
        assert!(len >= 8 && len.is_multiple_of(8), "options header of {len}");
        let mut body = Vec::with_capacity(len - 2);
        while body.len() < len - 2 {
            let room = len - 2 - body.len();
            if room == 1 {
                body.push(0); // Pad1
            } else {
                let data = (room - 2).min(u8::MAX as usize);
                body.extend_from_slice(&[0x1e, data as u8]);
                body.resize(body.len() + data, 0);
            }
        }
        Self { kind, body }
    }

    pub fn hop_by_hop(len: usize) -> Self {
        Self::options(NEXTHDR_HOP, len)
    }

    pub fn destination(len: usize) -> Self {
        Self::options(NEXTHDR_DEST, len)
    }

    /// A Routing header (segment routing, type 4) listing `segments`
    /// addresses, `segments_left` of them still to visit.
    pub fn routing(segments: usize, segments_left: u8) -> Self {
        let mut body = vec![4, segments_left, 0, 0, 0, 0];
        body.extend((0..segments * 16).map(|i| i as u8));
        Self {
            kind: NEXTHDR_ROUTING,
            body,
        }
    }

    /// A Fragment header: `offset` in 8-octet units, and whether more
    /// fragments follow.
    pub fn fragment(offset: u16, more: bool) -> Self {
        let mut body = vec![0];
        body.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
        body.extend_from_slice(&0x5eed_f00du32.to_be_bytes());
        Self {
            kind: NEXTHDR_FRAGMENT,
            body,
        }
    }

    /// An Authentication Header with a 96-bit ICV.
    pub fn auth() -> Self {
        let mut body = vec![0, 0];
        body.extend_from_slice(&0x100u32.to_be_bytes()); // SPI
        body.extend_from_slice(&1u32.to_be_bytes()); // sequence
        body.extend_from_slice(&[0xa5; 12]); // ICV
        Self {
            kind: NEXTHDR_AUTH,
            body,
        }
    }

    /// ESP: SPI, sequence number and what reads as ciphertext.
    pub fn esp() -> Self {
        let mut body = 0x100u32.to_be_bytes().to_vec();
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&[0xe5; 16]);
        Self {
            kind: NEXTHDR_ESP,
            body,
        }
    }

    /// The header's bytes, `next` naming the header after it.
    pub fn bytes(&self, next: u8) -> Vec<u8> {
        if self.kind == NEXTHDR_ESP {
            return self.body.clone();
        }
        let mut out = vec![next, 0];
        out.extend_from_slice(&self.body);
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        out[1] = match self.kind {
            NEXTHDR_FRAGMENT => 0, // reserved
            NEXTHDR_AUTH => (out.len() / 4 - 2) as u8,
            _ => (out.len() / 8 - 1) as u8,
        };
        out
    }

    /// The bytes it takes in a packet.
    pub fn wire_len(&self) -> usize {
        self.bytes(0).len()
    }
}

/// Describes one frame. `Default` is a plain TCP segment, no extension
/// headers, no options.
#[derive(Clone, Debug)]
pub struct Frame6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub sport: u16,
    pub dport: u16,
    pub payload: Vec<u8>,
    /// In the order they follow the fixed header.
    pub extensions: Vec<Extension>,
    /// The header after the extension headers: TCP is built as TCP, any
    /// other number as `payload` alone.
    pub protocol: u8,
    pub hop_limit: u8,
    pub tcp_flags: u8,
    pub seq: u32,
    pub ack: u32,
}

impl Default for Frame6 {
    fn default() -> Self {
        Self {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10),
            sport: 40_000,
            dport: 8022,
            payload: Vec::new(),
            extensions: Vec::new(),
            protocol: NEXTHDR_TCP,
            hop_limit: 64,
            tcp_flags: 0x18, // PSH|ACK
            seq: 0x0102_0304,
            ack: 0x0a0b_0c0d,
        }
    }
}

impl Frame6 {
    /// The TCP header's offset in the built frame.
    pub fn l4_off(&self) -> usize {
        ETH_HLEN
            + IPV6_HLEN
            + self
                .extensions
                .iter()
                .map(Extension::wire_len)
                .sum::<usize>()
    }

    /// The transport packet (TCP header, payload), checksum summed from
    /// scratch.
    pub fn l4(&self) -> Vec<u8> {
        if self.protocol != NEXTHDR_TCP {
            return self.payload.clone();
        }
        let mut l4 = Vec::new();
        l4.extend_from_slice(&self.sport.to_be_bytes());
        l4.extend_from_slice(&self.dport.to_be_bytes());
        l4.extend_from_slice(&self.seq.to_be_bytes());
        l4.extend_from_slice(&self.ack.to_be_bytes());
        l4.push(5 << 4);
        l4.push(self.tcp_flags);
        l4.extend_from_slice(&64_800u16.to_be_bytes()); // window
        l4.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
        l4.extend_from_slice(&self.payload);
        let check = checksum_with_pseudo_header(self.src, self.dst, NEXTHDR_TCP, &l4);
        l4[TCP_CHECK_OFF..TCP_CHECK_OFF + 2].copy_from_slice(&check.to_ne_bytes());
        l4
    }

    /// The IPv6 packet: fixed header, extension headers, transport.
    pub fn packet(&self) -> Vec<u8> {
        let mut rest = Vec::new();
        for (i, ext) in self.extensions.iter().enumerate() {
            let next = self.extensions.get(i + 1).map_or(self.protocol, |e| e.kind);
            rest.extend_from_slice(&ext.bytes(next));
        }
        rest.extend_from_slice(&self.l4());
        let first = self.extensions.first().map_or(self.protocol, |e| e.kind);
        ipv6_packet(self.src, self.dst, first, self.hop_limit, &rest)
    }

    /// The frame's bytes.
    pub fn build(&self) -> Vec<u8> {
        ethernet(&self.packet())
    }
}

/// An ICMPv6 error quoting the first `quote_len` bytes of `about`'s IPv6
/// packet, as a router sends it.
#[derive(Clone, Debug)]
pub struct Icmp6Error {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub icmp_type: u8,
    pub code: u8,
    /// The MTU of a Packet Too Big, 0 for the other errors.
    pub mtu: u32,
    pub about: Frame6,
    pub quote_len: usize,
}

impl Icmp6Error {
    /// A Packet Too Big from `src` to `dst` about `about`, quoting as much
    /// as fits the minimum MTU of 1280 (RFC 4443 3.2).
    pub fn packet_too_big(src: Ipv6Addr, dst: Ipv6Addr, mtu: u32, about: Frame6) -> Self {
        Self {
            src,
            dst,
            icmp_type: ICMPV6_PKT_TOOBIG,
            code: 0,
            mtu,
            about,
            quote_len: 1280 - IPV6_HLEN - 8,
        }
    }

    /// The ICMPv6 message: header, checksum summed from scratch, quote.
    pub fn message(&self) -> Vec<u8> {
        let about = self.about.packet();
        let mut icmp = vec![self.icmp_type, self.code, 0, 0];
        icmp.extend_from_slice(&self.mtu.to_be_bytes());
        icmp.extend_from_slice(&about[..self.quote_len.min(about.len())]);
        let check = checksum_with_pseudo_header(self.src, self.dst, NEXTHDR_ICMPV6, &icmp);
        icmp[2..4].copy_from_slice(&check.to_ne_bytes());
        icmp
    }

    /// The frame's bytes.
    pub fn build(&self) -> Vec<u8> {
        ethernet(&ipv6_packet(
            self.src,
            self.dst,
            NEXTHDR_ICMPV6,
            64,
            &self.message(),
        ))
    }
}

/// The pseudo-header of RFC 8200 8.1, byte by byte.
pub fn pseudo_header(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> [u8; 40] {
    let mut out = [0; 40];
    out[..16].copy_from_slice(&src.octets());
    out[16..32].copy_from_slice(&dst.octets());
    out[32..36].copy_from_slice(&len.to_be_bytes());
    out[39] = next_header;
    out
}

/// The checksum of `upper` (its checksum field zero) with its pseudo-header.
fn checksum_with_pseudo_header(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, upper: &[u8]) -> u16 {
    let mut all = pseudo_header(src, dst, next_header, upper.len() as u32).to_vec();
    all.extend_from_slice(upper);
    csum::checksum(&all, 0)
}

fn ipv6_packet(src: Ipv6Addr, dst: Ipv6Addr, next: u8, hop_limit: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IPV6_HLEN + rest.len());
    // Version 6, traffic class 0, a flow label the data path leaves alone.
    out.extend_from_slice(&[0x60, 0x01, 0x23, 0x45]);
    out.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    out.push(next);
    out.push(hop_limit);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&dst.octets());
    out.extend_from_slice(rest);
    out
}

fn ethernet(packet: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ETH_HLEN + packet.len());
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // dst MAC
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // src MAC
    out.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
    out.extend_from_slice(packet);
    out
}

/// A neighbour solicitation from `src` (`mac`) for `target`, to the
/// target's solicited-node multicast address, hop limit 255, with the
/// source link-layer address option or without (a unicast probe may omit
/// it); checksum summed from scratch.
pub fn neighbour_solicitation(mac: [u8; 6], src: Ipv6Addr, target: Ipv6Addr, lla: bool) -> Vec<u8> {
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    if lla {
        icmp.extend_from_slice(&[1, 1]);
        icmp.extend_from_slice(&mac);
    }
    let mut dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    dst[13..].copy_from_slice(&target.octets()[13..]);
    ndp_frame(mac, src, Ipv6Addr::from(dst), icmp)
}

/// An unsolicited neighbour advertisement from `mac` for `target`, to all
/// nodes, overriding, with the target link-layer address option.
pub fn neighbour_advert(mac: [u8; 6], target: Ipv6Addr) -> Vec<u8> {
    let mut icmp = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[2, 1]);
    icmp.extend_from_slice(&mac);
    ndp_frame(
        mac,
        target,
        "ff02::1".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
        icmp,
    )
}

fn ndp_frame(mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, mut icmp: Vec<u8>) -> Vec<u8> {
    let check = checksum_with_pseudo_header(src, dst, NEXTHDR_ICMPV6, &icmp);
    icmp[2..4].copy_from_slice(&check.to_ne_bytes());
    let mut frame = ethernet(&ipv6_packet(src, dst, NEXTHDR_ICMPV6, 255, &icmp));
    frame[..6].copy_from_slice(&[
        0x33,
        0x33,
        dst.octets()[12],
        dst.octets()[13],
        dst.octets()[14],
        dst.octets()[15],
    ]);
    frame[6..12].copy_from_slice(&mac);
    frame
}
