//! XDP ingress: the same work as the tc ingress program, before the kernel
//! builds an skb: rewrite `frontend -> backend` in place with the
//! connection tracking, learn the frontend a SYN from another node carries,
//! translate ICMP errors addressed to frontends; then hand the packet to the
//! stack, which routes it to the pod through netfilter (PREROUTING,
//! FORWARD, POSTROUTING): this program never redirects, so `--redirect`
//! changes nothing here.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use ssh_fwd_common::{
    conntrack::Segment,
    csum,
    maps::Endpoint,
    outcome::Outcome,
    packet::{ETH_HLEN, IPV4_CHECK_OFF, IPV4_DADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF},
};

use crate::{
    conntrack,
    counters::{Direction, count, count_mapping},
    icmp, ipopt,
    maps::{FRONTENDS, REVERSE},
    mss,
    packet::{Headers, Transport, parse, put_addr, put_word, word},
    partial,
};

#[xdp]
pub fn ssh_fwd_ingress_xdp(ctx: XdpContext) -> u32 {
    // A translated ICMP error was counted as such already.
    let Some(outcome) = ingress(&ctx) else {
        return xdp_action::XDP_PASS;
    };
    count(outcome);
    match outcome {
        // The 4-tuple is another frontend's, a handshake the full table
        // holds back, or a rewrite went wrong.
        Outcome::ConflictDropped | Outcome::ConnTableFull | Outcome::RewriteError => {
            xdp_action::XDP_DROP
        }
        // Every other outcome passes: a packet we do not own is the stack's
        // business.
        _ => xdp_action::XDP_PASS,
    }
}

#[inline(always)]
fn ingress(ctx: &XdpContext) -> Option<Outcome> {
    let h = match parse(ctx) {
        Some(Ok(h)) => h,
        Some(Err(outcome)) => return Some(outcome),
        None => return Some(Outcome::Malformed),
    };
    match h.transport {
        // Translated or not, the stack routes it.
        Transport::Icmp => icmp::inbound(ctx, h.ip_len, h.destination.addr)
            .is_none()
            .then_some(Outcome::PassNotTcp),
        Transport::Tcp => Some(tcp(ctx, &h, &h.seg)),
    }
}

#[inline(always)]
fn tcp(ctx: &XdpContext, h: &Headers, seg: &Segment) -> Outcome {
    let (client, frontend) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    let Some(target) = (unsafe { FRONTENDS.get(frontend) }).copied() else {
        // SAFETY: only tested for presence.
        if unsafe { REVERSE.get(h.destination) }.is_some() {
            return to_backend(ctx, h, seg);
        }
        return Outcome::PassNoFrontend;
    };
    let backend = target.endpoint;
    if let Err(outcome) = conntrack::request(client, frontend, backend, target.slot, seg) {
        return outcome;
    }
    if dnat(ctx, h, frontend, backend).is_none() {
        return Outcome::RewriteError;
    }
    let bytes = (ctx.data_end() - ctx.data()) as u64;
    count_mapping(target.slot, Direction::ToBackend, bytes);
    Outcome::Dnat
}

/// Rewrites the destination and both checksums in place. `None`: the
/// headers were not where parsing found them (nothing written). A TCP
/// checksum still to be completed holds the pseudo-header sum only: it
/// takes the address change, and no complement (`partial.rs`).
#[inline(always)]
fn dnat(ctx: &XdpContext, h: &Headers, frontend: Endpoint, backend: Endpoint) -> Option<()> {
    let addr_diff = csum::diff32(frontend.addr, backend.addr);
    let port_diff = csum::diff16(frontend.port, backend.port);
    let l4 = h.l4();
    let ip_check = word(ctx, ETH_HLEN + IPV4_CHECK_OFF)?;
    let tcp_check = word(ctx, l4 + TCP_CHECK_OFF)?;
    let new_tcp_check = if partial::is_partial(ctx, h, tcp_check) {
        csum::add(tcp_check, addr_diff)
    } else {
        csum::apply(tcp_check, addr_diff + port_diff)
    };
    put_word(
        ctx,
        ETH_HLEN + IPV4_CHECK_OFF,
        csum::apply(ip_check, addr_diff),
    )?;
    put_word(ctx, l4 + TCP_CHECK_OFF, new_tcp_check)?;
    put_addr(ctx, ETH_HLEN + IPV4_DADDR_OFF, backend.addr)?;
    put_word(ctx, l4 + TCP_DPORT_OFF, backend.port)
}

/// A request to one of our backends that another node translated: as in
/// the tc program.
#[inline(always)]
fn to_backend(ctx: &XdpContext, h: &Headers, seg: &Segment) -> Outcome {
    let option = if seg.is_syn() {
        ipopt::frontend(ctx, h.ip_len)
    } else {
        None
    };
    let keep = conntrack::to_backend(h.source, h.destination, seg, option, || mss::link_mtu(ctx));
    if let Some(frontend) = option {
        ipopt::strip_xdp(ctx, frontend);
    }
    match keep {
        Ok(()) => Outcome::PassNoFrontend,
        Err(outcome) => outcome,
    }
}
