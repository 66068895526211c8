//! tc egress on an external (or cluster) interface, as packets leave the
//! node: replies of tracked connections, IPv4 and IPv6, get the frontend
//! back as their source (and a SYN-ACK of a connection from another node
//! the MSS its link carries); a SYN this node translated, leaving for the
//! backend's node, carries its frontend in an IPv4 option or an IPv6
//! Destination Options header (sealed with the cluster's key, if set);
//! ICMP and ICMPv6 errors quoting a backend name the frontend instead (or
//! are dropped).

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    conntrack::{
        TCP_SYN,
        trust::{Ownership, ownership},
    },
    ipopt::{FRONTEND_OPTION_TYPE, FRONTEND_OPTION_TYPE6},
    ipv6::{ETH_P_IPV6, IPV6_HLEN, IPV6_NEXT_HEADER_OFF, NEXTHDR_DEST, NEXTHDR_TCP},
    maps::{Addr6, IFACE_EXTERNAL, IFACE_OUTSIDE},
    outcome::Outcome,
    packet::{ETH_HLEN, IPPROTO_TCP, IPV4_MIN_LEN, IPV4_PROTO_OFF, TCP_FLAGS_OFF},
};

use crate::{
    config::{cross_node_key, cross_node_plain},
    conntrack,
    counters::{Direction, count, count_mapping},
    family::Family,
    forward::iface_flags,
    icmp::{self, Out},
    ipopt::{Carrier, NotAdded},
    mss,
    packet::{Headers, Reloaded, Transport, ethertype, read},
    skb::{Field, Rewrite, parse, parse6},
};

#[classifier]
pub fn ssh_fwd_egress_tc(ctx: TcContext) -> i32 {
    let ipv6 = ethertype(&ctx) == Some(ETH_P_IPV6.to_be());
    if forged_option(&ctx, ipv6).unwrap_or(false) {
        count(Outcome::OptionUntrusted);
        return TC_ACT_SHOT;
    }
    if ipv6 {
        return egress6(&ctx);
    }
    egress4(&ctx)
}

/// Whether the packet is a SYN from this node (a pod, or the node itself)
/// that carries the frontend option already: only a node's egress adds
/// one, and a pod that wrote its own would be believed across the cluster
/// interface. Two bytes read of every other packet (an IPv4 header
/// without options, an IPv6 one without a Destination Options header
/// first).
#[inline(always)]
fn forged_option(ctx: &TcContext, ipv6: bool) -> Option<bool> {
    let p = Reloaded(ctx);
    let l4 = if ipv6 {
        let [next] = read::<_, 1>(&p, ETH_HLEN + IPV6_NEXT_HEADER_OFF)?;
        if next != NEXTHDR_DEST {
            return Some(false);
        }
        let [after, len, kind, _] = read::<_, 4>(&p, ETH_HLEN + IPV6_HLEN)?;
        if kind != FRONTEND_OPTION_TYPE6 || after != NEXTHDR_TCP {
            return Some(false);
        }
        ETH_HLEN + IPV6_HLEN + (usize::from(len) + 1) * 8
    } else {
        let [version_ihl] = read::<_, 1>(&p, ETH_HLEN)?;
        if version_ihl & 0x0f <= 5 {
            return Some(false);
        }
        let [kind] = read::<_, 1>(&p, ETH_HLEN + IPV4_MIN_LEN)?;
        let [protocol] = read::<_, 1>(&p, ETH_HLEN + IPV4_PROTO_OFF)?;
        if kind != FRONTEND_OPTION_TYPE || protocol != IPPROTO_TCP {
            return Some(false);
        }
        ETH_HLEN + usize::from(version_ihl & 0x0f) * 4
    };
    let [flags] = read::<_, 1>(&p, l4 + TCP_FLAGS_OFF)?;
    Some(flags & TCP_SYN != 0 && !from_outside(ctx))
}

/// IPv6, in a function of its own: a BPF-to-BPF call with its own stack
/// frame, which the IPv4 path's does not have to make room for.
#[inline(never)]
fn egress6(ctx: &TcContext) -> i32 {
    let outcome = match parse6(ctx) {
        Ok(h) if h.transport == Transport::Tcp => tcp(ctx, &h),
        Ok(h) => match icmp::outbound::<_, Addr6>(ctx, h.ip_len) {
            Out::Drop => return TC_ACT_SHOT,
            Out::Translated => return TC_ACT_UNSPEC,
            Out::NotOurs => Outcome::PassNotTcp,
        },
        Err(outcome) => outcome,
    };
    count(outcome);
    action(outcome)
}

