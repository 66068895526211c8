//! Connection tracking as pure decisions: what the kernel programs do with
//! the state of a TCP connection to a backend, given one segment. The
//! programs look the entries up, call these functions, and apply the result;
//! every transition is a host unit test here.
//!
//! The threat model: an off-path sender can send any packet with any source
//! address, but never sees the replies. So:
//! - A SYN only ever creates a **half-open** entry, in a table a flood may
//!   churn ([`HALF_OPEN`](crate::maps::HALF_OPEN)), keyed by the client's
//!   initial sequence number too: a SYN with another ISN never touches a
//!   handshake in progress.
//! - An **established** entry ([`CONNS`](crate::maps::CONNS)) is created
//!   only by the client's ACK that acknowledges the server's SYN-ACK, whose
//!   sequence number only the real client has seen.
//! - A SYN never replaces an established entry of another frontend; one of
//!   the same frontend may be replaced only by another completed handshake.
//! - Only the server's side is trusted to move an entry's sequence state:
//!   its packets come from the pod (the egress program ignores "replies"
//!   that entered the node from outside). The client's next sequence number
//!   is the one the server acknowledged last.
//! - An entry ends on a RST whose sequence number is exactly the next one
//!   the receiver expects (the check the kernel applies, RFC 5961), or once
//!   both sides sent their FIN and the server acknowledged the client's;
//!   anything else leaves it alone.

use crate::maps::{
    CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_FIN_SERVER, CONN_REOPENING, CONN_RST_PENDING, Conn,
    Endpoint, HALF_OPEN_ISN_KNOWN, HalfOpen,
};

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// What the data path reads of a TCP segment (sequence numbers host order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Payload bytes (IP total length minus both headers).
    pub payload: u32,
}

impl Segment {
    const fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// A connection request: SYN without ACK.
    pub const fn is_syn(&self) -> bool {
        self.flags & (TCP_SYN | TCP_ACK) == TCP_SYN
    }

    /// The sequence number after this segment: payload, SYN and FIN each
    /// take sequence space.
    pub const fn end(&self) -> u32 {
        let mut end = self.seq.wrapping_add(self.payload);
        if self.has(TCP_SYN) {
            end = end.wrapping_add(1);
        }
        if self.has(TCP_FIN) {
            end = end.wrapping_add(1);
        }
        end
    }
}

/// `a` comes after `b` in sequence space (RFC 793 arithmetic).
#[inline(always)]
pub const fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// What to do with a request (client -> frontend) packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRequest {
    /// A SYN: record a half-open entry for this frontend and forward (the
    /// entry of a retransmitted SYN, same ISN, stays as it is). With
    /// `reopening`, also flag the established entry of the same frontend,
    /// so that this handshake may replace it.
    OpenHalf { reopening: bool },
    /// The handshake completed: store the established entry (replacing a
    /// closing one, or one of the same frontend being reopened), drop the
    /// half-open one, forward.
    Promote(Conn),
    /// A packet of the established connection: store the updated entry
    /// (`Some`) and forward.
    Established(Option<Conn>),
    /// A valid RST of the client: delete the entry and forward.
    Reset,
    /// A RST of the client that is not exactly in sequence: the entry
    /// stays; forward (the backend checks it the same way). `Some`: one
    /// ahead of `client_next`, held for the server's next new
    /// acknowledgement to decide ([`CONN_RST_PENDING`]).
    IgnoredReset(Option<Conn>),
    /// The 4-tuple is established through another frontend: drop.
    Conflict,
    /// No state of ours: forward untouched by state (the backend's TCP
    /// checks it; a node that only forwards to another node sees no reply).
    Forward,
}

