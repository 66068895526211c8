//! tc ingress: the same DNAT as the XDP program, for interfaces where XDP is
//! slower (veth) or unsupported. Uses the skb helpers so checksum offload
//! state (CHECKSUM_PARTIAL/COMPLETE) stays consistent. A rewritten packet is
//! redirected straight to the backend's interface when the route allows
//! ([`crate::forward`]).

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::outcome::Outcome;

use crate::{
    counters::{Direction, count, count_mapping},
    forward::{Flow, redirect_tc},
    maps::FRONTENDS,
    skb::{Field, parse, rewrite},
    track::remember_frontend,
};

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    match dnat(&ctx) {
        Ok(flow) => {
            count(Outcome::Dnat);
            match redirect_tc(&ctx, flow) {
                Some(action) => {
                    count(Outcome::Redirected);
                    action
                }
                None => TC_ACT_UNSPEC,
            }
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

/// Rewrites the destination; returns the flow as rewritten, or the outcome
/// of a packet that is not ours.
#[inline(always)]
fn dnat(ctx: &TcContext) -> Result<Flow, Outcome> {
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
    Ok(Flow {
        client,
        backend: target.endpoint,
    })
}