#[inline(never)]
fn egress4(ctx: &TcContext) -> i32 {
    let h = match parse(ctx) {
        Ok(h) => h,
        Err(outcome) => {
            count(outcome);
            return TC_ACT_UNSPEC;
        }
    };
    match h.transport {
        Transport::Icmp => match icmp::outbound::<_, u32>(ctx, h.ip_len) {
            Out::Drop => TC_ACT_SHOT,
            Out::Translated => TC_ACT_UNSPEC,
            Out::NotOurs => {
                count(Outcome::PassNotTcp);
                TC_ACT_UNSPEC
            }
        },
        Transport::Tcp => {
            let outcome = tcp(ctx, &h);
            count(outcome);
            action(outcome)
        }
    }
}

/// The tc action for a TCP segment counted as `outcome`.
#[inline(always)]
fn action(outcome: Outcome) -> i32 {
    match outcome {
        Outcome::RewriteError
        | Outcome::SpoofedReply
        | Outcome::ConnTableFull
        | Outcome::SourceLimited
        | Outcome::OptionNoRoom => TC_ACT_SHOT,
        _ => TC_ACT_UNSPEC,
    }
}

#[inline(always)]
fn tcp<A: Carrier + Rewrite>(ctx: &TcContext, h: &Headers<A>) -> Outcome {
    if let Some(outcome) = reverse_nat(ctx, h) {
        return outcome;
    }
    let (source, destination, seg) = (h.source, h.destination, &h.seg);
    // A SYN this node translated, leaving for the backend's node: it came
    // in from outside, and it is the SYN that opened the half-open entry.
    // A pod's own SYN to another pod never qualifies, whatever spoofed
    // SYNs did to that entry.
    if seg.is_syn()
        && !cross_node_plain()
        && from_outside(ctx)
        // SAFETY: only tested for presence.
        && unsafe { A::reverse().get(destination) }.is_some()
        && let Some(frontend) = conntrack::translated_syn(source, destination, seg)
    {
        let tag = cross_node_key().map(|key| A::tag(key, source, destination, seg.seq, frontend));
        let option = A::option(frontend, tag);
        return match A::add(ctx, h, &option) {
            Ok(()) => Outcome::OptionAdded,
            // Without the option the pod's node cannot track it: the
            // client's next SYN tries again.
            Err(NotAdded::NoRoom) => Outcome::OptionNoRoom,
            Err(NotAdded::Broken) => Outcome::RewriteError,
            Err(NotAdded::Refused) => Outcome::PassNoBackend,
        };
    }
    Outcome::PassNoBackend
}

/// A segment from a backend: its reverse NAT, counted as the outcome
/// returned; `None` if its source is no backend.
#[inline(always)]
fn reverse_nat<A: Family + Rewrite>(ctx: &TcContext, h: &Headers<A>) -> Option<Outcome> {
    let (source, destination, seg) = (h.source, h.destination, &h.seg);
    // SAFETY: copied out immediately.
    let primary = unsafe { A::reverse().get(source) }.copied()?;
    // Only a reply the pod itself sent may move state: it entered the
    // node by the pod's own interface.
    // SAFETY: the context pointer is the live skb of this program run.
    let arrived = unsafe { (*ctx.skb.skb).ingress_ifindex };
    // SAFETY: copied out immediately.
    let owner = unsafe { A::owners().get(source.addr) }.copied();
    let trusted = match ownership(owner.as_ref(), arrived) {
        Ownership::Owned => true,
        Ownership::Spoofed => return Some(Outcome::SpoofedReply),
        Ownership::Unknown => {
            if !from_outside(ctx) {
                count(Outcome::ReplyNoOwner);
            }
            false
        }
    };
    let tracked = if trusted {
        match conntrack::reply(source, destination, seg, ctx.len() as u64) {
            Ok(tracked) => tracked,
            Err(outcome) => return Some(outcome),
        }
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
        return Some(Outcome::ReplyUntracked);
    };
    if A::rewrite(ctx, h.l4(), Field::Source, source, restore.frontend).is_err()
        || (restore.mss_cap != 0 && mss::clamp(ctx, h.l4(), restore.mss_cap).is_err())
    {
        return Some(Outcome::RewriteError);
    }
    if h.big {
        count(Outcome::BigTcp);
    }
    count_mapping(restore.slot, Direction::ToClient, ctx.len() as u64);
    Some(Outcome::ReverseNat)
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
