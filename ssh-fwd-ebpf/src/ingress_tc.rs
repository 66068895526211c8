//! tc ingress on an external (or cluster) interface: the DNAT of requests to
//! frontends, IPv4 and IPv6, with the connection tracking of
//! `crate::conntrack`; requests another node already translated
//! (`crate::backend`); ICMP and ICMPv6 errors addressed to frontends;
//! and ARP and neighbour discovery for `--announce l2`. A translated packet is routed here and
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
    exposure::Addressed,
    ipv6::ETH_P_IPV6,
    maps::{Addr6, Endpoint, IFACE_POD_PEER},
    outcome::Outcome,
};

use crate::{
    arp, backend,
    config::no_redirect,
    conntrack,
    counters::{Direction, count, count_mapping},
    exposure::{self, Exposed},
    family::Family,
    forward::{Routed, Sent, iface_flags, send},
    guard,
    icmp::{self, Quoting},
    ipopt::Carrier,
    maps::HEADERS6,
    ndp,
    packet::{Headers, Transport, ethertype},
    reset,
    skb::{Field, Rewrite, parse, parse6},
};

/// What ingress did with a packet.
enum Verdict<A: Family = u32> {
    /// Translated: route `client -> backend` and hand it on.
    Forward {
        client: Endpoint<A>,
        backend: Endpoint<A>,
    },
    /// Not ours, or ours but best left to the stack: counted, passed on.
    Pass(Outcome),
    /// Dropped, and why.
    Drop(Outcome),
    /// Answered by the guard (a RST on its way back out): the action.
    Answer(i32),
    /// IPv6, to be answered with a RST by the entry point
    /// (`reset::PENDING_TC`).
    AnswerLater,
}

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    if ethertype(&ctx) == Some(ETH_P_IPV6.to_be()) {
        if ndp::is_ndp(&ctx) {
            return ndp::tc(ctx);
        }
        let action = match ipv6(&ctx) {
            PARSED6 => transport6(&ctx),
            action => action,
        };
        match action {
            reset::PENDING_TC => reset::tc6(ctx),
            action => action,
        }
    } else {
        ipv4(&ctx)
    }
}

/// Each family in a function of its own: a BPF-to-BPF call with its own
/// stack frame, so that the two paths' frames need not fit in one (the
/// verifier allows 512 bytes for a call chain). ARP goes with IPv4;
/// neighbour discovery has a function of its own (`crate::ndp`).
#[inline(never)]
fn ipv4(ctx: &TcContext) -> i32 {
    if let Some(action) = arp::tc(ctx) {
        return action;
    }
    if let Some(action) = not_for_node::<u32>(ctx) {
        return action;
    }
    act(ctx, ingress(ctx))
}

/// A frame for another host's MAC, or a group one, is not translated
/// (`crate::exposure`); `None`: the frame is the node's.
#[inline(always)]
fn not_for_node<A: Family + Routed + Exposed>(ctx: &TcContext) -> Option<i32> {
    match exposure::frame(ctx) {
        Addressed::Node => None,
        Addressed::Other => {
            count(Outcome::PassNotForNode);
            Some(TC_ACT_UNSPEC)
        }
        // The pass is checked against the SSH IPs.
        Addressed::Group => Some(act(ctx, Verdict::<A>::Pass(Outcome::PassNotForNode))),
    }
}

/// What [`ipv6`] returns when the headers are in this CPU's `HEADERS6`
/// for the entry point to dispatch: no tc action has this value, nor
/// `reset::PENDING_TC`.
const PARSED6: i32 = i32::MIN + 1;

