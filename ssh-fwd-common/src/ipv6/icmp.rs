//! ICMPv6 errors of forwarded connections (RFC 4443): the packet that
//! caused one is quoted after its 8-byte header, and is translated the way
//! [`crate::icmp`] translates an ICMP error's quote, so path-MTU discovery
//! works through the NAT and no error shows a pod's address to a client.
//!
//! Two things differ from IPv4. No IPv6 header has a checksum, quoted or
//! not. And the ICMPv6 checksum covers a pseudo-header (RFC 4443 2.3), so
//! when an inbound error's outer destination becomes the backend, the
//! ICMPv6 checksum moves with it too.

use super::{
    IPV6_ADDR_LEN, IPV6_DADDR_OFF, IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_SADDR_OFF, Upper,
    address_diff, head_at, walk,
};
use crate::{
    csum,
    icmp::Quoted,
    maps::{Addr6, Endpoint6},
    packet::{ETH_HLEN, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_SEQ_OFF, TCP_SPORT_OFF},
};

pub const ICMPV6_DEST_UNREACH: u8 = 1;
pub const ICMPV6_PKT_TOOBIG: u8 = 2;
pub const ICMPV6_TIME_EXCEED: u8 = 3;
/// Type, code, checksum and the 32-bit field (the MTU of a Packet Too
/// Big, unused otherwise); the quote follows.
pub const ICMPV6_HLEN: usize = 8;
pub const ICMPV6_CHECK_OFF: usize = 2;
/// Bytes of the quoted TCP header needed to rewrite its ports.
pub const QUOTED_PORTS_LEN: usize = 4;
/// Bytes of the quoted TCP header that hold its sequence number.
pub const QUOTED_SEQ_LEN: usize = TCP_SEQ_OFF + 4;
/// Bytes of the quoted TCP header that hold its checksum.
pub const QUOTED_CHECK_LEN: usize = TCP_CHECK_OFF + 2;

/// ICMPv6 types that quote the packet that caused them and are translated.
#[inline(always)]
pub const fn is_error(icmp_type: u8) -> bool {
    matches!(
        icmp_type,
        ICMPV6_DEST_UNREACH | ICMPV6_PKT_TOOBIG | ICMPV6_TIME_EXCEED
    )
}

/// Where the parts of an ICMPv6 error that quotes a TCP packet are, and
/// what the quote says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quote {
    /// Offset of the ICMPv6 header.
    pub icmp: usize,
    /// Offset of the quoted IPv6 header.
    pub ip: usize,
    /// Offset of the quoted TCP header.
    pub tcp: usize,
    pub source: Endpoint6,
    pub destination: Endpoint6,
    /// The quoted sequence number, host order, if the quote reaches it.
    pub seq: Option<u32>,
    /// The quote reaches the TCP checksum. A quote cut after its first
    /// byte keeps that byte as it is: the new one depends on the byte cut
    /// off. The ICMPv6 checksum covers it as it is.
    pub has_tcp_check: bool,
}

/// Host reference: the quote of the ICMPv6 error whose header is at
/// `icmp` in `frame`, if it is an error quoting TCP far enough for the
/// ports. The quoted packet is walked like any other, within the quote;
/// its payload length is the original's and is not checked.
pub fn parse(frame: &[u8], icmp: usize) -> Option<Quote> {
    let ip = icmp + ICMPV6_HLEN;
    if frame.len() < ip + IPV6_HLEN || !is_error(frame[icmp]) {
        return None;
    }
    let quoted = &frame[ip..];
    let transport = walk(quoted[IPV6_NEXT_HEADER_OFF], |at| head_at(quoted, at))
        .transport()
        .ok()?;
    if transport.protocol != Upper::Tcp {
        return None;
    }
    let tcp = ip + transport.ip_headers_len;
    if frame.len() < tcp + QUOTED_PORTS_LEN {
        return None;
    }
    let addr = |at: usize| {
        frame[at..at + IPV6_ADDR_LEN]
            .try_into()
            .unwrap_or([0; IPV6_ADDR_LEN])
    };
    let port = |at: usize| u16::from_ne_bytes([frame[at], frame[at + 1]]);
    let seq = frame
        .get(tcp + TCP_SEQ_OFF..tcp + QUOTED_SEQ_LEN)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes);
    Some(Quote {
        icmp,
        ip,
        tcp,
        source: Endpoint6 {
            addr: Addr6::from_octets(addr(ip + IPV6_SADDR_OFF)),
            port: port(tcp + TCP_SPORT_OFF),
            _pad: [0; 3],
        },
        destination: Endpoint6 {
            addr: Addr6::from_octets(addr(ip + IPV6_DADDR_OFF)),
            port: port(tcp + TCP_DPORT_OFF),
            _pad: [0; 3],
        },
        seq,
        has_tcp_check: frame.len() >= tcp + QUOTED_CHECK_LEN,
    })
}

