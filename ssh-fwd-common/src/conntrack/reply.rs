//! The server's side: what a segment from the backend does. The kernel
//! programs ask only once they know it came from the pod's own interface
//! (see [`super::trust::ownership`]), so these segments are trusted: they
//! confirm claims, move sequence state within the window and refresh the
//! clock.

use super::{
    MAX_WINDOW, Segment, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, after, claim_fresh, closing, mss,
};
use crate::maps::{
    CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_FIN_SERVER, CONN_REOPENING, CONN_RST_PENDING, Claim,
    Conn, Endpoint, HalfOpen,
};

/// What to do with a reply (backend -> client) packet; `E` is the
/// family's [`Endpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnReply<E = Endpoint> {
    /// Not a connection we track: leave it untouched.
    Untracked,
    /// Of the tracked connection: restore `frontend`, store the updated
    /// entry (`Some`).
    Established {
        frontend: E,
        slot: u32,
        update: Option<Conn<E>>,
    },
    /// The server's valid RST, or its acknowledgement of a client RST held
    /// for it: restore `frontend`, then delete the entry.
    Reset { frontend: E, slot: u32 },
    /// A RST from the server that is not exactly in sequence: restore
    /// `frontend`, keep the entry.
    IgnoredReset { frontend: E, slot: u32 },
    /// The server's SYN-ACK to a SYN through a frontend: restore its
    /// frontend (and lower the MSS to `mss_cap`, if not 0). Nothing is
    /// stored: the client's ACK will claim the connection.
    Accept {
        frontend: E,
        slot: u32,
        mss_cap: u16,
    },
    /// The server's bare ACK of a handshake in progress: its request
    /// socket answering another SYN of the 4-tuple (a spoofed one, or the
    /// client's after a spoofed one). Restore the frontend of the SYN it
    /// acknowledges; nothing is stored.
    Answer { frontend: E, slot: u32 },
    /// The server refused the handshake (RST): restore the frontend, so the
    /// client sees "connection refused", and drop the half-open entry.
    Refuse { frontend: E, slot: u32 },
    /// The server's segment starts where a claim's client acknowledged:
    /// store `conn` (replacing the closing or reopened entry there, if
    /// any), drop the claim, restore its frontend.
    Confirm { conn: Conn<E>, replacing: bool },
    /// The server reset a claimed connection at once: restore the claim's
    /// frontend, drop the claim.
    ClaimReset { frontend: E, slot: u32 },
}

/// The entries a reply's 4-tuple has: the connection, the half-open entry
/// of the handshake it answers (by [`reply_isn`]) and the claim its
/// sequence number confirms. The kernel programs look up only those
/// [`reply_reads`] says the decision can depend on.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a, E = Endpoint> {
    pub conn: Option<&'a Conn<E>>,
    pub half: Option<&'a HalfOpen<E>>,
    pub claim: Option<&'a Claim<E>>,
}

// Not derived: that would ask `E: Default`, which no endpoint is.
impl<E> Default for Found<'_, E> {
    fn default() -> Self {
        Self {
            conn: None,
            half: None,
            claim: None,
        }
    }
}

/// Which tables, besides [`CONNS`](crate::maps::CONNS), a reply's decision
/// can depend on: `(half-open, claims)`. Most segments of a tracked
/// connection read neither.
#[inline(always)]
pub const fn reply_reads<E>(seg: &Segment, conn: Option<&Conn<E>>) -> (bool, bool) {
    let open = match conn {
        None => true,
        Some(c) => open_to_new(c),
    };
    if !open {
        return (false, false);
    }
    let half = seg.flags & (TCP_SYN | TCP_RST) != 0;
    let claim = seg.flags & TCP_SYN == 0;
    (half, claim)
}

/// Whether a reply may be the server's answer to a handshake, to be
/// looked up in the half-open table when no claim was found: a bare ACK of
/// a 4-tuple with no connection. Checked apart from [`reply_reads`] so
/// that the server's first segment, which finds its claim, costs no
/// half-open lookup.
#[inline(always)]
pub const fn answers_handshake<E>(seg: &Segment, conn: Option<&Conn<E>>) -> bool {
    conn.is_none()
        && seg.flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN) == TCP_ACK
        && seg.payload == 0
}

/// An entry a new connection on its 4-tuple may replace: closed both ways,
/// or being reopened (a SYN of the same frontend came).
#[inline(always)]
pub const fn open_to_new<E>(c: &Conn<E>) -> bool {
    closing(c) || c.flags & CONN_REOPENING != 0
}

/// The client ISN of the handshake a reply answers: a SYN-ACK, or a RST
/// refusing it, acknowledges the SYN.
#[inline(always)]
pub const fn reply_isn(seg: &Segment) -> u32 {
    seg.ack.wrapping_sub(1)
}