/// IPv6 as a dispatcher of small frames, as in `crate::ingress_xdp`: the
/// headers go to a per-CPU scratch (`HEADERS6`), and each path runs, and
/// acts, in a function of its own, called by the entry point itself
/// ([`transport6`]): a chain of entry, dispatcher and path would count
/// 544 bytes of stack under the 32-byte rounding of older verifiers
/// (Debian 12's 6.1), over their 512.
#[inline(never)]
fn ipv6(ctx: &TcContext) -> i32 {
    if let Some(action) = not_for_node::<Addr6>(ctx) {
        return action;
    }
    match parse6_scratch(ctx) {
        Ok(_) => PARSED6,
        Err(outcome) => act(ctx, Verdict::<Addr6>::Pass(outcome)),
    }
}

/// The path of the headers [`ipv6`] parsed, from the entry point.
#[inline(always)]
fn transport6(ctx: &TcContext) -> i32 {
    let Some(h) = HEADERS6.get_ptr(0) else {
        return TC_ACT_UNSPEC;
    };
    // SAFETY: this CPU's value of the map, written by `parse6_scratch` in
    // this program run.
    let h = unsafe { &*h };
    match h.transport {
        Transport::Icmp => icmp6_in(ctx, h),
        Transport::Tcp => match frontend6(ctx, h) {
            Some(action) => action,
            None => backend6(ctx, h),
        },
    }
}

/// The packet's IPv6 headers, parsed into this CPU's scratch.
#[inline(never)]
fn parse6_scratch(ctx: &TcContext) -> Result<&'static Headers<Addr6>, Outcome> {
    let h = parse6(ctx)?;
    let slot = HEADERS6.get_ptr_mut(0).ok_or(Outcome::Malformed)?;
    // SAFETY: this CPU's value of the map, valid for this program run and
    // written only here.
    unsafe {
        slot.write(h);
        Ok(&*slot)
    }
}

/// Errors about forwarded connections are translated; the rest of ICMPv6
/// (neighbour discovery among it) is the stack's.
#[inline(never)]
fn icmp6_in(ctx: &TcContext, h: &Headers<Addr6>) -> i32 {
    act(ctx, icmp_in(ctx, h))
}

/// An ICMP error is translated if it is about a forwarded connection;
/// the rest of ICMP is the stack's.
#[inline(always)]
fn icmp_in<A: Quoting>(ctx: &TcContext, h: &Headers<A>) -> Verdict<A> {
    match icmp::inbound(ctx, h) {
        icmp::In::Translated(backend) => Verdict::Forward {
            client: h.source,
            backend,
        },
        icmp::In::Drop => Verdict::Drop(Outcome::IcmpOutOfWindow),
        icmp::In::NotOurs => Verdict::Pass(Outcome::PassNotTcp),
    }
}

/// A segment to a frontend, acted on; `None` if its destination is none.
#[inline(never)]
fn frontend6(ctx: &TcContext, h: &Headers<Addr6>) -> Option<i32> {
    to_frontend(ctx, h).map(|verdict| act(ctx, verdict))
}

/// A segment to a backend of this node, or to nothing of ours.
#[inline(never)]
fn backend6(ctx: &TcContext, h: &Headers<Addr6>) -> i32 {
    act(ctx, to_backend(ctx, h))
}

/// The tc action of `verdict`, counted.
#[inline(always)]
fn act<A: Family + Routed + Exposed>(ctx: &TcContext, verdict: Verdict<A>) -> i32 {
    match verdict {
        Verdict::Forward { client, backend } => {
            if no_redirect() {
                return TC_ACT_UNSPEC;
            }
            let Some(route) = A::route(ctx, client, backend) else {
                return TC_ACT_UNSPEC;
            };
            let peer_ok = iface_flags(route.ifindex()) & IFACE_POD_PEER != 0;
            let Some((action, sent)) = send(ctx, &route, peer_ok) else {
                return TC_ACT_UNSPEC;
            };
            count(Outcome::Redirected);
            if sent == Sent::IntoPeer {
                count(Outcome::RedirectedPeer);
            }
            action
        }
        // UNSPEC lets later tc programs on the interface run, as tcx expects.
        Verdict::Pass(outcome) => match exposure::closed::<A, _>(ctx, outcome) {
            // To an SSH IP, and no mapping's: the node's services stay off it.
            Outcome::UnmappedPort => {
                count(Outcome::UnmappedPort);
                TC_ACT_SHOT
            }
            outcome => {
                count(outcome);
                TC_ACT_UNSPEC
            }
        },
        Verdict::Drop(outcome) => {
            count(outcome);
            TC_ACT_SHOT
        }
        Verdict::Answer(action) => action,
        Verdict::AnswerLater => reset::PENDING_TC,
    }
}