/// The decision for a request through `frontend` (whose mapping slot is
/// `slot`), given the entries found for its 4-tuple, at time `now`.
#[inline(always)]
pub fn on_request(
    seg: &Segment,
    frontend: Endpoint,
    slot: u32,
    conn: Option<&Conn>,
    half: Option<&HalfOpen>,
    now: u64,
) -> OnRequest {
    let live = conn.filter(|c| !closing(c));
    if let Some(c) = live
        && c.frontend != frontend
    {
        return OnRequest::Conflict;
    }
    if seg.is_syn() {
        return OnRequest::OpenHalf {
            reopening: live.is_some(),
        };
    }
    // A handshake may complete unless a live entry of this frontend stands
    // and is not being reopened (then the half-open entry is a leftover).
    let may_promote = live.is_none_or(|c| c.flags & CONN_REOPENING != 0);
    if may_promote
        && let Some(h) = half
        && completes(seg, frontend, h)
    {
        return OnRequest::Promote(Conn {
            frontend,
            slot,
            flags: 0,
            client_next: seg.end(),
            server_next: h.server_isn.wrapping_add(1),
            client_fin_end: 0,
            client_rst: 0,
            last_seen_ns: now,
            created_ns: now,
        });
    }
    match conn {
        Some(c) if c.frontend == frontend => {
            if seg.has(TCP_RST) {
                return if seg.seq == c.client_next {
                    OnRequest::Reset
                } else {
                    OnRequest::IgnoredReset(rst_ahead(c, seg, now))
                };
            }
            OnRequest::Established(from_client(c, seg, now))
        }
        _ => OnRequest::Forward,
    }
}

/// Whether [`on_request`] can depend on the half-open entry: when not, the
/// kernel programs skip that lookup (most packets of a live connection).
#[inline(always)]
pub const fn request_reads_half_open(seg: &Segment, conn: Option<&Conn>) -> bool {
    if seg.is_syn() || seg.flags & TCP_ACK == 0 {
        return false;
    }
    match conn {
        None => true,
        Some(c) => closing(c) || c.flags & CONN_REOPENING != 0,
    }
}

/// Whether [`on_reply`] can depend on the half-open entry.
#[inline(always)]
pub const fn reply_reads_half_open(seg: &Segment, conn: Option<&Conn>) -> bool {
    if seg.flags & (TCP_SYN | TCP_RST) == 0 {
        return false;
    }
    match conn {
        None => true,
        Some(c) => closing(c) || c.flags & CONN_REOPENING != 0,
    }
}

/// The frontend to carry in the IP option of a SYN leaving the node for a
/// backend on another node, given the half-open entry of its 4-tuple: the
/// entry's frontend if this SYN is the one that made it (the client's
/// initial sequence number matches). The kernel program also requires that
/// the SYN came in from outside the node, where the ingress program saw it;
/// a SYN a pod sends to another pod's address never carries the option,
/// whatever SYNs spoofing that pod's address did to the half-open table (an
/// off-path sender does not know the pod's ISN).
#[inline(always)]
pub fn translated_syn(seg: &Segment, half: Option<&HalfOpen>) -> Option<Endpoint> {
    match half {
        Some(h) if seg.is_syn() && h.client_isn == seg.seq => Some(h.frontend),
        _ => None,
    }
}

/// The client ISN of the handshake a request other than a SYN may complete
/// (the key of its [`HALF_OPEN`](crate::maps::HALF_OPEN) entry): the SYN
/// took one sequence number.
#[inline(always)]
pub const fn request_isn(seg: &Segment) -> u32 {
    seg.seq.wrapping_sub(1)
}

/// The client ISN of the handshake a reply answers: a SYN-ACK, or a RST
/// refusing it, acknowledges the SYN.
#[inline(always)]
pub const fn reply_isn(seg: &Segment) -> u32 {
    seg.ack.wrapping_sub(1)
}

/// Whether `seg` is the client's ACK completing the handshake `h`.
#[inline(always)]
fn completes(seg: &Segment, frontend: Endpoint, h: &HalfOpen) -> bool {
    h.frontend == frontend
        && h.flags & HALF_OPEN_ISN_KNOWN != 0
        && seg.flags & (TCP_ACK | TCP_SYN | TCP_RST) == TCP_ACK
        && seg.ack == h.server_isn.wrapping_add(1)
        && seg.seq == h.client_isn.wrapping_add(1)
}

