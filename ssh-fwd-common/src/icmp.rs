//! ICMP errors of forwarded connections, translated both ways so that
//! path-MTU discovery works through the NAT and no ICMP error shows a pod's
//! address to a client:
//!
//! - **Inbound**: a router's "fragmentation needed" (or any destination
//!   unreachable / time exceeded) is addressed to the frontend and quotes the
//!   reply `frontend -> client`. The outer destination and the quoted source
//!   become the backend's, so the pod's stack finds its socket.
//! - **Outbound**: an error a node sends a client about a request it
//!   forwarded quotes `client -> backend`. The quoted destination becomes
//!   the frontend, the address the client knows.
//!
//! The decisions are written over the address family, and serve ICMPv6
//! errors too (`crate::ipv6::icmp` has their packet math).
//!
//! Every checksum is updated incrementally: the outer IPv4 header's (for an
//! inbound error), the quoted IPv4 header's, the quoted TCP checksum when
//! the quote holds it, and the ICMP checksum over all of it. These are the
//! host references the kernel programs are checked against, byte for byte.

use crate::{
    conntrack::{closing, icmp_in_window},
    csum,
    maps::{Addr, Conn, Endpoint, FLAG_SHARED_BACKEND, HalfOpen, NatTarget},
    packet::{
        ETH_HLEN, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_DADDR_OFF, IPV4_MIN_LEN, IPV4_PROTO_OFF,
        IPV4_SADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_SPORT_OFF, ipv4_header_len,
    },
};

pub const ICMP_DEST_UNREACH: u8 = 3;
pub const ICMP_TIME_EXCEEDED: u8 = 11;
/// Destination unreachable, fragmentation needed (DF set).
pub const ICMP_FRAG_NEEDED: u8 = 4;
pub const ICMP_HLEN: usize = 8;
pub const ICMP_CHECK_OFF: usize = 2;
/// Bytes of the quoted TCP header needed to rewrite its ports.
pub const QUOTED_PORTS_LEN: usize = 4;
/// Bytes of the quoted TCP header that hold its checksum.
pub const QUOTED_CHECK_LEN: usize = TCP_CHECK_OFF + 2;

/// ICMP types that quote the packet that caused them and are translated.
#[inline(always)]
pub const fn is_error(icmp_type: u8) -> bool {
    matches!(icmp_type, ICMP_DEST_UNREACH | ICMP_TIME_EXCEEDED)
}

/// Where the parts of an ICMP error that quotes a TCP packet are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quote {
    /// Offset of the ICMP header.
    pub icmp: usize,
    /// Offset of the quoted IPv4 header.
    pub ip: usize,
    /// Offset of the quoted TCP header.
    pub tcp: usize,
    /// The quote reaches the TCP checksum.
    pub has_tcp_check: bool,
    /// The quoted packet's source and destination.
    pub source: Endpoint,
    pub destination: Endpoint,
}

/// What to do with an inbound error (one about a reply `frontend ->
/// client`, or, on the backend's node, about `backend -> client` once
/// another node translated it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Translate it (or, on the backend's node, let it reach the pod).
    Deliver,
    /// Not an error of a connection through this frontend: leave it.
    NotOurs,
    /// It quotes a sequence number the server did not send, or a
    /// connection the pod's node does not track: drop it.
    Drop,
}

/// Inbound: what to do with an error about a reply from `frontend` whose
/// quote holds the server's sequence number `quoted_seq` (`None`: the quote
/// is too short to), given the established entry of the quoted connection
/// on this node and whether its backend is `local` here. On the pod's node
/// the entry decides: it must be this frontend's (or closed), and the
/// sequence number within what the server sent
/// (`conntrack::icmp_in_window`); no entry there, no delivery. A node
/// whose backend lives elsewhere has no entry and translates by the
/// frontend map alone; the backend's node checks it again
/// ([`to_backend_allowed`]).
#[inline(always)]
pub fn inbound_verdict<A: Addr>(
    conn: Option<&Conn<Endpoint<A>>>,
    frontend: Endpoint<A>,
    quoted_seq: Option<u32>,
    local: bool,
) -> Inbound {
    match conn {
        Some(c) if c.frontend != frontend && !closing(c) => Inbound::NotOurs,
        Some(c) => match quoted_seq {
            Some(seq) if icmp_in_window(c, seq) => Inbound::Deliver,
            _ => Inbound::Drop,
        },
        None if local => Inbound::Drop,
        None => Inbound::Deliver,
    }
}

/// Inbound, on the backend's node: whether an error another node
/// translated (now about `backend -> client`) may reach the pod, given the
/// established entry of the quoted connection here.
#[inline(always)]
pub fn to_backend_allowed<A: Addr>(
    conn: Option<&Conn<Endpoint<A>>>,
    quoted_seq: Option<u32>,
) -> bool {
    matches!((conn, quoted_seq), (Some(c), Some(seq)) if icmp_in_window(c, seq))
}

