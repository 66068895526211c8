//! The client's side: what a segment from the client (through a frontend,
//! or to a backend of this node that another node translated) does to its
//! connection's state. Any of it may be spoofed, so it only ever records
//! what the server will confirm or refuse: a half-open entry, a claim, a
//! FIN noted until the server acknowledges it, a RST held until the
//! server's acknowledgement decides it.

use super::{MAX_WINDOW, Segment, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, after, closing};
use crate::maps::{
    CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_REOPENING, CONN_RST_PENDING, Conn, Endpoint, HalfOpen,
};

/// What to do with a request (client -> frontend) packet; `E` is the
/// family's [`Endpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnRequest<E = Endpoint> {
    /// A SYN: record a half-open entry for this frontend and forward (the
    /// entry of a retransmitted SYN, same ISN, stays as it is). With
    /// `reopening`, also flag the live entry of the same frontend: its
    /// 4-tuple is being reused, so the client's segments record claims.
    OpenHalf { reopening: bool },
    /// A segment of a connection this node does not track (the last ACK
    /// of a handshake, usually): record a claim that this 4-tuple came
    /// through this frontend, for the server to confirm; forward.
    Claim,
    /// A segment of the tracked connection: store `update` (`Some`: a FIN
    /// noted) and forward; with `claim`, also record a claim (the entry is
    /// being reopened).
    Established {
        update: Option<Conn<E>>,
        claim: bool,
    },
    /// A RST exactly in sequence: delete the entry and forward.
    Reset,
    /// A RST that is not exactly in sequence: the entry stays; forward
    /// (the backend checks it the same way). `Some`: one ahead of
    /// `client_next`, held for the server's next new acknowledgement to
    /// decide ([`CONN_RST_PENDING`]).
    IgnoredReset(Option<Conn<E>>),
    /// The 4-tuple is live through another frontend: drop.
    Conflict,
    /// Nothing to record: forward untouched by state.
    Forward,
}

impl<E> OnRequest<E> {
    /// Whether applying the decision writes connection state. The kernel
    /// programs check such a segment first (see [`super::trust`]), and one
    /// that fails the checks writes nothing.
    pub const fn writes_state(&self) -> bool {
        match self {
            Self::OpenHalf { .. } | Self::Claim | Self::Reset => true,
            Self::Established { update, claim } => update.is_some() || *claim,
            Self::IgnoredReset(update) => update.is_some(),
            Self::Conflict | Self::Forward => false,
        }
    }
}

/// The decision for a request through `frontend`, given the established
/// entry of its 4-tuple. `local` says whether the backend lives on this
/// node, where its server's segments will be seen: only there is a claim
/// worth recording (a node that forwards to another node never sees the
/// replies); asked only when the decision may be a claim.
#[inline(always)]
pub fn on_request<E: Copy + PartialEq>(
    seg: &Segment,
    frontend: E,
    conn: Option<&Conn<E>>,
    local: impl FnOnce() -> bool,
) -> OnRequest<E> {
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
    if let Some(c) = live {
        if seg.has(TCP_RST) {
            return if seg.seq == c.client_next {
                OnRequest::Reset
            } else {
                OnRequest::IgnoredReset(rst_ahead(c, seg))
            };
        }
        let claim = c.flags & CONN_REOPENING != 0 && claims(seg) && local();
        return OnRequest::Established {
            update: from_client(c, seg),
            claim,
        };
    }
    // No entry, or a closing one (of any frontend): a new connection on
    // the 4-tuple may claim it; the closed one's own last segments (its RST,
    // the client's last ACK, exactly in sequence) are not claims.
    if let Some(c) = conn
        && c.frontend == frontend
        && seg.seq == c.client_next
    {
        return if seg.has(TCP_RST) {
            OnRequest::Reset
        } else {
            OnRequest::Forward
        };
    }
    if conn.is_some() && seg.has(TCP_RST) {
        return OnRequest::Forward;
    }
    if claims(seg) && local() {
        OnRequest::Claim
    } else {
        OnRequest::Forward
    }
}

/// Whether a client segment may be claimed: an ACK, neither SYN nor RST
/// (its acknowledgement number is what the server's next segment starts
/// at).
#[inline(always)]
const fn claims(seg: &Segment) -> bool {
    seg.flags & (TCP_ACK | TCP_SYN | TCP_RST) == TCP_ACK
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
pub fn translated_syn<E: Copy>(seg: &Segment, half: Option<&HalfOpen<E>>) -> Option<E> {
    match half {
        Some(h) if seg.is_syn() && h.client_isn == seg.seq => Some(h.frontend),
        _ => None,
    }
}

/// The entry holding a client RST that is ahead of what the server has
/// acknowledged, or `None` for one behind (never in sequence again). The
/// server's ACK of the client's last segment may be on its way back while
/// the RST goes out: only that ACK tells whether the server accepts it.
#[inline(always)]
fn rst_ahead<E: Copy + PartialEq>(c: &Conn<E>, seg: &Segment) -> Option<Conn<E>> {
    if !after(seg.seq, c.client_next) {
        return None;
    }
    let mut next = *c;
    next.flags |= CONN_RST_PENDING;
    next.client_rst = seg.seq;
    (next != *c).then_some(next)
}

/// The entry after a segment from the client, or `None` if nothing to
/// store changed. Spoofable, so it moves no sequence state and not the
/// clock: a FIN is only noted as pending (see [`fin_noted`]) until the
/// server acknowledges exactly it.
#[inline(always)]
fn from_client<E: Copy + PartialEq>(c: &Conn<E>, seg: &Segment) -> Option<Conn<E>> {
    if !seg.has(TCP_FIN) || c.flags & CONN_FIN_CLIENT != 0 || !fin_noted(c, seg.end()) {
        return None;
    }
    let mut next = *c;
    next.client_fin_end = seg.end();
    next.flags |= CONN_FIN_PENDING;
    (next != *c).then_some(next)
}

/// How far `seq` lies ahead of the client's next expected sequence number,
/// if inside [`MAX_WINDOW`] (at or after it: the server's TCP accepts a FIN
/// only there).
#[inline(always)]
const fn in_client_window<E>(c: &Conn<E>, seq: u32) -> Option<u32> {
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
const fn fin_noted<E>(c: &Conn<E>, end: u32) -> bool {
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
