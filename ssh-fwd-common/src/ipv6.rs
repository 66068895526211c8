//! IPv6 for the data path, as pure functions (issue 31): header offsets,
//! the bounded walk over extension headers ([`walk()`]), the pseudo-header
//! checksum and its incremental update for a 128-bit address, and the host
//! references [`classify`] and [`rewrite`] that mirror
//! [`packet::classify`](crate::packet::classify) and
//! [`packet::rewrite`](crate::packet::rewrite). IPv6 has no header
//! checksum: a rewrite patches only the transport checksum, whose
//! pseudo-header holds both addresses (RFC 8200 8.1). ICMPv6 errors are in
//! [`icmp`].
//!
//! Endpoints are the maps' [`Endpoint6`]: the address as four words of wire
//! bytes and the port a raw 16-bit word, both exactly as on the wire, as
//! the crate's byte order contract says.

use crate::{
    csum,
    maps::{Addr6, Endpoint6},
    outcome::Outcome,
    packet::{
        ETH_HLEN, ETH_TYPE_OFF, Side, TCP_ACK_OFF, TCP_CHECK_OFF, TCP_DOFF_OFF, TCP_DPORT_OFF,
        TCP_FLAGS_OFF, TCP_MIN_LEN, TCP_SEQ_OFF, TCP_SPORT_OFF,
    },
    tcp::Segment,
};

pub mod icmp;
mod walk;

pub use walk::{
    EXT_HEAD_LEN, IPV6_MAX_EXT_HEADERS, IPV6_MAX_EXT_LEN, PassReason, Step, Transport, Upper,
    Walked, is_extension, step, walk,
};

pub const ETH_P_IPV6: u16 = 0x86dd;

/// The fixed header; extension headers follow it.
pub const IPV6_HLEN: usize = 40;
pub const IPV6_ADDR_LEN: usize = 16;
/// Payload length: every byte after the fixed header, extension headers
/// included.
pub const IPV6_PAYLOAD_LEN_OFF: usize = 4;
pub const IPV6_NEXT_HEADER_OFF: usize = 6;
pub const IPV6_HOP_LIMIT_OFF: usize = 7;
pub const IPV6_SADDR_OFF: usize = 8;
pub const IPV6_DADDR_OFF: usize = 24;

/// Next header numbers (IANA "Assigned Internet Protocol Numbers"), named
/// as in the kernel's `include/net/ipv6.h`.
pub const NEXTHDR_HOP: u8 = 0;
pub const NEXTHDR_TCP: u8 = 6;
pub const NEXTHDR_ROUTING: u8 = 43;
pub const NEXTHDR_FRAGMENT: u8 = 44;
pub const NEXTHDR_ESP: u8 = 50;
pub const NEXTHDR_AUTH: u8 = 51;
pub const NEXTHDR_ICMPV6: u8 = 58;
pub const NEXTHDR_NONE: u8 = 59;
pub const NEXTHDR_DEST: u8 = 60;

/// The version nibble's value.
const IPV6_VERSION: u8 = 6;

/// The IPv6 payload's length (every byte after the fixed header) from the
/// raw payload length field and the length of the frame it is in
/// (`frame_len`, the Ethernet header included): the field, or, for a BIG
/// TCP packet (a GSO packet over 64 KiB, whose field is 0), the frame's.
/// Otherwise 0, which an empty packet may really say.
#[inline(always)]
pub const fn ipv6_payload_len(payload_len_raw: u16, frame_len: usize) -> usize {
    let field = u16::from_be(payload_len_raw) as usize;
    if field == 0 && frame_len > ETH_HLEN + IPV6_HLEN + u16::MAX as usize {
        frame_len - ETH_HLEN - IPV6_HLEN
    } else {
        field
    }
}

/// The IPv6 pseudo-header (RFC 8200 8.1) summed as raw words, to seed
/// [`csum::checksum`] for an upper-layer packet of `upper_len` bytes:
/// source, destination, the 32-bit length, three zero bytes and the next
/// header. At most 20 words, far from overflowing.
#[inline(always)]
pub const fn pseudo_header_sum(
    src: [u8; IPV6_ADDR_LEN],
    dst: [u8; IPV6_ADDR_LEN],
    upper_len: u32,
    next_header: u8,
) -> u32 {
    let len = upper_len.to_be_bytes();
    let mut sum = u16::from_ne_bytes([len[0], len[1]]) as u32
        + u16::from_ne_bytes([len[2], len[3]]) as u32
        + u16::from_ne_bytes([0, next_header]) as u32;
    let mut i = 0;
    while i < IPV6_ADDR_LEN {
        sum += u16::from_ne_bytes([src[i], src[i + 1]]) as u32;
        sum += u16::from_ne_bytes([dst[i], dst[i + 1]]) as u32;
        i += 2;
    }
    sum
}

