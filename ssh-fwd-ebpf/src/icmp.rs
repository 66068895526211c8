//! ICMP errors of forwarded connections, translated as
//! `ssh_fwd_common::icmp` describes: an error addressed to a frontend
//! reaches the backend ([`inbound`]); an error quoting a backend reaches
//! the client naming the frontend ([`outbound`]), or is dropped if it cannot
//! be mapped, so a client never sees a pod's address. Direct writes with
//! incremental checksums, the same in XDP and tc: every change is offset by
//! a checksum in the same header, so even a CHECKSUM_COMPLETE skb stays
//! valid.

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
    maps::{FRONTENDS, REVERSE},
    packet::{Headers, Packet, bytes_at, put_addr, put_word, read, word},
};

/// The offsets of an ICMP error quoting a TCP packet.
struct Quote {
    icmp: usize,
    ip: usize,
    tcp: usize,
    source: Endpoint,
    destination: Endpoint,
}

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

/// What [`inbound`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum In {
    /// Translated: route it to this backend.
    Translated(Endpoint),
    /// Not an error of a connection of ours, or one the backend's own node
    /// may let through: untouched.
    NotOurs,
    /// Quotes a sequence number outside the connection's window, or a
    /// connection the pod's node does not track: drop it (the caller
    /// counts it).
    Drop,
}

/// The sequence number in the quote, if the quote holds it.
#[inline(always)]
fn quoted_seq<P: Packet>(p: &P, q: &Quote) -> Option<u32> {
    read::<P, 4>(p, q.tcp + TCP_SEQ_OFF).map(u32::from_be_bytes)
}

/// An inbound ICMP error with outer headers `h`. One about a reply
/// `frontend -> client`, addressed to the frontend, is rewritten to be
/// about `backend -> client` and addressed to the backend, if the tracked
/// connection holds the quoted sequence number (on a node whose backend
/// lives elsewhere, by the frontend map alone: see
/// `ssh_fwd_common::icmp::inbound_verdict`). One addressed to a backend of
/// this node (another node translated it) reaches the pod only if the
/// connection here holds the quoted sequence number.
#[inline(always)]
pub fn inbound<P: Packet>(p: &P, h: &Headers) -> In {
    let Some(q) = quote(p, h.ip_len) else {
        return In::NotOurs;
    };
    let outer_dst = h.destination.addr;
    if q.source.addr != outer_dst {
        return In::NotOurs;
    }
    // SAFETY: copied out at once.
    let Some(target) = (unsafe { FRONTENDS.get(q.source) }).copied() else {
        // SAFETY: only tested for presence.
        if unsafe { REVERSE.get(q.source) }.is_none() || !backend_is_local(q.source) {
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
    if rewrite(p, &q, q.source, backend, IPV4_SADDR_OFF, TCP_SPORT_OFF).is_none() {
        return In::Drop;
    }
    let translated = word(p, ETH_HLEN + IPV4_CHECK_OFF).and_then(|check| {
        put_word(
            p,
            ETH_HLEN + IPV4_CHECK_OFF,
            csum::apply(check, csum::diff32(outer_dst, backend.addr)),
        )?;
        put_addr(p, ETH_HLEN + IPV4_DADDR_OFF, backend.addr)
    });
    if translated.is_none() {
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
pub fn outbound<P: Packet>(p: &P, outer_ip_len: usize) -> Out {
    let Some(q) = quote(p, outer_ip_len) else {
        return Out::NotOurs;
    };
    // SAFETY: copied out at once.
    let Some(primary) = (unsafe { REVERSE.get(q.destination) }).copied() else {
        return Out::NotOurs;
    };
    let conn = established(q.source, q.destination);
    // The half-open entry counts only for a quote that holds the sequence
    // number to check it by.
    let (half, seq) = match read::<P, 4>(p, q.tcp + TCP_SEQ_OFF) {
        Some(seq) => {
            let seq = u32::from_be_bytes(seq);
            (half_open(q.source, q.destination, seq), seq)
        }
        None => (None, 0),
    };
    let Some(frontend) = outbound_frontend(conn, half, seq, &primary) else {
        count(Outcome::IcmpDropped);
        return Out::Drop;
    };
    if rewrite(
        p,
        &q,
        q.destination,
        frontend,
        IPV4_DADDR_OFF,
        TCP_DPORT_OFF,
    )
    .is_none()
    {
        count(Outcome::IcmpDropped);
        return Out::Drop;
    }
    count(Outcome::IcmpTranslated);
    Out::Translated
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