/// Outbound: the frontend an error about a request `client -> backend`
/// must name, or `None` to drop it (never show the backend). The
/// established entry's, if there is one; the half-open entry's only if the
/// error quotes exactly the SYN that made it (`quoted_seq`, the quoted
/// sequence number, is its ISN: a spoofed SYN that replaced the entry has
/// another; pass no half-open entry for a quote too short to hold it); for
/// a backend behind one frontend, that one. Otherwise the frontend cannot
/// be known for sure, and the error is dropped.
#[inline(always)]
pub fn outbound_frontend<A: Addr>(
    conn: Option<&Conn<Endpoint<A>>>,
    half: Option<&HalfOpen<Endpoint<A>>>,
    quoted_seq: u32,
    primary: &NatTarget<A>,
) -> Option<Endpoint<A>> {
    if let Some(c) = conn {
        return Some(c.frontend);
    }
    if let Some(h) = half
        && quoted_seq == h.client_isn
    {
        return Some(h.frontend);
    }
    (primary.flags & FLAG_SHARED_BACKEND == 0).then_some(primary.endpoint)
}

/// Host reference: the quote of an ICMP error in `frame` (whose outer IPv4
/// header is `outer_ip_len` bytes), if it is an error quoting TCP.
pub fn parse(frame: &[u8], outer_ip_len: usize) -> Option<Quote> {
    let icmp = ETH_HLEN + outer_ip_len;
    if frame.len() < icmp + ICMP_HLEN + IPV4_MIN_LEN || !is_error(frame[icmp]) {
        return None;
    }
    let ip = icmp + ICMP_HLEN;
    let ip_len = ipv4_header_len(frame[ip])?;
    if frame[ip + IPV4_PROTO_OFF] != IPPROTO_TCP {
        return None;
    }
    let tcp = ip + ip_len;
    if frame.len() < tcp + QUOTED_PORTS_LEN {
        return None;
    }
    let addr = |at: usize| u32::from_ne_bytes(frame[at..at + 4].try_into().unwrap_or([0; 4]));
    let port = |at: usize| u16::from_ne_bytes([frame[at], frame[at + 1]]);
    Some(Quote {
        icmp,
        ip,
        tcp,
        has_tcp_check: frame.len() >= tcp + QUOTED_CHECK_LEN,
        source: Endpoint {
            addr: addr(ip + IPV4_SADDR_OFF),
            port: port(tcp + TCP_SPORT_OFF),
            _pad: 0,
        },
        destination: Endpoint {
            addr: addr(ip + IPV4_DADDR_OFF),
            port: port(tcp + TCP_DPORT_OFF),
            _pad: 0,
        },
    })
}

/// Which end of the quoted packet is rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quoted {
    /// Inbound: the quoted reply's source (the frontend) becomes the
    /// backend, and so does the outer destination.
    Source,
    /// Outbound: the quoted request's destination (the backend) becomes the
    /// frontend.
    Destination,
}

/// Host reference of the translation: the quoted `which` end becomes `to`;
/// for [`Quoted::Source`] the outer destination becomes `to`'s address too.
pub fn translate(frame: &mut [u8], q: &Quote, which: Quoted, to: Endpoint) {
    let word = |f: &[u8], at: usize| u16::from_ne_bytes([f[at], f[at + 1]]);
    let put = |f: &mut [u8], at: usize, w: u16| f[at..at + 2].copy_from_slice(&w.to_ne_bytes());
    let (from, addr_off, port_off) = match which {
        Quoted::Source => (q.source, IPV4_SADDR_OFF, TCP_SPORT_OFF),
        Quoted::Destination => (q.destination, IPV4_DADDR_OFF, TCP_DPORT_OFF),
    };
    let addr_diff = csum::diff32(from.addr, to.addr);
    let port_diff = csum::diff16(from.port, to.port);
    // The quoted IPv4 header: address and checksum.
    let old_ip_check = word(frame, q.ip + IPV4_CHECK_OFF);
    let new_ip_check = csum::apply(old_ip_check, addr_diff);
    put(frame, q.ip + IPV4_CHECK_OFF, new_ip_check);
    frame[q.ip + addr_off..q.ip + addr_off + 4].copy_from_slice(&to.addr.to_ne_bytes());
    // The quoted TCP header: port, and checksum if quoted.
    put(frame, q.tcp + port_off, to.port);
    let mut icmp_diff = addr_diff + csum::diff16(old_ip_check, new_ip_check) + port_diff;
    if q.has_tcp_check {
        let old = word(frame, q.tcp + TCP_CHECK_OFF);
        let new = csum::apply(old, addr_diff + port_diff);
        put(frame, q.tcp + TCP_CHECK_OFF, new);
        icmp_diff += csum::diff16(old, new);
    }
    let icmp_check = word(frame, q.icmp + ICMP_CHECK_OFF);
    put(
        frame,
        q.icmp + ICMP_CHECK_OFF,
        csum::apply(icmp_check, icmp_diff),
    );
    if which == Quoted::Source {
        let outer = ETH_HLEN;
        let old_dst = u32::from_ne_bytes(
            frame[outer + IPV4_DADDR_OFF..outer + IPV4_DADDR_OFF + 4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        let check = word(frame, outer + IPV4_CHECK_OFF);
        put(
            frame,
            outer + IPV4_CHECK_OFF,
            csum::apply(check, csum::diff32(old_dst, to.addr)),
        );
        frame[outer + IPV4_DADDR_OFF..outer + IPV4_DADDR_OFF + 4]
            .copy_from_slice(&to.addr.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests;