/// The pseudo-header sum of a TCP segment of `len` bytes from `src` to
/// `dst`, folded: what a checksum still to be completed holds, and the
/// seed of a full check. Summed from the addresses' raw words, as the
/// kernel programs hold them (a 32-bit word's two halves add up to the
/// same one's complement sum as the two 16-bit words).
#[inline(always)]
pub const fn pseudo_seed6(src: Addr6, dst: Addr6, len: u16) -> u16 {
    let mut sum = 0u64;
    let mut i = 0;
    while i < 4 {
        sum += src.0[i] as u64 + dst.0[i] as u64;
        i += 1;
    }
    sum += u16::from_ne_bytes([0, NEXTHDR_TCP]) as u64;
    sum += u16::from_ne_bytes(len.to_be_bytes()) as u64;
    csum::fold64(sum)
}

/// The raw (next header, hop limit) word after a router's hop limit
/// decrement, or `None` if the hop limit expires here: such a packet goes
/// to the stack, which answers with ICMPv6 time exceeded. The IPv6 twin of
/// [`forwarded_ttl_word`](crate::packet::forwarded_ttl_word), whose TTL is
/// the word's first byte where the hop limit is its second.
#[inline(always)]
pub const fn forwarded_hop_word(word_raw: u16) -> Option<u16> {
    let [next_header, hop_limit] = word_raw.to_ne_bytes();
    if hop_limit <= 1 {
        None
    } else {
        Some(u16::from_ne_bytes([next_header, hop_limit - 1]))
    }
}

/// The counter an IPv6 packet passed untouched for `reason` is counted
/// under.
pub const fn pass_outcome(reason: PassReason) -> Outcome {
    match reason {
        PassReason::NotIpv6 => Outcome::PassNotIp,
        PassReason::NotTcp => Outcome::PassNotTcp,
        PassReason::Fragment => Outcome::PassFragment,
        PassReason::Authenticated
        | PassReason::Encrypted
        | PassReason::NoNextHeader
        | PassReason::NotFinalDestination
        | PassReason::TooManyExtensions
        | PassReason::ExtensionsTooLong => Outcome::PassIpv6Extensions,
        PassReason::Truncated | PassReason::Malformed => Outcome::Malformed,
    }
}

/// The one's complement difference `new - old` for a 128-bit address, ready
/// for [`csum::apply`]: the eight 16-bit word differences, taken as four
/// [`csum::diff32`]s. At most 16 * 0xffff, so port differences and a second
/// address's may be added to it without overflow. Computed once, it serves
/// every checksum whose pseudo-header holds the address.
#[inline(always)]
pub const fn address_diff(old: [u8; IPV6_ADDR_LEN], new: [u8; IPV6_ADDR_LEN]) -> u32 {
    let mut diff = 0;
    let mut i = 0;
    while i < IPV6_ADDR_LEN {
        let old_word = u32::from_ne_bytes([old[i], old[i + 1], old[i + 2], old[i + 3]]);
        let new_word = u32::from_ne_bytes([new[i], new[i + 1], new[i + 2], new[i + 3]]);
        diff += csum::diff32(old_word, new_word);
        i += 4;
    }
    diff
}

/// [`address_diff`] from the addresses' raw words, as the kernel programs
/// hold them, folded to 32 bits with the end-around carry: a checksum
/// difference the kernel's helpers take as a `__wsum`.
#[inline(always)]
pub const fn words_diff(old: Addr6, new: Addr6) -> u32 {
    let mut sum = 0u64;
    let mut i = 0;
    while i < 4 {
        sum += csum::diff32(old.0[i], new.0[i]) as u64;
        i += 1;
    }
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

/// Where the transport header of an IPv6 packet in a frame starts, and how
/// long the transport packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    pub protocol: Upper,
    /// The transport header's offset in the frame.
    pub l4_off: usize,
    /// The upper-layer packet length of the pseudo-header: the payload
    /// length less the extension headers.
    pub l4_len: usize,
}

