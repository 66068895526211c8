//! tc ingress on the host end of a pod's interface: a reply of a tracked
//! connection (IPv4 or IPv6) gets its frontend back as it leaves the pod and is sent
//! straight out of the interface its route uses, so replies skip the node's
//! IP stack as requests do. Traffic of connections ssh-fwd did not forward
//! (a job's ranks using ssh to each other's pod addresses) is never
//! touched, whatever the route.
//!
//! Anything not settled here goes to the stack untouched, and the egress
//! program on the way out does the same work. With `--redirect off` that
//! is every reply (the agent then attaches this program nowhere): netfilter
//! sees the reply with the pod's address, as it saw the request.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    conntrack::trust::{Ownership, ownership},
    ipv6::ETH_P_IPV6,
    maps::IFACE_EXTERNAL,
    outcome::Outcome,
};

use crate::{
    config::no_redirect,
    conntrack,
    counters::{Direction, count, count_mapping},
    family::Family,
    forward::{Routed, iface_flags, send},
    mss,
    packet::{Headers, Packet, Transport, ethertype},
    skb::{Field, Rewrite, parse, parse6},
};

#[classifier]
pub fn ssh_fwd_reply_tc(ctx: TcContext) -> i32 {
    if ethertype(&ctx) == Some(ETH_P_IPV6.to_be()) {
        reply6(&ctx)
    } else {
        reply4(&ctx)
    }
}

/// Each family in a function of its own: a BPF-to-BPF call with its own
/// stack frame, so that the two paths' frames need not fit in one (the
/// verifier allows 512 bytes for a call chain).
#[inline(never)]
fn reply4(ctx: &TcContext) -> i32 {
    counted(parse(ctx).map(|h| reply(ctx, &h)))
}

#[inline(never)]
fn reply6(ctx: &TcContext) -> i32 {
    counted(parse6(ctx).map(|h| reply(ctx, &h)))
}

/// The action of a reply, its outcome counted; a packet that did not
/// parse is passed.
#[inline(always)]
fn counted(result: Result<(Outcome, i32), Outcome>) -> i32 {
    let (outcome, action) = result.unwrap_or_else(|outcome| (outcome, TC_ACT_UNSPEC));
    count(outcome);
    action
}

#[inline(always)]
fn reply<A: Family + Routed + Rewrite>(ctx: &TcContext, h: &Headers<A>) -> (Outcome, i32) {
    if h.transport != Transport::Tcp {
        return (Outcome::PassNotTcp, TC_ACT_UNSPEC);
    }
    let seg = h.seg;
    let (backend, client) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    let Some(primary) = (unsafe { A::reverse().get(backend) }).copied() else {
        return (Outcome::PassNoBackend, TC_ACT_UNSPEC);
    };
    // A packet with a pod's address from another pod's interface is a
    // spoof: it never reaches anyone. One whose address the agent has not
    // placed yet is left to the egress program, which moves no state.
    // SAFETY: copied out immediately.
    let owner = unsafe { A::owners().get(backend.addr) }.copied();
    match ownership(owner.as_ref(), ctx.arrival_ifindex()) {
        Ownership::Owned => {}
        Ownership::Spoofed => return (Outcome::SpoofedReply, TC_ACT_SHOT),
        Ownership::Unknown => return (Outcome::ReplyToStack, TC_ACT_UNSPEC),
    }
    // Route before touching any state: what this program cannot send on is
    // left whole to the egress program, which then tracks it once.
    if no_redirect() {
        return (Outcome::ReplyToStack, TC_ACT_UNSPEC);
    }
    let Some(route) = A::route(ctx, backend, client) else {
        return (Outcome::ReplyToStack, TC_ACT_UNSPEC);
    };
    let tracked = match conntrack::reply(backend, client, &seg, ctx.len() as u64) {
        Ok(tracked) => tracked,
        Err(outcome) => return (outcome, TC_ACT_SHOT),
    };
    let Some(restore) = tracked.or_else(|| {
        if iface_flags(route.ifindex()) & IFACE_EXTERNAL != 0 {
            conntrack::restore_untracked(backend, client, &primary, &seg, true)
        } else {
            None
        }
    }) else {
        return (Outcome::ReplyUntracked, TC_ACT_UNSPEC);
    };
    if A::rewrite(ctx, h.l4(), Field::Source, backend, restore.frontend).is_err()
        || (restore.mss_cap != 0 && mss::clamp(ctx, h.l4(), restore.mss_cap).is_err())
    {
        return (Outcome::RewriteError, TC_ACT_SHOT);
    }
    count(Outcome::ReverseNat);
    if h.big {
        count(Outcome::BigTcp);
    }
    count_mapping(restore.slot, Direction::ToClient, ctx.len() as u64);
    match send(ctx, &route, false) {
        Some((action, _)) => (Outcome::ReplyRedirected, action),
        // Rewritten: the stack routes it, and egress finds nothing to do.
        None => (Outcome::ReplyToStack, TC_ACT_UNSPEC),
    }
}
