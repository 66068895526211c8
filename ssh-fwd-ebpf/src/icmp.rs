//! ICMP and ICMPv6 errors of forwarded connections, translated as
//! `ssh_fwd_common::icmp` describes: an error addressed to a frontend
//! reaches the backend ([`inbound`]); an error quoting a backend reaches
//! the client naming the frontend ([`outbound`]), or is dropped if it cannot
//! be mapped, so a client never sees a pod's address. The decisions are
//! written once over the family; what differs, finding the quote and the
//! checksum math, is each family's [`Quoting`]: IPv4's here, IPv6's in
//! `crate::icmp6`. Direct writes with incremental checksums, the same in
//! XDP and tc: every change is offset by a checksum in the same header, so
//! even a CHECKSUM_COMPLETE skb stays valid.

use ssh_fwd_common::{
    csum,
    icmp::{
        ICMP_CHECK_OFF, ICMP_HLEN, Inbound, QUOTED_CHECK_LEN, QUOTED_PORTS_LEN, inbound_verdict,
        is_error, outbound_frontend, to_backend_allowed,
    },
    maps::Endpoint,
    outcome::Outcome,
    packet::{
        ETH_HLEN, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_DADDR_OFF, IPV4_MIN_LEN, IPV4_PROTO_OFF,
        IPV4_SADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_SEQ_OFF, TCP_SPORT_OFF, ipv4_header_len,
    },
};

use crate::{
    conntrack::{backend_is_local, established, half_open},
    counters::count,
    family::Family,
    packet::{Headers, Packet, bytes_at, put_addr, put_word, read, word},
};

/// The offsets of an ICMP error quoting a TCP packet, and its ends.
pub struct Quote<A: Family = u32> {
    pub icmp: usize,
    pub ip: usize,
    pub tcp: usize,
    pub source: Endpoint<A>,
    pub destination: Endpoint<A>,
}

/// What differs between ICMP and ICMPv6 errors: where the quote is, and
/// how a rewrite of it keeps the checksums right.
pub trait Quoting: Family {
    /// The quote of the error after the outer headers (`outer_ip_len`
    /// bytes), if it is an error quoting TCP far enough for the ports.
    fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote<Self>>;
    /// Rewrites the quoted source to `backend`, and the outer destination
    /// (`outer_dst`) to the backend's address.
    fn rewrite_inbound<P: Packet>(
        p: &P,
        q: &Quote<Self>,
        outer_dst: Self,
        backend: Endpoint<Self>,
    ) -> Option<()>;
    /// Rewrites the quoted destination to `frontend`.
    fn rewrite_outbound<P: Packet>(p: &P, q: &Quote<Self>, frontend: Endpoint<Self>) -> Option<()>;
}

/// The sequence number in the quote, if the quote holds it.
#[inline(always)]
fn quoted_seq<P: Packet, A: Family>(p: &P, q: &Quote<A>) -> Option<u32> {
    read::<P, 4>(p, q.tcp + TCP_SEQ_OFF).map(u32::from_be_bytes)
}

/// What [`inbound`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum In<A: Family = u32> {
    /// Translated: route it to this backend.
    Translated(Endpoint<A>),
    /// Not an error of a connection of ours, or one the backend's own node
    /// may let through: untouched.
    NotOurs,
    /// Quotes a sequence number outside the connection's window, or a
    /// connection the pod's node does not track: drop it (the caller
    /// counts it).
    Drop,
}

/// An inbound error with outer headers `h`. One about a reply
/// `frontend -> client`, addressed to the frontend, is rewritten to be
/// about `backend -> client` and addressed to the backend, if the tracked
/// connection holds the quoted sequence number (on a node whose backend
/// lives elsewhere, by the frontend map alone: see
/// `ssh_fwd_common::icmp::inbound_verdict`). One addressed to a backend of
/// this node (another node translated it) reaches the pod only if the
/// connection here holds the quoted sequence number.
#[inline(always)]
pub fn inbound<P: Packet, A: Quoting>(p: &P, h: &Headers<A>) -> In<A> {
    let Some(q) = A::quote(p, h.ip_len) else {
        return In::NotOurs;
    };
    let outer_dst = h.destination.addr;
    if q.source.addr != outer_dst {
        return In::NotOurs;
    }
    // SAFETY: copied out at once.
    let Some(target) = (unsafe { A::frontends().get(q.source) }).copied() else {
        // Addressed to a backend of this node: it reaches the pod only
        // about a tracked connection, within what its server sent.
        // SAFETY: only tested for presence.
        if unsafe { A::reverse().get(q.source) }.is_none() || !backend_is_local(q.source) {
            return In::NotOurs;
        }
        let conn = established(q.destination, q.source);
        return if to_backend_allowed(conn, quoted_seq(p, &q)) {
            In::NotOurs
        } else {
            In::Drop
        };
    };
    let backend = target.endpoint;
    let conn = established(q.destination, backend);
    match inbound_verdict(conn, q.source, quoted_seq(p, &q), backend_is_local(backend)) {
        Inbound::NotOurs => return In::NotOurs,
        Inbound::Drop => return In::Drop,
        Inbound::Deliver => {}
    }
    if A::rewrite_inbound(p, &q, outer_dst, backend).is_none() {
        return In::Drop;
    }
    count(Outcome::IcmpTranslated);
    In::Translated(backend)
}

/// What [`outbound`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// Not an error quoting one of our backends: untouched.
    NotOurs,
    /// Translated to name the frontend.
    Translated,
    /// Quotes a backend that cannot be mapped back: drop it.
    Drop,
}