/// What to do with a reply (backend -> client) packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnReply {
    /// Not a connection we track: leave it untouched.
    Untracked,
    /// Of the established connection: restore `frontend`, store the updated
    /// entry (`Some`).
    Established {
        frontend: Endpoint,
        slot: u32,
        update: Option<Conn>,
    },
    /// The server's valid RST, or its acknowledgement of a client RST held
    /// for it: restore `frontend`, then delete the entry.
    Reset { frontend: Endpoint, slot: u32 },
    /// A RST from the server that is not exactly in sequence: restore
    /// `frontend`, keep the entry.
    IgnoredReset { frontend: Endpoint, slot: u32 },
    /// The server's SYN-ACK to a half-open entry: restore its frontend and
    /// store the entry with the server's initial sequence number.
    Accept {
        frontend: Endpoint,
        slot: u32,
        learned: HalfOpen,
    },
    /// The server refused the handshake (RST): restore the frontend, so the
    /// client sees "connection refused", and drop the half-open entry (an
    /// entry of a closed connection on the 4-tuple stays for its close
    /// timeout).
    Refuse { frontend: Endpoint, slot: u32 },
}

/// The decision for a reply, given the entries found for its 4-tuple.
#[inline(always)]
pub fn on_reply(seg: &Segment, conn: Option<&Conn>, half: Option<&HalfOpen>, now: u64) -> OnReply {
    let syn_ack = seg.flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN | TCP_ACK;
    if let Some(h) = half
        && seg.ack == h.client_isn.wrapping_add(1)
        && (conn.is_none_or(|c| c.flags & CONN_REOPENING != 0 || closing(c)))
    {
        if syn_ack {
            return OnReply::Accept {
                frontend: h.frontend,
                slot: h.slot,
                learned: HalfOpen {
                    flags: h.flags | HALF_OPEN_ISN_KNOWN,
                    server_isn: seg.seq,
                    last_seen_ns: now,
                    ..*h
                },
            };
        }
        // The RST answers this SYN (its ACK is the SYN's): the pod refused
        // it. A closed connection's entry that the handshake would have
        // replaced does not stand in the way.
        if seg.has(TCP_RST) && conn.is_none_or(closing) {
            return OnReply::Refuse {
                frontend: h.frontend,
                slot: h.slot,
            };
        }
    }
    let Some(c) = conn else {
        return OnReply::Untracked;
    };
    if seg.has(TCP_RST) {
        return if seg.seq == c.server_next {
            OnReply::Reset {
                frontend: c.frontend,
                slot: c.slot,
            }
        } else {
            OnReply::IgnoredReset {
                frontend: c.frontend,
                slot: c.slot,
            }
        };
    }
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

/// What to do with a reply that [`on_reply`] found untracked, from a
/// backend an older data path was forwarding to when this one replaced it
/// (see [`LEGACY`](crate::maps::LEGACY)): its connections were never
/// tracked, and cutting them would end every session of the upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLegacyReply {
    /// Not one of them: leave it untouched.
    Untracked,
    /// The server's ACK of a connection it holds: track it from here on,
    /// with the sequence state this segment shows (the server's side is
    /// trusted), and restore its frontend.
    Adopt(Conn),
    /// A RST, or a segment without ACK: restore the frontend, track
    /// nothing.
    Restore,
}

/// The decision for a reply from a legacy backend without tracked state,
/// to be restored to `frontend` (mapping `slot`). A SYN-ACK is not one: a
/// handshake began after the upgrade is tracked as any other.
#[inline(always)]
pub fn on_legacy_reply(seg: &Segment, frontend: Endpoint, slot: u32, now: u64) -> OnLegacyReply {
    if seg.has(TCP_SYN) {
        return OnLegacyReply::Untracked;
    }
    if seg.has(TCP_RST) || !seg.has(TCP_ACK) {
        return OnLegacyReply::Restore;
    }
    OnLegacyReply::Adopt(Conn {
        frontend,
        slot,
        flags: if seg.has(TCP_FIN) { CONN_FIN_SERVER } else { 0 },
        client_next: seg.ack,
        server_next: seg.end(),
        client_fin_end: 0,
        client_rst: 0,
        last_seen_ns: now,
        created_ns: now,
    })
}

