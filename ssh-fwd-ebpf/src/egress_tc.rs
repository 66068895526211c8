//! tc egress: replies from a backend get their source rewritten back to the
//! frontend the client used.

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
    maps::REVERSE,
    skb::{Field, parse, read_endpoint, rewrite},
    track::frontend_for_reply,
};

#[classifier]
pub fn ssh_fwd_egress_tc(ctx: TcContext) -> i32 {
    let outcome = reverse_nat(&ctx);
    count(outcome);
    match outcome {
        Outcome::RewriteError => TC_ACT_SHOT,
        _ => TC_ACT_UNSPEC,
    }
}

#[inline(always)]
fn reverse_nat(ctx: &TcContext) -> Outcome {
    let l4 = match parse(ctx) {
        Ok(l4) => l4,
        Err(outcome) => return outcome,
    };
    let Ok(backend) = read_endpoint(ctx, IPV4_SADDR_OFF, l4 + TCP_SPORT_OFF) else {
        return Outcome::Malformed;
    };
    // SAFETY: copied out immediately.
    let Some(primary) = (unsafe { REVERSE.get(backend) }).copied() else {
        return Outcome::PassNoBackend;
    };
    let Ok(client) = read_endpoint(ctx, IPV4_DADDR_OFF, l4 + TCP_DPORT_OFF) else {
        return Outcome::Malformed;
    };
    let target = frontend_for_reply(client, backend, primary);
    if rewrite(ctx, l4, Field::Source, backend, target.endpoint).is_err() {
        return Outcome::RewriteError;
    }
    count_mapping(target.slot, Direction::ToClient, ctx.len() as u64);
    Outcome::ReverseNat
}
