//! tc ingress on an external (or cluster) interface: the DNAT of requests to
//! frontends, with the connection tracking of `crate::conntrack`; requests
//! another node already translated, with the frontend their SYN carries;
//! and ICMP errors addressed to frontends. A translated packet is routed
//! here and redirected to the backend's interface when the route allows
//! (`crate::forward`): into the pod's namespace directly when that
//! interface is a pod's veth. With `--redirect off` it goes to the stack,
//! which routes it through netfilter.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    conntrack::Segment,
    maps::{Endpoint, IFACE_POD_PEER},
    outcome::Outcome,
};

use crate::{
    config::no_redirect,
    conntrack,
    counters::{Direction, count, count_mapping},
    forward::{Sent, iface_flags, route, send},
    icmp, ipopt,
    maps::{FRONTENDS, REVERSE},
    mss,
    packet::{Headers, Transport},
    skb::{Field, parse, rewrite},
};

/// What ingress did with a packet.
enum Verdict {
    /// Translated: route `client -> backend` and hand it on.
    Forward { client: Endpoint, backend: Endpoint },
    /// Not ours, or ours but best left to the stack: counted, passed on.
    Pass(Outcome),
    /// Dropped, and why.
    Drop(Outcome),
}

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    match ingress(&ctx) {
        Verdict::Forward { client, backend } => {
            if no_redirect() {
                return TC_ACT_UNSPEC;
            }
            let Some(route) = route(&ctx, client, backend) else {
                return TC_ACT_UNSPEC;
            };
            let peer_ok = iface_flags(route.ifindex()) & IFACE_POD_PEER != 0;
            let Some((action, sent)) = send(&ctx, &route, peer_ok) else {
                return TC_ACT_UNSPEC;
            };
            count(Outcome::Redirected);
            if sent == Sent::IntoPeer {
                count(Outcome::RedirectedPeer);
            }
            action
        }
        // UNSPEC lets later tc programs on the interface run, as tcx expects.
        Verdict::Pass(outcome) => {
            count(outcome);
            TC_ACT_UNSPEC
        }
        Verdict::Drop(outcome) => {
            count(outcome);
            TC_ACT_SHOT
        }
    }
}

#[inline(always)]
fn ingress(ctx: &TcContext) -> Verdict {
    let h = match parse(ctx) {
        Ok(h) => h,
        Err(outcome) => return Verdict::Pass(outcome),
    };
    match h.transport {
        Transport::Icmp => match icmp::inbound(ctx, h.ip_len, h.destination.addr) {
            Some(backend) => Verdict::Forward {
                client: h.source,
                backend,
            },
            None => Verdict::Pass(Outcome::PassNotTcp),
        },
        Transport::Tcp => tcp(ctx, &h, &h.seg),
    }
}

#[inline(always)]
fn tcp(ctx: &TcContext, h: &Headers, seg: &Segment) -> Verdict {
    let (client, frontend) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    if let Some(target) = unsafe { FRONTENDS.get(frontend) }.copied() {
        let backend = target.endpoint;
        if let Err(outcome) = conntrack::request(client, frontend, backend, target.slot, seg) {
            return Verdict::Drop(outcome);
        }
        if rewrite(ctx, h.l4(), Field::Destination, frontend, backend).is_err() {
            // Half-rewritten packets must not reach the pod.
            return Verdict::Drop(Outcome::RewriteError);
        }
        count(Outcome::Dnat);
        count_mapping(target.slot, Direction::ToBackend, ctx.len() as u64);
        return Verdict::Forward { client, backend };
    }
    // SAFETY: only tested for presence.
    if unsafe { REVERSE.get(h.destination) }.is_none() {
        return Verdict::Pass(Outcome::PassNoFrontend);
    }
    to_backend(ctx, h, seg)
}

/// A request to one of our backends that another node translated (or a
/// peer in the cluster sent to the pod's address): its state here, or the
/// frontend its SYN carries. The stack delivers it.
#[inline(always)]
fn to_backend(ctx: &TcContext, h: &Headers, seg: &Segment) -> Verdict {
    let option = if seg.is_syn() {
        ipopt::frontend(ctx, h.ip_len)
    } else {
        None
    };
    let keep = conntrack::to_backend(h.source, h.destination, seg, option, || mss::link_mtu(ctx));
    if let Some(frontend) = option {
        // The pod sees the SYN as the client sent it.
        ipopt::strip_skb(ctx, frontend);
    }
    match keep {
        Ok(()) => Verdict::Pass(Outcome::PassNoFrontend),
        Err(outcome) => Verdict::Drop(outcome),
    }
}
