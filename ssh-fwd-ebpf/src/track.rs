//! Per-connection state for shared backends: which frontend a client used.

use aya_ebpf::EbpfContext;
use aya_log_ebpf::debug;
use ssh_fwd_common::{
    maps::{ConnKey, Endpoint, FLAG_SHARED_BACKEND, NatTarget},
    outcome::Outcome,
};

use crate::{counters::count, maps::CONNS};

/// On ingress: remember the frontend the client used, if the backend is
/// shared. Writes only when the entry is missing or stale, so an established
/// flow costs one lookup (which also refreshes its LRU position).
#[inline(always)]
pub fn remember_frontend<C: EbpfContext>(
    ctx: &C,
    client: Endpoint,
    frontend: Endpoint,
    target: &NatTarget,
) {
    if target.flags & FLAG_SHARED_BACKEND == 0 {
        return;
    }
    let key = ConnKey {
        client_addr: client.addr,
        backend_addr: target.endpoint.addr,
        client_port: client.port,
        backend_port: target.endpoint.port,
    };
    let entry = NatTarget {
        endpoint: frontend,
        slot: target.slot,
        flags: 0,
    };
    // SAFETY: the value is copied out before any other map operation.
    let known = unsafe { CONNS.get(key) }.copied();
    if known != Some(entry) && CONNS.insert(key, entry, 0).is_ok() {
        count(Outcome::ConnTracked);
        debug!(
            ctx,
            "tracking connection to shared backend, slot {}", target.slot
        );
    }
}

/// On egress: the frontend to restore for a reply from `backend` to `client`.
#[inline(always)]
pub fn frontend_for_reply(client: Endpoint, backend: Endpoint, primary: NatTarget) -> NatTarget {
    if primary.flags & FLAG_SHARED_BACKEND == 0 {
        return primary;
    }
    let key = ConnKey {
        client_addr: client.addr,
        backend_addr: backend.addr,
        client_port: client.port,
        backend_port: backend.port,
    };
    // SAFETY: copied out immediately.
    match unsafe { CONNS.get(key) }.copied() {
        Some(tracked) => tracked,
        None => {
            count(Outcome::ReverseFallback);
            primary
        }
    }
}
