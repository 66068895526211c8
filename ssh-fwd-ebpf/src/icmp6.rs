//! ICMPv6 errors of forwarded connections, as `crate::icmp` for IPv4 and
//! with the same decisions (`ssh_fwd_common::icmp`): a Packet Too Big (or
//! unreachable, or time exceeded) addressed to a frontend about its reply
//! reaches the backend ([`inbound`]), so path-MTU discovery works through
//! the NAT; an error quoting a backend leaves naming the frontend
//! ([`outbound`]), or is dropped. The packet math is
//! `ssh_fwd_common::ipv6::icmp`'s: no IP header checksum, and the ICMPv6
//! checksum covers the outer pseudo-header. Direct writes: the changes sum
//! to zero over the packet, so a CHECKSUM_COMPLETE skb stays valid.

use ssh_fwd_common::{
    csum,
    icmp::{Inbound, inbound_verdict, outbound_frontend, to_backend_allowed},
    ipv6::{
        IPV6_DADDR_OFF, IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_SADDR_OFF, Upper,
        icmp::{
            ICMPV6_CHECK_OFF, ICMPV6_HLEN, QUOTED_CHECK_LEN, QUOTED_PORTS_LEN, is_error,
            quote_checks,
        },
        walk, words_diff,
    },
    maps::{Addr6, Endpoint6},
    outcome::Outcome,
    packet::{ETH_HLEN, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_SEQ_OFF, TCP_SPORT_OFF},
};

use crate::{
    conntrack::{backend_is_local, established, half_open},
    counters::count,
    family::Family,
    packet::{Headers, Packet, bytes_at, put_addr6, put_word, read, word},
};

/// The offsets of an ICMPv6 error quoting a TCP packet, and its ends.
struct Quote {
    icmp: usize,
    ip: usize,
    tcp: usize,
    source: Endpoint6,
    destination: Endpoint6,
}

/// The quote of the ICMPv6 message after the outer headers
/// (`outer_ip_len` bytes), if it is an error quoting TCP far enough for
/// the ports. The quoted headers are walked as any packet's.
#[inline(always)]
fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote> {
    // Masked for the verifier: parsing bounds the headers far below.
    let icmp = ETH_HLEN + (outer_ip_len & 0x1ff);
    // The ICMPv6 header and the quoted fixed header under one bounds
    // check the verifier follows, read where they are (a copy would take
    // stack room).
    let head = bytes_at::<P, { ICMPV6_HLEN + IPV6_HLEN }>(p, icmp)?;
    // SAFETY: inside the range bytes_at checked.
    let (kind, next_header) = unsafe { (*head, *head.add(ICMPV6_HLEN + IPV6_NEXT_HEADER_OFF)) };
    if !is_error(kind) {
        return None;
    }
    let ip = icmp + ICMPV6_HLEN;
    let walked = walk(next_header, |at| read(p, ip + at));
    if walked.upper != Ok(Upper::Tcp) {
        return None;
    }
    let tcp = ip + (walked.ip_headers_len & 0x1ff);
    let ports = read::<P, QUOTED_PORTS_LEN>(p, tcp)?;
    let port = |at: usize| u16::from_ne_bytes([ports[at], ports[at + 1]]);
    let addr = |at: usize| {
        // SAFETY: inside the range bytes_at checked for `head`.
        let words = unsafe { head.add(ICMPV6_HLEN + at) }.cast::<u32>();
        // SAFETY: as above: 16 bytes at `at`, within the quoted header.
        unsafe {
            Addr6([
                words.read_unaligned(),
                words.add(1).read_unaligned(),
                words.add(2).read_unaligned(),
                words.add(3).read_unaligned(),
            ])
        }
    };
    let endpoint = |addr, port| Endpoint6 {
        addr,
        port,
        _pad: [0; 3],
    };
    Some(Quote {
        icmp,
        ip,
        tcp,
        source: endpoint(addr(IPV6_SADDR_OFF), port(TCP_SPORT_OFF)),
        destination: endpoint(addr(IPV6_DADDR_OFF), port(TCP_DPORT_OFF)),
    })
}

/// The sequence number in the quote, if the quote holds it.
#[inline(always)]
fn quoted_seq<P: Packet>(p: &P, q: &Quote) -> Option<u32> {
    read::<P, 4>(p, q.tcp + TCP_SEQ_OFF).map(u32::from_be_bytes)
}