/// Both sides sent their FIN: the connection is closing, and a new
/// handshake for its 4-tuple, through any frontend, may replace it.
#[inline(always)]
pub const fn closing(c: &Conn) -> bool {
    c.flags & (CONN_FIN_CLIENT | CONN_FIN_SERVER) == CONN_FIN_CLIENT | CONN_FIN_SERVER
}

/// One side closed and the other has not: the server sent its FIN, or
/// acknowledged exactly the client's (both unforgeable off-path; a FIN the
/// client side merely sent counts for nothing). Such an entry lives only
/// [`HALF_CLOSED_TIMEOUT_NS`] without a segment from the server.
#[inline(always)]
pub const fn half_closed(c: &Conn) -> bool {
    let fins = c.flags & (CONN_FIN_CLIENT | CONN_FIN_SERVER);
    fins != 0 && fins != CONN_FIN_CLIENT | CONN_FIN_SERVER
}

/// The entry with its clock moved by a client segment: any segment while
/// both sides are open, none once one side closed (spoofable, or a client
/// holding the entry open without ever closing: see [`half_closed`]).
#[inline(always)]
fn client_clock(c: &Conn, now: u64) -> Conn {
    if half_closed(c) {
        *c
    } else {
        c.clone_with_clock(now)
    }
}

/// The entry holding a client RST that is ahead of what the server has
/// acknowledged, or `None` for one behind (never in sequence again). The
/// server's ACK of the client's last segment may be on its way back while
/// the RST goes out: only that ACK tells whether the server accepts it.
#[inline(always)]
fn rst_ahead(c: &Conn, seg: &Segment, now: u64) -> Option<Conn> {
    if !after(seg.seq, c.client_next) {
        return None;
    }
    let mut next = client_clock(c, now);
    next.flags |= CONN_RST_PENDING;
    next.client_rst = seg.seq;
    (next != *c).then_some(next)
}

/// A server segment that decides a held client RST: its acknowledgement
/// is new and is exactly the RST's sequence number, so the server accepted
/// the RST (RFC 5961: in sequence is the next number it expects). The
/// first new acknowledgement decides, whatever it is, so that a spoofed
/// RST has one chance, as against the kernel's own exact check.
#[inline(always)]
const fn ends_with_held_rst(c: &Conn, seg: &Segment) -> bool {
    c.flags & CONN_RST_PENDING != 0
        && seg.has(TCP_ACK)
        && after(seg.ack, c.client_next)
        && seg.ack == c.client_rst
}

/// The entry after a segment from the client, or `None` if nothing to
/// store changed. Spoofable, so it moves no sequence state: it refreshes
/// the clock (see [`client_clock`]), and a FIN is
/// only noted as pending (see [`fin_noted`]) until the server acknowledges
/// exactly it.
#[inline(always)]
fn from_client(c: &Conn, seg: &Segment, now: u64) -> Option<Conn> {
    let mut next = client_clock(c, now);
    if seg.has(TCP_FIN) && next.flags & CONN_FIN_CLIENT == 0 && fin_noted(c, seg.end()) {
        next.client_fin_end = seg.end();
        next.flags |= CONN_FIN_PENDING;
    }
    (next != *c).then_some(next)
}

/// The largest receive window TCP can advertise (RFC 7323: 2^30 bytes with
/// the largest window scale): a FIN further ahead than this of what the
/// server acknowledged is outside any window the server could accept it in.
pub const MAX_WINDOW: u32 = 1 << 30;

/// How far `seq` lies ahead of the client's next expected sequence number,
/// if inside [`MAX_WINDOW`] (at or after it: the server's TCP accepts a FIN
/// only there).
#[inline(always)]
const fn in_client_window(c: &Conn, seq: u32) -> Option<u32> {
    let ahead = seq.wrapping_sub(c.client_next);
    if ahead < MAX_WINDOW {
        Some(ahead)
    } else {
        None
    }
}