/// Host reference of the walk on a frame: Ethernet, IPv6, extension headers,
/// then TCP or ICMPv6, all within the frame and the payload length.
pub fn locate(frame: &[u8]) -> Result<Located, PassReason> {
    if frame.len() < ETH_HLEN {
        return Err(PassReason::Truncated);
    }
    if u16::from_be_bytes([frame[ETH_TYPE_OFF], frame[ETH_TYPE_OFF + 1]]) != ETH_P_IPV6 {
        return Err(PassReason::NotIpv6);
    }
    let ip = &frame[ETH_HLEN..];
    if ip.len() < IPV6_HLEN {
        return Err(PassReason::Truncated);
    }
    if ip[0] >> 4 != IPV6_VERSION {
        return Err(PassReason::Malformed);
    }
    let payload_len = ipv6_payload_len(
        u16::from_ne_bytes([ip[IPV6_PAYLOAD_LEN_OFF], ip[IPV6_PAYLOAD_LEN_OFF + 1]]),
        frame.len(),
    );
    let Some(packet) = ip.get(..IPV6_HLEN + payload_len) else {
        return Err(PassReason::Truncated);
    };
    let transport = walk(packet[IPV6_NEXT_HEADER_OFF], |at| head_at(packet, at)).transport()?;
    // The walk reads no further than the last extension header's start.
    if transport.ip_headers_len > packet.len() {
        return Err(PassReason::Truncated);
    }
    Ok(Located {
        protocol: transport.protocol,
        l4_off: ETH_HLEN + transport.ip_headers_len,
        l4_len: packet.len() - transport.ip_headers_len,
    })
}

/// The first bytes of the extension header `at` bytes into `packet`.
fn head_at(packet: &[u8], at: usize) -> Option<[u8; EXT_HEAD_LEN]> {
    packet.get(at..at + EXT_HEAD_LEN)?.try_into().ok()
}

/// Where the TCP segment of a classified IPv6 frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6TcpFrame {
    /// The TCP header's offset in the frame.
    pub l4_off: usize,
    /// The segment's length, header included.
    pub l4_len: usize,
}

/// Host reference of the parse step for IPv6: which frames the data path
/// rewrites, and why it passes the others.
pub fn classify(frame: &[u8]) -> Result<Ipv6TcpFrame, PassReason> {
    let located = locate(frame)?;
    if located.protocol != Upper::Tcp {
        return Err(PassReason::NotTcp);
    }
    if located.l4_len < TCP_MIN_LEN {
        return Err(PassReason::Truncated);
    }
    Ok(Ipv6TcpFrame {
        l4_off: located.l4_off,
        l4_len: located.l4_len,
    })
}

/// Host reference of reading a classified frame's TCP segment.
pub fn segment(frame: &[u8], tcp: Ipv6TcpFrame) -> Segment {
    let l4 = tcp.l4_off;
    let word = |at: usize| u32::from_be_bytes(frame[at..at + 4].try_into().unwrap_or([0; 4]));
    let header_len = ((frame[l4 + TCP_DOFF_OFF] >> 4) as usize) * 4;
    Segment {
        flags: frame[l4 + TCP_FLAGS_OFF],
        seq: word(l4 + TCP_SEQ_OFF),
        ack: word(l4 + TCP_ACK_OFF),
        payload: tcp.l4_len.saturating_sub(header_len) as u32,
    }
}

fn offsets(tcp: Ipv6TcpFrame, side: Side) -> (usize, usize) {
    match side {
        Side::Source => (ETH_HLEN + IPV6_SADDR_OFF, tcp.l4_off + TCP_SPORT_OFF),
        Side::Destination => (ETH_HLEN + IPV6_DADDR_OFF, tcp.l4_off + TCP_DPORT_OFF),
    }
}

/// Reads the (address, port) of one side of a classified frame.
pub fn endpoint(frame: &[u8], tcp: Ipv6TcpFrame, side: Side) -> Endpoint6 {
    let (addr_off, port_off) = offsets(tcp, side);
    Endpoint6 {
        addr: Addr6::from_octets(
            frame[addr_off..addr_off + IPV6_ADDR_LEN]
                .try_into()
                .unwrap_or([0; IPV6_ADDR_LEN]),
        ),
        port: u16::from_ne_bytes([frame[port_off], frame[port_off + 1]]),
        _pad: [0; 3],
    }
}

/// Host reference of the rewrite step for IPv6: replaces one side's
/// address and port and updates the TCP checksum incrementally, the only
/// checksum there is.
pub fn rewrite(frame: &mut [u8], tcp: Ipv6TcpFrame, side: Side, to: Endpoint6) {
    let from = endpoint(frame, tcp, side);
    let (addr_off, port_off) = offsets(tcp, side);
    let diff =
        address_diff(from.addr.octets(), to.addr.octets()) + csum::diff16(from.port, to.port);
    let check_off = tcp.l4_off + TCP_CHECK_OFF;
    let check = u16::from_ne_bytes([frame[check_off], frame[check_off + 1]]);
    frame[check_off..check_off + 2].copy_from_slice(&csum::apply(check, diff).to_ne_bytes());
    frame[addr_off..addr_off + IPV6_ADDR_LEN].copy_from_slice(&to.addr.octets());
    frame[port_off..port_off + 2].copy_from_slice(&to.port.to_ne_bytes());
}

#[cfg(test)]
mod tests;