#[inline(always)]
fn ingress(ctx: &TcContext) -> Verdict {
    let h = match parse(ctx) {
        Ok(h) => h,
        Err(outcome) => return Verdict::Pass(outcome),
    };
    match h.transport {
        Transport::Icmp => icmp_in(ctx, &h),
        Transport::Tcp => {
            if let Some(verdict) = to_frontend(ctx, &h) {
                return verdict;
            }
            to_backend(ctx, &h)
        }
    }
}

/// A segment to a frontend, translated to its backend; `None` if its
/// destination is no frontend.
#[inline(always)]
fn to_frontend<A: Family + Rewrite + Denied>(
    ctx: &TcContext,
    h: &Headers<A>,
) -> Option<Verdict<A>> {
    let (client, frontend) = (h.source, h.destination);
    // SAFETY: copied out immediately.
    let target = unsafe { A::frontends().get(frontend) }.copied()?;
    // Before anything answers or is written: a denied source gets nothing
    // but, with `--deny-action reset`, a RST.
    if let Err(outcome) = guard::check(h, &target) {
        return Some(A::denied(ctx, h, outcome));
    }
    // A router would not forward it: the stack answers, untranslated.
    if ttl_expires(h.ttl) {
        return Some(Verdict::Pass(Outcome::TtlExpired));
    }
    let backend = target.endpoint;
    if let Err(outcome) = conntrack::request(ctx, h, frontend, backend, target.slot) {
        return Some(Verdict::Drop(outcome));
    }
    if A::rewrite(ctx, h.l4(), Field::Destination, frontend, backend).is_err() {
        // Half-rewritten packets must not reach the pod.
        return Some(Verdict::Drop(Outcome::RewriteError));
    }
    count(Outcome::Dnat);
    if h.big {
        count(Outcome::BigTcp);
    }
    count_mapping(target.slot, Direction::ToBackend, ctx.len() as u64);
    Some(Verdict::Forward { client, backend })
}

/// A segment to a backend of this node, not through a frontend (another
/// node translated it, or a peer dials the pod).
#[inline(always)]
fn to_backend<A: Carrier>(ctx: &TcContext, h: &Headers<A>) -> Verdict<A> {
    // SAFETY: only tested for presence.
    if unsafe { A::reverse().get(h.destination) }.is_none() {
        return Verdict::Pass(Outcome::PassNoFrontend);
    }
    match backend::request(ctx, h) {
        Ok(()) => Verdict::Pass(Outcome::PassNoFrontend),
        Err(outcome) => Verdict::Drop(outcome),
    }
}

/// What a segment the guard refused becomes, by family.
trait Denied: Family {
    fn denied(ctx: &TcContext, h: &Headers<Self>, outcome: Outcome) -> Verdict<Self>;
}

impl Denied for u32 {
    #[inline(always)]
    fn denied(ctx: &TcContext, h: &Headers, outcome: Outcome) -> Verdict {
        reset::tc(ctx, h, outcome).map_or_else(Verdict::Drop, Verdict::Answer)
    }
}

impl Denied for Addr6 {
    #[inline(always)]
    fn denied(_: &TcContext, h: &Headers<Addr6>, outcome: Outcome) -> Verdict<Addr6> {
        if reset::wanted6(h, outcome) {
            Verdict::AnswerLater
        } else {
            Verdict::Drop(outcome)
        }
    }
}
