//! tc ingress on an external (or cluster) interface: the DNAT of requests to
//! frontends, with the connection tracking of `crate::conntrack`; requests
//! another node already translated (`crate::backend`); and ICMP errors
//! addressed to frontends. A translated packet is routed here and
//! redirected to the backend's interface when the route allows
//! (`crate::forward`): into the pod's namespace directly when that
//! interface is a pod's veth. With `--redirect off` it goes to the stack,
//! which routes it through netfilter.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    conntrack::trust::ttl_expires,
    maps::{Endpoint, IFACE_POD_PEER},
    outcome::Outcome,
};

use crate::{
    arp, backend,
    config::no_redirect,
    conntrack,
    counters::{Direction, count, count_mapping},
    forward::{Sent, iface_flags, route, send},
    guard, icmp,
    maps::{FRONTENDS, REVERSE},
    packet::{Headers, Transport},
    reset,
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
    /// Answered by the guard (a RST on its way back out): the action.
    Answer(i32),
}

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    if let Some(action) = arp::tc(&ctx) {
        return action;
    }
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
        Verdict::Answer(action) => action,
    }
}

#[inline(always)]
fn ingress(ctx: &TcContext) -> Verdict {
    let h = match parse(ctx) {
        Ok(h) => h,
        Err(outcome) => return Verdict::Pass(outcome),
    };
    match h.transport {
        Transport::Icmp => match icmp::inbound(ctx, &h) {
            icmp::In::Translated(backend) => Verdict::Forward {
                client: h.source,
                backend,
            },
            icmp::In::Drop => Verdict::Drop(Outcome::IcmpOutOfWindow),
            icmp::In::NotOurs => Verdict::Pass(Outcome::PassNotTcp),
        },
        Transport::Tcp => tcp(ctx, &h),
    }
}

#[inline(always)]
fn tcp(ctx: &TcContext, h: &Headers) -> Verdict {
    let (client, frontend) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    if let Some(target) = unsafe { FRONTENDS.get(frontend) }.copied() {
        // Before anything answers or is written: a denied source gets nothing
        // but, with `--deny-action reset`, a RST.
        if let Err(outcome) = guard::check(h, &target) {
            return reset::tc(ctx, h, outcome).map_or_else(Verdict::Drop, Verdict::Answer);
        }
        // A router would not forward it: the stack answers, untranslated.
        if ttl_expires(h.ttl) {
            return Verdict::Pass(Outcome::TtlExpired);
        }
        let backend = target.endpoint;
        if let Err(outcome) = conntrack::request(ctx, h, frontend, backend, target.slot) {
            return Verdict::Drop(outcome);
        }
        if rewrite(ctx, h.l4(), Field::Destination, frontend, backend).is_err() {
            // Half-rewritten packets must not reach the pod.
            return Verdict::Drop(Outcome::RewriteError);
        }
        count(Outcome::Dnat);
        if h.big {
            count(Outcome::BigTcp);
        }
        count_mapping(target.slot, Direction::ToBackend, ctx.len() as u64);
        return Verdict::Forward { client, backend };
    }
    // SAFETY: only tested for presence.
    if unsafe { REVERSE.get(h.destination) }.is_none() {
        return Verdict::Pass(Outcome::PassNoFrontend);
    }
    match backend::request(ctx, h) {
        Ok(()) => Verdict::Pass(Outcome::PassNoFrontend),
        Err(outcome) => Verdict::Drop(outcome),
    }
}