/// Whether a client FIN ending at `end` becomes the pending one. Its
/// sequence number (the FIN's own, `end - 1`) must be in the client's
/// window, and it replaces a pending FIN only if it is the earlier of the
/// two, or the pending one is stale: a pending FIN the server's
/// acknowledgement went past was not the client's (the client sends
/// nothing after its FIN). The real FIN follows the last byte the client
/// sent; an off-path sender does not know where that is, so its FIN can
/// neither displace the real one (it lands after it, but for a guess inside
/// the bytes in flight) nor be acknowledged exactly.
#[inline(always)]
const fn fin_noted(c: &Conn, end: u32) -> bool {
    let Some(ahead) = in_client_window(c, end.wrapping_sub(1)) else {
        return false;
    };
    if c.flags & CONN_FIN_PENDING == 0 {
        return true;
    }
    match in_client_window(c, c.client_fin_end.wrapping_sub(1)) {
        Some(pending) => ahead < pending,
        None => true,
    }
}

/// The entry after a segment from the server (trusted: from the pod), or
/// `None` if nothing to store changed. Most segments of a busy connection
/// move a sequence number; the clock is written at most once per
/// [`CLOCK_GRANULARITY_NS`]. A segment of this connection that is no SYN
/// ends a reopening: the server answered the SYN that flagged it from the
/// old connection (a challenge ACK), so that SYN will never be completed,
/// and the client's segments need not look for it any more.
#[inline(always)]
fn from_server(c: &Conn, seg: &Segment, now: u64) -> Option<Conn> {
    let mut next = c.clone_with_clock(now);
    if !seg.has(TCP_SYN) {
        next.flags &= !CONN_REOPENING;
    }
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
    (next != *c).then_some(next)
}

/// How stale `last_seen_ns` may get before a packet rewrites it: the idle
/// sweep works in minutes, so a write per second per connection is plenty.
pub const CLOCK_GRANULARITY_NS: u64 = 1_000_000_000;

impl Conn {
    #[inline(always)]
    fn clone_with_clock(&self, now: u64) -> Self {
        let mut c = *self;
        if now.wrapping_sub(c.last_seen_ns) >= CLOCK_GRANULARITY_NS {
            c.last_seen_ns = now;
        }
        c
    }
}

/// Why the agent's sweep removes an established entry, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Both sides closed, and the close timeout passed.
    Closed,
    /// No packet for longer than the idle timeout; half-closed, no segment
    /// from the server for [`HALF_CLOSED_TIMEOUT_NS`].
    Idle,
}

/// How long a [`half_closed`] connection may stay without a segment from
/// the server. A client that completes handshakes and never answers the
/// server's FIN (sshd closes an unauthenticated connection after its
/// LoginGraceTime) would otherwise hold its entry for the whole idle
/// timeout, and one sender could fill the established table over a day.
/// Two minutes: nf_conntrack's FIN_WAIT timeout (its CLOSE_WAIT is one),
/// and longer than Linux retransmits an unanswered FIN (eight times from a
/// 200 ms timeout: under two minutes) and keeps an orphaned FIN_WAIT_2
/// (`tcp_fin_timeout`, 60 s). ssh and sshd close both ways at once; a
/// half-closed connection that goes on moving data keeps its entry with
/// every segment from the server, data or ACK.
pub const HALF_CLOSED_TIMEOUT_NS: u64 = 120 * 1_000_000_000;

/// The sweep's verdict on an established entry at time `now` (same clock
/// as the kernel's `last_seen_ns`). A [`half_closed`] entry counts as idle
/// after [`HALF_CLOSED_TIMEOUT_NS`] (or the idle timeout, if shorter).
pub fn expiry(c: &Conn, now: u64, idle_timeout_ns: u64, close_timeout_ns: u64) -> Option<Expiry> {
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

/// Whether the sweep removes a half-open entry: a handshake that did not
/// complete within `timeout_ns` never will (the client gave up or it was
/// spoofed).
pub fn half_open_expired(h: &HalfOpen, now: u64, timeout_ns: u64) -> bool {
    now.saturating_sub(h.last_seen_ns) >= timeout_ns
}

pub mod mss;
pub mod store;
#[cfg(test)]
mod tests;