/// The decision for a reply, given the entries found for its 4-tuple, at
/// time `now`; claims older than `confirm_timeout_ns` count for nothing.
#[inline(always)]
pub fn on_reply<E: Copy + PartialEq>(
    seg: &Segment,
    found: &Found<'_, E>,
    now: u64,
    confirm_timeout_ns: u64,
) -> OnReply<E> {
    let conn = found.conn;
    let open = conn.is_none_or(open_to_new);
    let half = found.half.filter(|_| open);
    let claim = found
        .claim
        .filter(|c| open && claim_fresh(c, now, confirm_timeout_ns));
    if seg.flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN | TCP_ACK {
        if let Some(h) = half {
            return OnReply::Accept {
                frontend: h.frontend,
                slot: h.slot,
                mss_cap: mss::cap_of(h.flags),
            };
        }
        return match conn {
            Some(c) => OnReply::Established {
                frontend: c.frontend,
                slot: c.slot,
                update: None,
            },
            None => OnReply::Untracked,
        };
    }
    if seg.has(TCP_RST) {
        if let Some(h) = half
            && seg.has(TCP_ACK)
        {
            return OnReply::Refuse {
                frontend: h.frontend,
                slot: h.slot,
            };
        }
        if let Some(cl) = claim {
            return OnReply::ClaimReset {
                frontend: cl.frontend,
                slot: cl.slot,
            };
        }
        return match conn {
            Some(c) if seg.seq == c.server_next => OnReply::Reset {
                frontend: c.frontend,
                slot: c.slot,
            },
            Some(c) => OnReply::IgnoredReset {
                frontend: c.frontend,
                slot: c.slot,
            },
            None => OnReply::Untracked,
        };
    }
    if let Some(cl) = claim
        && seg.has(TCP_ACK)
    {
        return OnReply::Confirm {
            conn: confirmed(cl, seg, now),
            replacing: conn.is_some(),
        };
    }
    let Some(c) = conn else {
        return match half {
            Some(h) if answers_handshake(seg, conn) => OnReply::Answer {
                frontend: h.frontend,
                slot: h.slot,
            },
            _ => OnReply::Untracked,
        };
    };
    if ends_with_held_rst(c, seg) {
        return OnReply::Reset {
            frontend: c.frontend,
            slot: c.slot,
        };
    }
    OnReply::Established {
        frontend: c.frontend,
        slot: c.slot,
        update: from_server(c, seg, now),
    }
}

/// The connection a claim becomes, from the server's segment that
/// confirmed it: its sequence state starts from that segment.
#[inline(always)]
fn confirmed<E: Copy>(cl: &Claim<E>, seg: &Segment, now: u64) -> Conn<E> {
    Conn {
        frontend: cl.frontend,
        slot: cl.slot,
        flags: if seg.has(TCP_FIN) { CONN_FIN_SERVER } else { 0 },
        client_next: seg.ack,
        server_next: seg.end(),
        client_fin_end: 0,
        client_rst: 0,
        last_seen_ns: now,
        created_ns: now,
    }
}

/// Whether `seq` is within [`MAX_WINDOW`] of what the server sent before,
/// either way: the client would accept nothing further ahead (its window
/// is at most that), and the server retransmits nothing older than what
/// the client has yet to acknowledge.
#[inline(always)]
const fn in_server_window<E>(c: &Conn<E>, seq: u32) -> bool {
    seq.wrapping_sub(c.server_next).wrapping_add(MAX_WINDOW) <= 2 * MAX_WINDOW
}

/// Whether an ICMP error about a reply that quotes the server's sequence
/// number `quoted_seq` may reach the pod: it must be one the server sent,
/// within the window behind what it sent last (the pod's TCP checks it
/// exactly against what is unacknowledged).
#[inline(always)]
pub const fn icmp_in_window<E>(c: &Conn<E>, quoted_seq: u32) -> bool {
    c.server_next.wrapping_sub(quoted_seq) <= MAX_WINDOW
}

/// A server segment that decides a held client RST: its acknowledgement
/// is new and is exactly the RST's sequence number, so the server accepted
/// the RST (RFC 5961: in sequence is the next number it expects). The
/// first new acknowledgement decides, whatever it is, so that a spoofed
/// RST has one chance, as against the kernel's own exact check.
#[inline(always)]
const fn ends_with_held_rst<E>(c: &Conn<E>, seg: &Segment) -> bool {
    c.flags & CONN_RST_PENDING != 0
        && seg.has(TCP_ACK)
        && after(seg.ack, c.client_next)
        && seg.ack == c.client_rst
}

/// The entry after a segment from the server, or `None` if nothing to
/// store changed. Most segments of a busy connection move a sequence
/// number; the clock is written at most once per
/// [`CLOCK_GRANULARITY_NS`](super::CLOCK_GRANULARITY_NS). A segment
/// outside the window of what the server sent refreshes only the clock. A
/// segment of this connection that is no SYN ends a reopening: the server
/// answered the SYN that flagged it from the old connection (a challenge
/// ACK), so that SYN will never be completed.
#[inline(always)]
fn from_server<E: Copy + PartialEq>(c: &Conn<E>, seg: &Segment, now: u64) -> Option<Conn<E>> {
    let mut next = c.clone_with_clock(now);
    if !seg.has(TCP_SYN) {
        next.flags &= !CONN_REOPENING;
    }
    if in_server_window(c, seg.seq) {
        let end = seg.end();
        if after(end, next.server_next) {
            next.server_next = end;
        }
        if seg.has(TCP_ACK) {
            if after(seg.ack, next.client_next) {
                next.client_next = seg.ack;
                next.flags &= !CONN_RST_PENDING;
            }
            // The server acknowledged exactly the client's FIN, and nothing
            // beyond it: the client has closed.
            if next.flags & CONN_FIN_PENDING != 0
                && seg.ack == next.client_fin_end
                && next.client_next == seg.ack
            {
                next.flags = (next.flags | CONN_FIN_CLIENT) & !CONN_FIN_PENDING;
            }
        }
        if seg.has(TCP_FIN) {
            next.flags |= CONN_FIN_SERVER;
        }
    }
    (next != *c).then_some(next)
}