/// The checksums of an ICMPv6 error after a rewrite of its quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuoteChecks {
    /// The quoted TCP checksum, if quoted.
    pub tcp: Option<u16>,
    pub icmp: u16,
}

/// The checksums after one quoted end changes by `addr_diff` (from
/// [`address_diff`]) and `port_diff`, and the outer pseudo-header by
/// `outer_diff` (the outer destination's [`address_diff`] for an inbound
/// error, 0 for an outbound one). The quoted TCP checksum takes the
/// quoted end's change (its pseudo-header holds the address, its header
/// the port); the ICMPv6 checksum takes that change, the quoted TCP
/// checksum's, and the outer pseudo-header's.
#[inline(always)]
pub const fn quote_checks(
    icmp_check: u16,
    tcp_check: Option<u16>,
    addr_diff: u32,
    port_diff: u32,
    outer_diff: u32,
) -> QuoteChecks {
    let end_diff = addr_diff + port_diff;
    let mut icmp_diff = end_diff + outer_diff;
    let tcp = match tcp_check {
        Some(old) => {
            let new = csum::apply(old, end_diff);
            icmp_diff += csum::diff16(old, new);
            Some(new)
        }
        None => None,
    };
    QuoteChecks {
        tcp,
        icmp: csum::apply(icmp_check, icmp_diff),
    }
}

/// Host reference of the translation: the quoted `which` end becomes `to`;
/// for [`Quoted::Source`] (inbound) the outer destination becomes `to`'s
/// address too.
pub fn translate(frame: &mut [u8], q: &Quote, which: Quoted, to: Endpoint6) {
    let word = |f: &[u8], at: usize| u16::from_ne_bytes([f[at], f[at + 1]]);
    let put = |f: &mut [u8], at: usize, w: u16| f[at..at + 2].copy_from_slice(&w.to_ne_bytes());
    let (from, addr_off, port_off) = match which {
        Quoted::Source => (q.source, IPV6_SADDR_OFF, TCP_SPORT_OFF),
        Quoted::Destination => (q.destination, IPV6_DADDR_OFF, TCP_DPORT_OFF),
    };
    let outer_dst = ETH_HLEN + IPV6_DADDR_OFF..ETH_HLEN + IPV6_DADDR_OFF + IPV6_ADDR_LEN;
    let outer_diff = match which {
        Quoted::Source => {
            let old: [u8; IPV6_ADDR_LEN] = frame[outer_dst.clone()]
                .try_into()
                .unwrap_or([0; IPV6_ADDR_LEN]);
            address_diff(old, to.addr.octets())
        }
        Quoted::Destination => 0,
    };
    let checks = quote_checks(
        word(frame, q.icmp + ICMPV6_CHECK_OFF),
        q.has_tcp_check.then(|| word(frame, q.tcp + TCP_CHECK_OFF)),
        address_diff(from.addr.octets(), to.addr.octets()),
        csum::diff16(from.port, to.port),
        outer_diff,
    );
    frame[q.ip + addr_off..q.ip + addr_off + IPV6_ADDR_LEN].copy_from_slice(&to.addr.octets());
    put(frame, q.tcp + port_off, to.port);
    if let Some(check) = checks.tcp {
        put(frame, q.tcp + TCP_CHECK_OFF, check);
    }
    put(frame, q.icmp + ICMPV6_CHECK_OFF, checks.icmp);
    if which == Quoted::Source {
        frame[outer_dst].copy_from_slice(&to.addr.octets());
    }
}
