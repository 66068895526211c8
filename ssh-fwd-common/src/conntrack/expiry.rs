//! Time: the idle clock the server's segments keep, when the agent's
//! sweep removes an entry, and when a claim stops counting.

use super::closing;
use crate::maps::{CONN_FIN_CLIENT, CONN_FIN_SERVER, Claim, Conn};

/// How stale `last_seen_ns` may get before a packet rewrites it: the idle
/// sweep works in minutes, so a write per second per connection is plenty.
pub const CLOCK_GRANULARITY_NS: u64 = 1_000_000_000;

impl<E: Copy> Conn<E> {
    /// The entry with its clock moved to `now`, if it is that stale.
    #[inline(always)]
    pub(super) fn clone_with_clock(&self, now: u64) -> Self {
        let mut c = *self;
        if now.wrapping_sub(c.last_seen_ns) >= CLOCK_GRANULARITY_NS {
            c.last_seen_ns = now;
        }
        c
    }
}

/// One side closed and the other has not: the server sent its FIN, or
/// acknowledged exactly the client's (a FIN the client side merely sent
/// counts for nothing). Such an entry lives only
/// [`HALF_CLOSED_TIMEOUT_NS`] without a segment from the server.
#[inline(always)]
pub const fn half_closed<E>(c: &Conn<E>) -> bool {
    let fins = c.flags & (CONN_FIN_CLIENT | CONN_FIN_SERVER);
    fins != 0 && fins != CONN_FIN_CLIENT | CONN_FIN_SERVER
}

/// Why the agent's sweep removes an entry, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Both sides closed, and the close timeout passed.
    Closed,
    /// No segment from the server for longer than the idle timeout;
    /// half-closed, none for [`HALF_CLOSED_TIMEOUT_NS`].
    Idle,
}

/// How long a [`half_closed`] connection may stay without a segment from
/// the server. A client that completes handshakes and never answers the
/// server's FIN (sshd closes an unauthenticated connection after its
/// LoginGraceTime) would otherwise hold its entry for the whole idle
/// timeout. Two minutes: nf_conntrack's FIN_WAIT timeout (its CLOSE_WAIT is
/// one), and longer than Linux retransmits an unanswered FIN (eight times
/// from a 200 ms timeout: under two minutes) and keeps an orphaned
/// FIN_WAIT_2 (`tcp_fin_timeout`, 60 s). ssh and sshd close both ways at
/// once; a half-closed connection that goes on moving data keeps its entry
/// with every segment from the server, data or ACK.
pub const HALF_CLOSED_TIMEOUT_NS: u64 = 120 * 1_000_000_000;

/// The sweep's verdict on an entry at time `now` (same clock as the
/// kernel's `last_seen_ns`). A [`half_closed`] entry counts as idle after
/// [`HALF_CLOSED_TIMEOUT_NS`] (or the idle timeout, if shorter).
pub fn expiry<E>(
    c: &Conn<E>,
    now: u64,
    idle_timeout_ns: u64,
    close_timeout_ns: u64,
) -> Option<Expiry> {
    let quiet = now.saturating_sub(c.last_seen_ns);
    let idle_timeout_ns = if half_closed(c) {
        idle_timeout_ns.min(HALF_CLOSED_TIMEOUT_NS)
    } else {
        idle_timeout_ns
    };
    if closing(c) && quiet >= close_timeout_ns {
        Some(Expiry::Closed)
    } else if quiet >= idle_timeout_ns {
        Some(Expiry::Idle)
    } else {
        None
    }
}

/// Whether a claim still counts at `now`: the server has
/// `confirm_timeout_ns` to confirm it. No sweep removes claims; the table
/// is an LRU, and a stale claim only waits there to be evicted.
#[inline(always)]
pub const fn claim_fresh<E>(c: &Claim<E>, now: u64, confirm_timeout_ns: u64) -> bool {
    now.wrapping_sub(c.seen_ns) <= confirm_timeout_ns
}

/// How often a client segment may rewrite the claim it renews: a client
/// waiting for the server's confirmation (a handshake held back) keeps its
/// claim alive with each segment, one write a second at most.
pub const CLAIM_REFRESH_NS: u64 = 1_000_000_000;

/// Whether a client segment through `frontend` that claims its connection
/// must write the claim: none is there, the one there names another
/// frontend, or it is due for a refresh.
#[inline(always)]
pub fn claim_needs_write<E: PartialEq>(existing: Option<&Claim<E>>, frontend: E, now: u64) -> bool {
    match existing {
        Some(c) => c.frontend != frontend || now.wrapping_sub(c.seen_ns) >= CLAIM_REFRESH_NS,
        None => true,
    }
}