/// An error a node sends a client about a request `client -> backend`:
/// rewritten to name the frontend the client used, as far as state an
/// off-path sender cannot swap says (`ssh_fwd_common::icmp::outbound_frontend`).
#[inline(always)]
pub fn outbound<P: Packet, A: Quoting>(p: &P, outer_ip_len: usize) -> Out {
    let Some(q) = A::quote(p, outer_ip_len) else {
        return Out::NotOurs;
    };
    // SAFETY: copied out at once.
    let Some(primary) = (unsafe { A::reverse().get(q.destination) }).copied() else {
        return Out::NotOurs;
    };
    let conn = established(q.source, q.destination);
    // The half-open entry counts only for a quote that holds the sequence
    // number to check it by.
    let (half, seq) = match quoted_seq(p, &q) {
        Some(seq) => (half_open(q.source, q.destination, seq), seq),
        None => (None, 0),
    };
    let translated = outbound_frontend(conn, half, seq, &primary)
        .and_then(|frontend| A::rewrite_outbound(p, &q, frontend));
    if translated.is_none() {
        count(Outcome::IcmpDropped);
        return Out::Drop;
    }
    count(Outcome::IcmpTranslated);
    Out::Translated
}

impl Quoting for u32 {
    #[inline(always)]
    fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote> {
        quote(p, outer_ip_len)
    }

    /// The outer header's checksum takes the address's change.
    #[inline(always)]
    fn rewrite_inbound<P: Packet>(
        p: &P,
        q: &Quote,
        outer_dst: u32,
        backend: Endpoint,
    ) -> Option<()> {
        rewrite(p, q, q.source, backend, IPV4_SADDR_OFF, TCP_SPORT_OFF)?;
        let check = word(p, ETH_HLEN + IPV4_CHECK_OFF)?;
        put_word(
            p,
            ETH_HLEN + IPV4_CHECK_OFF,
            csum::apply(check, csum::diff32(outer_dst, backend.addr)),
        )?;
        put_addr(p, ETH_HLEN + IPV4_DADDR_OFF, backend.addr)
    }

    #[inline(always)]
    fn rewrite_outbound<P: Packet>(p: &P, q: &Quote, frontend: Endpoint) -> Option<()> {
        rewrite(p, q, q.destination, frontend, IPV4_DADDR_OFF, TCP_DPORT_OFF)
    }
}

/// IPv4's [`Quoting::quote`].
#[inline(always)]
fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote> {
    let icmp = ETH_HLEN + outer_ip_len;
    let head = read::<P, { ICMP_HLEN + IPV4_MIN_LEN }>(p, icmp)?;
    if !is_error(head[0]) || head[ICMP_HLEN + IPV4_PROTO_OFF] != IPPROTO_TCP {
        return None;
    }
    let ip = icmp + ICMP_HLEN;
    let ip_len = ipv4_header_len(head[ICMP_HLEN])?;
    let tcp = ip + ip_len;
    let ports = read::<P, QUOTED_PORTS_LEN>(p, tcp)?;
    let addr = |at: usize| {
        u32::from_ne_bytes([
            head[ICMP_HLEN + at],
            head[ICMP_HLEN + at + 1],
            head[ICMP_HLEN + at + 2],
            head[ICMP_HLEN + at + 3],
        ])
    };
    Some(Quote {
        icmp,
        ip,
        tcp,
        source: Endpoint {
            addr: addr(IPV4_SADDR_OFF),
            port: u16::from_ne_bytes([ports[TCP_SPORT_OFF], ports[TCP_SPORT_OFF + 1]]),
            _pad: 0,
        },
        destination: Endpoint {
            addr: addr(IPV4_DADDR_OFF),
            port: u16::from_ne_bytes([ports[TCP_DPORT_OFF], ports[TCP_DPORT_OFF + 1]]),
            _pad: 0,
        },
    })
}

/// Rewrites one end of the quoted packet (`addr_off`/`port_off` within its
/// headers) from `from` to `to`, fixing the quoted IPv4 checksum, the quoted
/// TCP checksum if the quote holds it, and the ICMP checksum.
#[inline(always)]
fn rewrite<P: Packet>(
    p: &P,
    q: &Quote,
    from: Endpoint,
    to: Endpoint,
    addr_off: usize,
    port_off: usize,
) -> Option<()> {
    let addr_diff = csum::diff32(from.addr, to.addr);
    let port_diff = csum::diff16(from.port, to.port);
    let old_ip_check = word(p, q.ip + IPV4_CHECK_OFF)?;
    let new_ip_check = csum::apply(old_ip_check, addr_diff);
    let mut icmp_diff = addr_diff + csum::diff16(old_ip_check, new_ip_check) + port_diff;
    // Read the TCP checksum before writing anything, so that a quote cut
    // short is seen before the packet is half-written.
    let tcp_check = bytes_at::<P, QUOTED_CHECK_LEN>(p, q.tcp).map(|_| ());
    let old_tcp_check = match tcp_check {
        Some(()) => word(p, q.tcp + TCP_CHECK_OFF),
        None => None,
    };
    put_word(p, q.ip + IPV4_CHECK_OFF, new_ip_check)?;
    put_addr(p, q.ip + addr_off, to.addr)?;
    put_word(p, q.tcp + port_off, to.port)?;
    if let Some(old) = old_tcp_check {
        let new = csum::apply(old, addr_diff + port_diff);
        put_word(p, q.tcp + TCP_CHECK_OFF, new)?;
        icmp_diff += csum::diff16(old, new);
    }
    let icmp_check = word(p, q.icmp + ICMP_CHECK_OFF)?;
    put_word(
        p,
        q.icmp + ICMP_CHECK_OFF,
        csum::apply(icmp_check, icmp_diff),
    )
}
