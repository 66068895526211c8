//! tc egress: replies from a backend get their source rewritten back to the
//! frontend the client used.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::outcome::Outcome;

use crate::{counters::count, maps::REVERSE, reverse::restore_frontend, skb::parse};

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
    let headers = match parse(ctx) {
        Ok(headers) => headers,
        Err(outcome) => return outcome,
    };
    let (backend, client) = (headers.source, headers.destination);
    // SAFETY: copied out immediately.
    let Some(primary) = (unsafe { REVERSE.get(backend) }).copied() else {
        return Outcome::PassNoBackend;
    };
    match restore_frontend(ctx, headers.l4, backend, client, primary) {
        Ok(()) => Outcome::ReverseNat,
        Err(()) => Outcome::RewriteError,
    }
}