/// What [`inbound`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum In {
    /// Translated: route it to this backend.
    Translated(Endpoint6),
    /// Not an error of a connection of ours: untouched.
    NotOurs,
    /// Quotes a sequence number outside the connection's window, or a
    /// connection this node does not track: drop it (the caller counts
    /// it).
    Drop,
}

/// An inbound ICMPv6 error with outer headers `h`: one about a reply
/// `frontend -> client`, addressed to the frontend, becomes one about
/// `backend -> client` addressed to the backend, if the tracked connection
/// holds the quoted sequence number. One addressed to a backend of this
/// node reaches the pod only if a tracked connection holds the quoted
/// sequence number, as for IPv4.
#[inline(always)]
pub fn inbound<P: Packet>(p: &P, h: &Headers<Addr6>) -> In {
    let Some(q) = quote(p, h.ip_len()) else {
        return In::NotOurs;
    };
    let outer_dst = h.destination.addr;
    if q.source.addr != outer_dst {
        return In::NotOurs;
    }
    // SAFETY: copied out at once.
    let Some(target) = (unsafe { Addr6::frontends().get(q.source) }).copied() else {
        // Addressed to a backend of this node: it reaches the pod only
        // about a tracked connection, within what its server sent.
        // SAFETY: only tested for presence.
        if unsafe { Addr6::reverse().get(q.source) }.is_none() || !backend_is_local(q.source) {
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
    let outer_diff = words_diff(outer_dst, backend.addr);
    if rewrite(
        p,
        &q,
        q.source,
        backend,
        IPV6_SADDR_OFF,
        TCP_SPORT_OFF,
        outer_diff,
    )
    .is_none()
    {
        return In::Drop;
    }
    if put_addr6(p, ETH_HLEN + IPV6_DADDR_OFF, backend.addr).is_none() {
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

/// An ICMPv6 error leaving for a client about a request `client ->
/// backend`: rewritten to name the frontend the client used, as far as
/// state an off-path sender cannot swap says.
#[inline(always)]
pub fn outbound<P: Packet>(p: &P, outer_ip_len: usize) -> Out {
    let Some(q) = quote(p, outer_ip_len) else {
        return Out::NotOurs;
    };
    // SAFETY: copied out at once.
    let Some(primary) = (unsafe { Addr6::reverse().get(q.destination) }).copied() else {
        return Out::NotOurs;
    };
    let conn = established(q.source, q.destination);
    let (half, seq) = match quoted_seq(p, &q) {
        Some(seq) => (half_open(q.source, q.destination, seq), seq),
        None => (None, 0),
    };
    let translated = outbound_frontend(conn, half, seq, &primary).and_then(|frontend| {
        rewrite(
            p,
            &q,
            q.destination,
            frontend,
            IPV6_DADDR_OFF,
            TCP_DPORT_OFF,
            0,
        )
    });
    if translated.is_none() {
        count(Outcome::IcmpDropped);
        return Out::Drop;
    }
    count(Outcome::IcmpTranslated);
    Out::Translated
}

/// Rewrites one end of the quoted packet (`addr_off`/`port_off` within its
/// headers) from `from` to `to`, fixing the quoted TCP checksum if the
/// quote holds it, and the ICMPv6 checksum, which also takes `outer_diff`,
/// the change of the outer pseudo-header.
#[inline(always)]
fn rewrite<P: Packet>(
    p: &P,
    q: &Quote,
    from: Endpoint6,
    to: Endpoint6,
    addr_off: usize,
    port_off: usize,
    outer_diff: u32,
) -> Option<()> {
    // Read before anything is written, so that a quote cut short is seen
    // before the packet is half-written.
    let old_tcp_check = match bytes_at::<P, QUOTED_CHECK_LEN>(p, q.tcp) {
        Some(_) => word(p, q.tcp + TCP_CHECK_OFF),
        None => None,
    };
    let icmp_check = word(p, q.icmp + ICMPV6_CHECK_OFF)?;
    let checks = quote_checks(
        icmp_check,
        old_tcp_check,
        csum::fold(words_diff(from.addr, to.addr)) as u32,
        csum::diff16(from.port, to.port),
        csum::fold(outer_diff) as u32,
    );
    put_addr6(p, q.ip + addr_off, to.addr)?;
    put_word(p, q.tcp + port_off, to.port)?;
    if let Some(check) = checks.tcp {
        put_word(p, q.tcp + TCP_CHECK_OFF, check)?;
    }
    put_word(p, q.icmp + ICMPV6_CHECK_OFF, checks.icmp)
}
