//! ICMPv6 errors of forwarded connections: IPv6's [`Quoting`], the part
//! of `crate::icmp` that differs by family (the decisions are written once
//! there). A Packet Too Big (or unreachable, or time exceeded) addressed
//! to a frontend about its reply reaches the backend, so path-MTU
//! discovery works through the NAT; an error quoting a backend leaves
//! naming the frontend, or is dropped. The packet math is
//! `ssh_fwd_common::ipv6::icmp`'s: no IP header checksum, and the ICMPv6
//! checksum covers the outer pseudo-header. Direct writes: the changes sum
//! to zero over the packet, so a CHECKSUM_COMPLETE skb stays valid.

use ssh_fwd_common::{
    csum,
    ipv6::{
        IPV6_DADDR_OFF, IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_SADDR_OFF, Upper,
        icmp::{
            ICMPV6_CHECK_OFF, ICMPV6_HLEN, QUOTED_CHECK_LEN, QUOTED_PORTS_LEN, is_error,
            quote_checks,
        },
        walk, words_diff,
    },
    maps::{Addr6, Endpoint6},
    packet::{ETH_HLEN, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_SPORT_OFF},
};

use crate::{
    icmp::{Quote, Quoting},
    packet::{Packet, bytes_at, put_addr6, put_word, read, word},
};

impl Quoting for Addr6 {
    #[inline(always)]
    fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote<Addr6>> {
        quote(p, outer_ip_len)
    }

    /// The ICMPv6 checksum takes the change of the outer pseudo-header
    /// too.
    #[inline(always)]
    fn rewrite_inbound<P: Packet>(
        p: &P,
        q: &Quote<Addr6>,
        outer_dst: Addr6,
        backend: Endpoint6,
    ) -> Option<()> {
        let outer_diff = words_diff(outer_dst, backend.addr);
        rewrite(
            p,
            q,
            q.source,
            backend,
            IPV6_SADDR_OFF,
            TCP_SPORT_OFF,
            outer_diff,
        )?;
        put_addr6(p, ETH_HLEN + IPV6_DADDR_OFF, backend.addr)
    }

    #[inline(always)]
    fn rewrite_outbound<P: Packet>(p: &P, q: &Quote<Addr6>, frontend: Endpoint6) -> Option<()> {
        rewrite(
            p,
            q,
            q.destination,
            frontend,
            IPV6_DADDR_OFF,
            TCP_DPORT_OFF,
            0,
        )
    }
}

/// The quote of the ICMPv6 message after the outer headers
/// (`outer_ip_len` bytes), if it is an error quoting TCP far enough for
/// the ports. The quoted headers are walked as any packet's.
#[inline(always)]
fn quote<P: Packet>(p: &P, outer_ip_len: usize) -> Option<Quote<Addr6>> {
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

/// Rewrites one end of the quoted packet (`addr_off`/`port_off` within its
/// headers) from `from` to `to`, fixing the quoted TCP checksum if the
/// quote holds it, and the ICMPv6 checksum, which also takes `outer_diff`,
/// the change of the outer pseudo-header.
#[inline(always)]
fn rewrite<P: Packet>(
    p: &P,
    q: &Quote<Addr6>,
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
