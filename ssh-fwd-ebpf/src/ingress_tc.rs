//! tc ingress: the same DNAT as the XDP program, for interfaces where XDP is
//! slower (veth) or unsupported. Uses the skb helpers so checksum offload
//! state (CHECKSUM_PARTIAL/COMPLETE) stays consistent. A rewritten packet is
//! routed here and redirected to the backend's interface when the route
//! allows ([`crate::forward`]): into the pod's namespace directly when that
//! interface is a pod's veth.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    maps::{Endpoint, IFACE_POD_PEER},
    outcome::Outcome,
};

use crate::{
    counters::{Direction, count, count_mapping},
    forward::{Sent, iface_flags, route, send},
    maps::FRONTENDS,
    skb::{Field, parse, rewrite},
    track::remember_frontend,
};

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    match dnat(&ctx) {
        Ok((client, backend)) => {
            count(Outcome::Dnat);
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
        Err(outcome) => {
            count(outcome);
            match outcome {
                // Half-rewritten packets must not reach the pod.
                Outcome::RewriteError => TC_ACT_SHOT,
                // UNSPEC lets later tc programs on the interface run, as tcx expects.
                _ => TC_ACT_UNSPEC,
            }
        }
    }
}

/// Rewrites the destination; returns the client and the backend now written
/// in the packet, or the outcome of a packet that is not ours.
#[inline(always)]
fn dnat(ctx: &TcContext) -> Result<(Endpoint, Endpoint), Outcome> {
    let headers = parse(ctx)?;
    let (client, frontend) = (headers.source, headers.destination);
    // SAFETY: copied out immediately.
    let Some(target) = (unsafe { FRONTENDS.get(frontend) }).copied() else {
        return Err(Outcome::PassNoFrontend);
    };
    remember_frontend(ctx, client, frontend, &target);
    rewrite(
        ctx,
        headers.l4,
        Field::Destination,
        frontend,
        target.endpoint,
    )
    .map_err(|_| Outcome::RewriteError)?;
    count_mapping(target.slot, Direction::ToBackend, ctx.len() as u64);
    Ok((client, target.endpoint))
}
