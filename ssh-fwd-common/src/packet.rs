//! Header offsets and the classification rules of the data path, as pure
//! functions. The kernel programs use the same constants and decisions; the
//! host reference [`classify`] and [`rewrite`] are what packet tests compare the
//! programs' output against.

use crate::{csum, maps::Endpoint, outcome::Outcome, tcp::Segment};

pub const ETH_HLEN: usize = 14;
/// Offset of the EtherType in an Ethernet header.
pub const ETH_TYPE_OFF: usize = 12;
pub const ETH_P_IP: u16 = 0x0800;
pub const IPPROTO_TCP: u8 = 6;

pub const IPPROTO_ICMP: u8 = 1;

pub const IPV4_MIN_LEN: usize = 20;
/// The longest IPv4 header (IHL 15).
pub const IPV4_MAX_LEN: usize = 60;
/// The total length field.
pub const IPV4_TOT_LEN_OFF: usize = 2;
pub const IPV4_FRAG_OFF: usize = 6;
/// The TTL byte, followed by the protocol byte: one 16-bit checksum word.
pub const IPV4_TTL_OFF: usize = 8;
pub const IPV4_PROTO_OFF: usize = 9;
pub const IPV4_CHECK_OFF: usize = 10;
pub const IPV4_SADDR_OFF: usize = 12;
pub const IPV4_DADDR_OFF: usize = 16;

pub const TCP_MIN_LEN: usize = 20;
pub const TCP_SPORT_OFF: usize = 0;
pub const TCP_DPORT_OFF: usize = 2;
pub const TCP_SEQ_OFF: usize = 4;
pub const TCP_ACK_OFF: usize = 8;
/// Data offset (high nibble, in words) then the flags byte.
pub const TCP_DOFF_OFF: usize = 12;
pub const TCP_FLAGS_OFF: usize = 13;
pub const TCP_CHECK_OFF: usize = 16;
/// The urgent pointer: read only in a segment with URG set (RFC 9293, 3.1).
pub const TCP_URG_PTR_OFF: usize = 18;

/// Flags + fragment offset field, host order: "more fragments" and the offset.
const IP_MF_AND_OFFSET: u16 = 0x3fff;

/// IPv4 header length in bytes from the version/IHL byte, or `None` if the
/// packet is not IPv4 or the IHL is below the minimum of 5 words.
#[inline(always)]
pub const fn ipv4_header_len(version_ihl: u8) -> Option<usize> {
    let ihl = (version_ihl & 0x0f) as usize;
    if version_ihl >> 4 != 4 || ihl < 5 {
        None
    } else {
        Some(ihl * 4)
    }
}

/// The IPv4 packet's length from its raw total length field and the
/// length of the frame it is in (`frame_len`, the Ethernet header
/// included): the field, or, for a BIG TCP packet (a GSO packet over 64
/// KiB, whose total length is 0), the frame's. `None`: neither holds.
#[inline(always)]
pub const fn ipv4_total_len(tot_len_raw: u16, frame_len: usize) -> Option<usize> {
    let field = u16::from_be(tot_len_raw) as usize;
    if field != 0 {
        Some(field)
    } else if frame_len > ETH_HLEN + u16::MAX as usize {
        Some(frame_len - ETH_HLEN)
    } else {
        None
    }
}

/// Whether the raw (network order, as loaded) flags/fragment-offset field
/// marks a fragment: any fragment but an unfragmented datagram.
#[inline(always)]
pub const fn is_fragment(frag_off_raw: u16) -> bool {
    u16::from_be(frag_off_raw) & IP_MF_AND_OFFSET != 0
}

/// Where the TCP header of a classified frame starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFrame {
    pub l4_off: usize,
}

/// Host reference of the parse step: which frames the data path rewrites, and
/// the outcome counted for those it passes.
pub fn classify(frame: &[u8]) -> Result<TcpFrame, Outcome> {
    if frame.len() < ETH_HLEN {
        return Err(Outcome::Malformed);
    }
    let ether_type = u16::from_be_bytes([frame[ETH_TYPE_OFF], frame[ETH_TYPE_OFF + 1]]);
    if ether_type != ETH_P_IP {
        return Err(Outcome::PassNotIp);
    }
    let ip = &frame[ETH_HLEN..];
    if ip.len() < IPV4_MIN_LEN {
        return Err(Outcome::Malformed);
    }
    let Some(ip_len) = ipv4_header_len(ip[0]) else {
        return Err(Outcome::Malformed);
    };
    if is_fragment(u16::from_ne_bytes([
        ip[IPV4_FRAG_OFF],
        ip[IPV4_FRAG_OFF + 1],
    ])) {
        return Err(Outcome::PassFragment);
    }
    if ip[IPV4_PROTO_OFF] != IPPROTO_TCP {
        return Err(Outcome::PassNotTcp);
    }
    let total = ipv4_total_len(
        u16::from_ne_bytes([ip[IPV4_TOT_LEN_OFF], ip[IPV4_TOT_LEN_OFF + 1]]),
        frame.len(),
    )
    .unwrap_or(0);
    if ip.len() < ip_len + TCP_MIN_LEN || total < ip_len + TCP_MIN_LEN {
        return Err(Outcome::Malformed);
    }
    Ok(TcpFrame {
        l4_off: ETH_HLEN + ip_len,
    })
}

