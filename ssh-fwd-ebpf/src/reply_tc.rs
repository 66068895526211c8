//! tc ingress on the host end of a pod's interface: a reply from a backend
//! gets its source rewritten back to the frontend right as it leaves the pod
//! and is sent straight out of the external interface its route uses, so
//! replies skip the node's IP stack as requests do.
//!
//! Only replies whose route leaves through an external interface are
//! touched: in-cluster traffic to the pod's port (another rank's ssh to
//! `POD_IP:22`) is left alone, exactly as the egress program would leave it.
//! Anything not settled here goes to the stack untouched, and the egress
//! program on the external interface still does the reverse NAT.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use ssh_fwd_common::{maps::IFACE_EXTERNAL, outcome::Outcome};

use crate::{
    counters::count,
    forward::{iface_flags, route, send},
    maps::REVERSE,
    reverse::restore_frontend,
    skb::parse,
};

#[classifier]
pub fn ssh_fwd_reply_tc(ctx: TcContext) -> i32 {
    let (outcome, action) = reply(&ctx);
    count(outcome);
    action
}

#[inline(always)]
fn reply(ctx: &TcContext) -> (Outcome, i32) {
    let headers = match parse(ctx) {
        Ok(headers) => headers,
        Err(outcome) => return (outcome, TC_ACT_UNSPEC),
    };
    let (backend, client) = (headers.source, headers.destination);
    // SAFETY: copied out immediately.
    let Some(primary) = (unsafe { REVERSE.get(backend) }).copied() else {
        return (Outcome::PassNoBackend, TC_ACT_UNSPEC);
    };
    // Decide before touching the packet: routed with the pod's own address,
    // as the stack would route it.
    let Some(route) = route(ctx, backend, client) else {
        return (Outcome::ReplyToStack, TC_ACT_UNSPEC);
    };
    if iface_flags(route.ifindex()) & IFACE_EXTERNAL == 0 {
        return (Outcome::ReplyToStack, TC_ACT_UNSPEC);
    }
    if restore_frontend(ctx, headers.l4, backend, client, primary).is_err() {
        return (Outcome::RewriteError, TC_ACT_SHOT);
    }
    count(Outcome::ReverseNat);
    match send(ctx, &route, false) {
        Some((action, _)) => (Outcome::ReplyRedirected, action),
        // Rewritten and bound for an external interface: the stack routes
        // it there, and egress finds nothing left to do.
        None => (Outcome::ReplyToStack, TC_ACT_UNSPEC),
    }
}
