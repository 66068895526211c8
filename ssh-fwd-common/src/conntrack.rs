//! Connection tracking as pure decisions: what the kernel programs do with
//! the state of a TCP connection to a backend, given one segment. The
//! programs look the entries up, call these functions, and apply the result;
//! every transition is a host unit test here.
//!
//! # Who may do what
//! An off-path sender can send any packet with any source address but never
//! sees the replies; a client can also use its own, real address, see every
//! reply to it, and send segments the pod will never accept (a wrong
//! checksum, a TTL that expires before the pod); a pod on the node can send
//! anything from its own interface. So:
//! - A **SYN** through a frontend records a half-open entry
//!   ([`HALF_OPEN`](crate::maps::HALF_OPEN), keyed by the client's ISN too,
//!   so a SYN with another ISN never touches it). It is needed only until
//!   the server's SYN-ACK, which it gives its frontend: the pod's own
//!   answer time, microseconds. A flood churns the table; churning it
//!   within that time is out of reach.
//! - The **client's ACK** (the last of the handshake, or any segment of a
//!   connection the node does not track) records a **claim**
//!   ([`CLAIMS`](crate::maps::CLAIMS)): this 4-tuple came through this
//!   frontend, and acknowledged this server sequence number. A claim is
//!   nothing yet: it expires within seconds
//!   (`--conn-confirm-timeout`), lives in a table of its own that floods
//!   may churn, and never takes room in [`CONNS`](crate::maps::CONNS).
//! - The **server confirms**: its next segment starts exactly at the
//!   sequence number the client acknowledged (its ISN plus one, after a
//!   handshake), and only then does the connection enter
//!   [`CONNS`](crate::maps::CONNS). The pod sends that segment only once
//!   its own TCP accepted the client's ACK (checksum, TTL and all), and an
//!   off-path sender cannot know the number. A pod can confirm only its
//!   own connections: its packets count only from its own interface
//!   ([`trust`]).
//! - Every client segment that would write state (a SYN, a claim, a FIN,
//!   a RST) is checked first, as the pod will check it: a wrong checksum,
//!   a TTL the node would not forward, or a martian source changes
//!   nothing ([`trust`]). A client address holds at most
//!   `--conns-per-source` entries; past it, its handshakes are held back.
//! - Only the server's segments move sequence state, within a window of
//!   what it sent before, and refresh the idle clock. The client's
//!   FIN is only noted until the server acknowledges exactly it.
//! - An entry ends on a RST whose sequence number is exactly the next one
//!   the receiver expects (the check the kernel applies, RFC 5961), once
//!   both sides sent their FIN and the server acknowledged the client's
//!   (then swept after the close timeout), or idle.

use crate::maps::{CONN_FIN_CLIENT, CONN_FIN_SERVER, Conn};

mod expiry;
pub mod mss;
mod reply;
mod request;
pub mod store;
pub mod trust;

pub use expiry::{
    CLAIM_REFRESH_NS, CLOCK_GRANULARITY_NS, Expiry, HALF_CLOSED_TIMEOUT_NS, claim_fresh,
    claim_needs_write, expiry, half_closed,
};
pub use reply::{
    Found, OnReply, answers_handshake, icmp_in_window, on_reply, open_to_new, reply_isn,
    reply_reads,
};
pub use request::{OnRequest, on_request, translated_syn};

pub use crate::tcp::{Segment, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, TCP_URG};

/// `a` comes after `b` in sequence space (RFC 793 arithmetic).
#[inline(always)]
pub const fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The largest receive window TCP can advertise (RFC 7323: 2^30 bytes with
/// the largest window scale). A segment further from what the other side
/// expects than this is outside any window it could be accepted in.
pub const MAX_WINDOW: u32 = 1 << 30;

/// How long a claim waits for the server's confirmation by default
/// (`--conn-confirm-timeout`): far longer than a pod takes to answer an
/// ACK (its sshd sends the banner at once), short enough that a flood of
/// handshakes the pod never accepts leaves nothing behind.
pub const CONFIRM_TIMEOUT_NS: u64 = 10 * 1_000_000_000;

/// Both sides sent their FIN: the connection is closing, and a new
/// handshake for its 4-tuple, through any frontend, may replace it.
#[inline(always)]
pub const fn closing<E>(c: &Conn<E>) -> bool {
    c.flags & (CONN_FIN_CLIENT | CONN_FIN_SERVER) == CONN_FIN_CLIENT | CONN_FIN_SERVER
}

#[cfg(test)]
mod tests;
