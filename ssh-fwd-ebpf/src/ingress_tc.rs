//! tc ingress: the same DNAT as the XDP program, for interfaces where XDP is
//! slower (veth) or unsupported. Uses the skb helpers so checksum offload
//! state (CHECKSUM_PARTIAL/COMPLETE) stays consistent.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{
    outcome::Outcome,
    packet::{IPV4_DADDR_OFF, IPV4_SADDR_OFF, TCP_DPORT_OFF, TCP_SPORT_OFF},
};

use crate::{
    counters::{Direction, count, count_mapping},
    maps::FRONTENDS,
    skb::{Field, parse, read_endpoint, rewrite},
    track::remember_frontend,
};

#[classifier]
pub fn ssh_fwd_ingress_tc(ctx: TcContext) -> i32 {
    let outcome = dnat(&ctx);
    count(outcome);
    match outcome {
        // Half-rewritten packets must not reach the pod.
        Outcome::RewriteError => TC_ACT_SHOT,
        // UNSPEC lets later tc programs on the interface run, as tcx expects.
        _ => TC_ACT_UNSPEC,
    }
}

#[inline(always)]
fn dnat(ctx: &TcContext) -> Outcome {
    let l4 = match parse(ctx) {
        Ok(l4) => l4,
        Err(outcome) => return outcome,
    };
    let Ok(frontend) = read_endpoint(ctx, IPV4_DADDR_OFF, l4 + TCP_DPORT_OFF) else {
        return Outcome::Malformed;
    };
    // SAFETY: copied out immediately.
    let Some(target) = (unsafe { FRONTENDS.get(frontend) }).copied() else {
        return Outcome::PassNoFrontend;
    };
    let Ok(client) = read_endpoint(ctx, IPV4_SADDR_OFF, l4 + TCP_SPORT_OFF) else {
        return Outcome::Malformed;
    };
    remember_frontend(ctx, client, frontend, &target);
    if rewrite(ctx, l4, Field::Destination, frontend, target.endpoint).is_err() {
        return Outcome::RewriteError;
    }
    count_mapping(target.slot, Direction::ToBackend, ctx.len() as u64);
    Outcome::Dnat
}