/// The segment's payload length from the IPv4 total length, the IPv4
/// header length and the TCP data offset byte; 0 if they do not add up.
#[inline(always)]
pub const fn tcp_payload_len(tot_len_raw: u16, ip_len: usize, doff_byte: u8) -> u32 {
    tcp_payload_of(u16::from_be(tot_len_raw) as usize, ip_len, doff_byte)
}

/// [`tcp_payload_len`] from the IPv4 packet's length in bytes (which a
/// BIG TCP packet, over 64 KiB, does not hold in its total length).
#[inline(always)]
pub const fn tcp_payload_of(total: usize, ip_len: usize, doff_byte: u8) -> u32 {
    let headers = ip_len + ((doff_byte >> 4) as usize) * 4;
    if total > headers {
        (total - headers) as u32
    } else {
        0
    }
}

/// Host reference of reading a classified frame's TCP segment.
pub fn segment(frame: &[u8], tcp: TcpFrame) -> Segment {
    let l4 = tcp.l4_off;
    let word = |at: usize| u32::from_be_bytes(frame[at..at + 4].try_into().unwrap_or([0; 4]));
    let ip_len = l4 - ETH_HLEN;
    Segment {
        flags: frame[l4 + TCP_FLAGS_OFF],
        seq: word(l4 + TCP_SEQ_OFF),
        ack: word(l4 + TCP_ACK_OFF),
        payload: tcp_payload_of(
            ipv4_total_len(
                u16::from_ne_bytes([
                    frame[ETH_HLEN + IPV4_TOT_LEN_OFF],
                    frame[ETH_HLEN + IPV4_TOT_LEN_OFF + 1],
                ]),
                frame.len(),
            )
            .unwrap_or(0),
            ip_len,
            frame[l4 + TCP_DOFF_OFF],
        ),
    }
}

/// Which end of the connection a rewrite replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// Reads the (address, port) of one side of a classified frame.
pub fn endpoint(frame: &[u8], tcp: TcpFrame, side: Side) -> Endpoint {
    let (addr_off, port_off) = offsets(tcp, side);
    Endpoint {
        addr: u32::from_ne_bytes(frame[addr_off..addr_off + 4].try_into().unwrap_or([0; 4])),
        port: u16::from_ne_bytes([frame[port_off], frame[port_off + 1]]),
        _pad: 0,
    }
}

fn offsets(tcp: TcpFrame, side: Side) -> (usize, usize) {
    match side {
        Side::Source => (ETH_HLEN + IPV4_SADDR_OFF, tcp.l4_off + TCP_SPORT_OFF),
        Side::Destination => (ETH_HLEN + IPV4_DADDR_OFF, tcp.l4_off + TCP_DPORT_OFF),
    }
}

/// Host reference of the rewrite step: replaces one side's address and port
/// and updates both checksums incrementally, exactly as the XDP program does.
pub fn rewrite(frame: &mut [u8], tcp: TcpFrame, side: Side, to: Endpoint) {
    let from = endpoint(frame, tcp, side);
    let (addr_off, port_off) = offsets(tcp, side);
    let addr_diff = csum::diff32(from.addr, to.addr);
    let port_diff = csum::diff16(from.port, to.port);

    let ip_check_off = ETH_HLEN + IPV4_CHECK_OFF;
    let ip_check = u16::from_ne_bytes([frame[ip_check_off], frame[ip_check_off + 1]]);
    frame[ip_check_off..ip_check_off + 2]
        .copy_from_slice(&csum::apply(ip_check, addr_diff).to_ne_bytes());

    let tcp_check_off = tcp.l4_off + TCP_CHECK_OFF;
    let tcp_check = u16::from_ne_bytes([frame[tcp_check_off], frame[tcp_check_off + 1]]);
    let tcp_check = csum::apply(tcp_check, addr_diff + port_diff);
    frame[tcp_check_off..tcp_check_off + 2].copy_from_slice(&tcp_check.to_ne_bytes());

    frame[addr_off..addr_off + 4].copy_from_slice(&to.addr.to_ne_bytes());
    frame[port_off..port_off + 2].copy_from_slice(&to.port.to_ne_bytes());
}

/// The raw (TTL, protocol) word after a router's TTL decrement, or `None` if
/// the TTL expires here: such a packet goes to the stack, which answers with
/// ICMP time exceeded.
#[inline(always)]
pub const fn forwarded_ttl_word(word_raw: u16) -> Option<u16> {
    let [ttl, proto] = word_raw.to_ne_bytes();
    if ttl <= 1 {
        None
    } else {
        Some(u16::from_ne_bytes([ttl - 1, proto]))
    }
}

/// Host reference of the redirect step: what a router does to the frame -
/// TTL decremented (IPv4 checksum updated incrementally) and the Ethernet
/// addresses of the next hop. Returns false, leaving the frame untouched, if
/// the TTL would expire.
pub fn forward(frame: &mut [u8], src_mac: [u8; 6], dst_mac: [u8; 6]) -> bool {
    let off = ETH_HLEN + IPV4_TTL_OFF;
    let old = u16::from_ne_bytes([frame[off], frame[off + 1]]);
    let Some(new) = forwarded_ttl_word(old) else {
        return false;
    };
    let check_off = ETH_HLEN + IPV4_CHECK_OFF;
    let check = u16::from_ne_bytes([frame[check_off], frame[check_off + 1]]);
    frame[check_off..check_off + 2]
        .copy_from_slice(&csum::apply(check, csum::diff16(old, new)).to_ne_bytes());
    frame[off..off + 2].copy_from_slice(&new.to_ne_bytes());
    frame[..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&src_mac);
    true
}

#[cfg(test)]
mod tests;
