//! tc egress on an external (or cluster) interface, as packets leave the
//! node: replies of tracked connections get the frontend back as their
//! source (and a SYN-ACK of a connection from another node the MSS its
//! link carries); a SYN this node translated, leaving for the backend's
//! node, carries its frontend in an IP option; ICMP errors quoting a
//! backend name the frontend instead (or are dropped).

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    conntrack::Segment,
    maps::{IFACE_EXTERNAL, IFACE_OUTSIDE},
    outcome::Outcome,
};

use crate::{
    config::cross_node_plain,
    conntrack,
    counters::{Direction, count, count_mapping},
    forward::iface_flags,
    icmp::{self, Out},
    ipopt,
    maps::REVERSE,
    mss,
    packet::{Headers, Transport},
    skb::{Field, parse, rewrite},
};

#[classifier]
pub fn ssh_fwd_egress_tc(ctx: TcContext) -> i32 {
    let h = match parse(&ctx) {
        Ok(h) => h,
        Err(outcome) => {
            count(outcome);
            return TC_ACT_UNSPEC;
        }
    };
    match h.transport {
        Transport::Icmp => match icmp::outbound(&ctx, h.ip_len) {
            Out::Drop => TC_ACT_SHOT,
            Out::Translated => TC_ACT_UNSPEC,
            Out::NotOurs => {
                count(Outcome::PassNotTcp);
                TC_ACT_UNSPEC
            }
        },
        Transport::Tcp => {
            let outcome = tcp(&ctx, &h, &h.seg);
            count(outcome);
            match outcome {
                Outcome::RewriteError => TC_ACT_SHOT,
                _ => TC_ACT_UNSPEC,
            }
        }
    }
}

#[inline(always)]
fn tcp(ctx: &TcContext, h: &Headers, seg: &Segment) -> Outcome {
    let (source, destination) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    if let Some(primary) = unsafe { REVERSE.get(source) }.copied() {
        // Only a reply the node got from the pod may move state: one that
        // came in from outside carries a pod's address it cannot own.
        let trusted = !from_outside(ctx);
        let tracked = if trusted {
            conntrack::reply(source, destination, seg)
        } else {
            None
        };
        let Some(restore) = tracked.or_else(|| {
            if on_external(ctx) {
                conntrack::restore_untracked(source, destination, &primary, seg, trusted)
            } else {
                None
            }
        }) else {
            return Outcome::ReplyUntracked;
        };
        if rewrite(ctx, h.l4(), Field::Source, source, restore.frontend).is_err()
            || (restore.mss_cap != 0 && mss::clamp(ctx, h.l4(), restore.mss_cap).is_err())
        {
            return Outcome::RewriteError;
        }
        count_mapping(restore.slot, Direction::ToClient, ctx.len() as u64);
        return Outcome::ReverseNat;
    }
    // A SYN this node translated, leaving for the backend's node: it came
    // in from outside, and it is the SYN that opened the half-open entry.
    // A pod's own SYN to another pod never qualifies, whatever spoofed
    // SYNs did to that entry.
    if seg.is_syn()
        && !cross_node_plain()
        && from_outside(ctx)
        // SAFETY: only tested for presence.
        && unsafe { REVERSE.get(destination) }.is_some()
        && let Some(frontend) = conntrack::translated_syn(source, destination, seg)
        && ipopt::add(ctx, h.ip_len, frontend)
    {
        return Outcome::OptionAdded;
    }
    Outcome::PassNoBackend
}

/// Whether the packet leaves through an external interface (`--iface`).
#[inline(always)]
fn on_external(ctx: &TcContext) -> bool {
    // SAFETY: the context pointer is the live skb of this program run.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    iface_flags(ifindex) & IFACE_EXTERNAL != 0
}

/// Whether the packet entered the node on an external or cluster
/// interface (it is being forwarded back out).
#[inline(always)]
fn from_outside(ctx: &TcContext) -> bool {
    // SAFETY: the context pointer is the live skb of this program run.
    let ingress = unsafe { (*ctx.skb.skb).ingress_ifindex };
    ingress != 0 && iface_flags(ingress) & IFACE_OUTSIDE != 0
}
