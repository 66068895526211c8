//! Applies the connection-tracking decisions of
//! `ssh_fwd_common::conntrack` to the [`CONNS`] and [`HALF_OPEN`] maps. The
//! decisions are pure and tested on the host; this only looks entries up,
//! writes what was decided, and counts.

use core::mem::MaybeUninit;

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_coarse_ns};
use ssh_fwd_common::{
    conntrack::{
        self, OnLegacyReply, OnReply, OnRequest, Segment, mss, reply_isn, reply_reads_half_open,
        request_isn, request_reads_half_open,
        store::{AtomicFlags, store},
    },
    maps::{CONN_REOPENING, Conn, ConnKey, Endpoint, HalfOpen, HalfOpenKey, NatTarget},
    outcome::Outcome,
};

use crate::{
    atomic::Bpf,
    config::cross_node_plain,
    counters::count,
    maps::{CONNS, FRONTENDS, HALF_OPEN, LEGACY, LEGACY_CONNS},
};

const EEXIST: i32 = 17;

/// The frontend a packet is rewritten to and the mapping it counts against.
#[derive(Clone, Copy)]
pub struct Restore {
    pub frontend: Endpoint,
    pub slot: u32,
    /// For a SYN-ACK of a connection that came from another node: the MSS
    /// it may announce at most (0: leave it).
    pub mss_cap: u16,
}

impl Restore {
    #[inline(always)]
    const fn to(frontend: Endpoint, slot: u32) -> Self {
        Self {
            frontend,
            slot,
            mss_cap: 0,
        }
    }
}

/// Copies the entry behind `ptr` (if any) into `slot` and returns it; the
/// caller reads the entry only through what this returns. Nothing is
/// written when there is none: zeroing the slot first would cost a call to
/// the byte-by-byte `memset` the compiler emits for BPF (five instructions
/// a byte, 80 bytes for a connection's two entries), which was most of what
/// connection tracking cost a packet.
#[inline(always)]
fn copy_out<T: Copy>(ptr: Option<*mut T>, slot: &mut MaybeUninit<T>) -> Option<&T> {
    // SAFETY: a pointer the map gave us, valid for this program run.
    ptr.map(|p| &*slot.write(unsafe { *p }))
}

/// Writes into the entry at `ptr` what `next` changed of `read`, the copy
/// the decision was made on (see `ssh_fwd_common::conntrack::store`).
#[inline(always)]
fn write_back(ptr: Option<*mut Conn>, read: Option<&Conn>, next: Option<Conn>) {
    if let (Some(p), Some(read), Some(next)) = (ptr, read, next) {
        // SAFETY: a pointer into the map's value, valid for this run.
        unsafe { store::<Bpf>(p, read, &next) };
    }
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// A request from `client` through `frontend` to `backend` (mapping
/// `slot`). `Err`: drop it, and count why: its 4-tuple is established
/// through another frontend ([`Outcome::ConflictDropped`]), or it completes
/// a handshake the full established table cannot hold
/// ([`Outcome::ConnTableFull`]: held back, so that the pod stays in
/// SYN-RECV and sends nothing unrestored; its half-open entry stays, and
/// the client's answer to the pod's next SYN-ACK tries again).
#[inline(always)]
pub fn request(
    client: Endpoint,
    frontend: Endpoint,
    backend: Endpoint,
    slot: u32,
    seg: &Segment,
) -> Result<(), Outcome> {
    track_request(client, frontend, backend, slot, seg, 0)
}

/// [`request`], recording `mss_cap` with a half-open entry it opens.
#[inline(always)]
fn track_request(
    client: Endpoint,
    frontend: Endpoint,
    backend: Endpoint,
    slot: u32,
    seg: &Segment,
    mss_cap: u16,
) -> Result<(), Outcome> {
    let key = ConnKey::new(client, backend);
    let conn_ptr = CONNS.get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(conn_ptr, &mut conn_slot);
    let mut half_slot = MaybeUninit::uninit();
    let half = half_of_request(&key, seg, conn, &mut half_slot);
    let decision = conntrack::on_request(seg, frontend, slot, conn, half, now());
    let opened = Opened {
        frontend,
        slot,
        mss_cap,
    };
    apply_request(&key, decision, seg, &opened, conn_ptr, conn)
}

/// The half-open entry of the handshake a request may complete, copied
/// into `slot`, when the decision can depend on it.
#[inline(always)]
fn half_of_request<'a>(
    key: &ConnKey,
    seg: &Segment,
    conn: Option<&Conn>,
    slot: &'a mut MaybeUninit<HalfOpen>,
) -> Option<&'a HalfOpen> {
    if !request_reads_half_open(seg, conn) {
        return None;
    }
    copy_out(
        HALF_OPEN.get_ptr_mut(HalfOpenKey::new(*key, request_isn(seg))),
        slot,
    )
}

/// What a half-open entry opened by a request holds besides the SYN's.
struct Opened {
    frontend: Endpoint,
    slot: u32,
    mss_cap: u16,
}

/// A request that reached a backend of this node already translated by
/// another node (or sent to the pod's address by a peer in the cluster).
/// A SYN opens state only with `option`, the frontend it carries in its IP
/// option, and only if that frontend maps to this backend; it records the
/// MSS the link it came in on carries (`link_mtu`: see
/// `ssh_fwd_common::conntrack::mss`). Any other segment follows the state
/// its handshake left here. `Err`: drop it (see [`request`]).
#[inline(always)]
pub fn to_backend(
    client: Endpoint,
    backend: Endpoint,
    seg: &Segment,
    option: Option<Endpoint>,
    link_mtu: impl FnOnce() -> u32,
) -> Result<(), Outcome> {
    if !seg.is_syn() {
        return established_to_backend(client, backend, seg);
    }
    // A SYN without the option: in-cluster, never tracked.
    let Some(frontend) = option else {
        return Ok(());
    };
    // SAFETY: copied out immediately.
    match unsafe { FRONTENDS.get(frontend) }
        .copied()
        .filter(|t| t.endpoint == backend)
    {
        Some(t) => {
            count(Outcome::OptionLearned);
            let cap = mss::cap_for_mtu(link_mtu());
            track_request(client, frontend, backend, t.slot, seg, cap)
        }
        None => {
            count(Outcome::OptionRejected);
            Ok(())
        }
    }
}

/// A segment after the SYN, to a backend: only the state its handshake left
/// here says which frontend it belongs to.
#[inline(always)]
fn established_to_backend(
    client: Endpoint,
    backend: Endpoint,
    seg: &Segment,
) -> Result<(), Outcome> {
    let key = ConnKey::new(client, backend);
    let conn_ptr = CONNS.get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(conn_ptr, &mut conn_slot);
    let mut half_slot = MaybeUninit::uninit();
    let half = half_of_request(&key, seg, conn, &mut half_slot);
    let (frontend, slot) = match (conn, half) {
        (Some(c), _) => (c.frontend, c.slot),
        (None, Some(h)) => (h.frontend, h.slot),
        (None, None) => return Ok(()),
    };
    let decision = conntrack::on_request(seg, frontend, slot, conn, half, now());
    let opened = Opened {
        frontend,
        slot,
        mss_cap: 0,
    };
    apply_request(&key, decision, seg, &opened, conn_ptr, conn)
}

#[inline(always)]
fn apply_request(
    key: &ConnKey,
    decision: OnRequest,
    seg: &Segment,
    opened: &Opened,
    conn_ptr: Option<*mut Conn>,
    conn: Option<&Conn>,
) -> Result<(), Outcome> {
    match decision {
        OnRequest::OpenHalf { reopening } => {
            let half = HalfOpen {
                frontend: opened.frontend,
                slot: opened.slot,
                flags: mss::with_cap(0, opened.mss_cap),
                client_isn: seg.seq,
                server_isn: 0,
                last_seen_ns: now(),
            };
            // A retransmitted SYN (same ISN) finds its entry, which keeps
            // what the handshake learned.
            let half_key = HalfOpenKey::new(*key, seg.seq);
            if HALF_OPEN.insert(half_key, half, BPF_NOEXIST as u64).is_ok() {
                count(Outcome::HalfOpened);
            }
            if reopening && let Some(p) = conn_ptr {
                // SAFETY: a pointer into the map's value, which stays valid
                // for this program run.
                unsafe { Bpf::or(p, CONN_REOPENING) };
            }
        }
        OnRequest::Promote(conn) => {
            let replacing = conn_ptr.is_some();
            let flags = if replacing { 0 } else { BPF_NOEXIST as u64 };
            match CONNS.insert(key, conn, flags) {
                Ok(()) => {
                    count(Outcome::ConnEstablished);
                    if replacing {
                        count(Outcome::ConnReplaced);
                    }
                }
                // Another CPU promoted the same handshake a moment ago.
                Err(e) if e == -EEXIST => {}
                // The caller counts the drop; the half-open entry stays.
                Err(_) => return Err(Outcome::ConnTableFull),
            }
            let _ = HALF_OPEN.remove(HalfOpenKey::new(*key, request_isn(seg)));
        }
        OnRequest::Established(update) => write_back(conn_ptr, conn, update),
        OnRequest::Reset => {
            if CONNS.remove(key).is_ok() {
                count(Outcome::ConnReset);
            }
        }
        OnRequest::IgnoredReset(update) => {
            count(Outcome::ResetIgnored);
            write_back(conn_ptr, conn, update);
        }
        // The caller counts the drop.
        OnRequest::Conflict => return Err(Outcome::ConflictDropped),
        OnRequest::Forward => {}
    }
    Ok(())
}

/// A reply from `backend` to `client`: the frontend to restore, or `None`
/// when it belongs to no connection ssh-fwd forwarded.
#[inline(always)]
pub fn reply(backend: Endpoint, client: Endpoint, seg: &Segment) -> Option<Restore> {
    let key = ConnKey::new(client, backend);
    let conn_ptr = CONNS.get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(conn_ptr, &mut conn_slot);
    let half_key = HalfOpenKey::new(key, reply_isn(seg));
    let half_ptr = if reply_reads_half_open(seg, conn) {
        HALF_OPEN.get_ptr_mut(half_key)
    } else {
        None
    };
    let mut half_slot = MaybeUninit::uninit();
    let half = copy_out(half_ptr, &mut half_slot);
    match conntrack::on_reply(seg, conn, half, now()) {
        OnReply::Untracked => None,
        OnReply::Established {
            frontend,
            slot,
            update,
        } => {
            write_back(conn_ptr, conn, update);
            Some(Restore::to(frontend, slot))
        }
        OnReply::Reset { frontend, slot } => {
            if CONNS.remove(key).is_ok() {
                count(Outcome::ConnReset);
            }
            Some(Restore::to(frontend, slot))
        }
        OnReply::IgnoredReset { frontend, slot } => {
            count(Outcome::ResetIgnored);
            Some(Restore::to(frontend, slot))
        }
        OnReply::Accept {
            frontend,
            slot,
            learned,
        } => {
            if let Some(p) = half_ptr {
                // SAFETY: as above.
                unsafe { *p = learned };
            }
            Some(Restore {
                frontend,
                slot,
                mss_cap: mss::cap_of(learned.flags),
            })
        }
        OnReply::Refuse { frontend, slot } => {
            if HALF_OPEN.remove(half_key).is_ok() {
                count(Outcome::HalfOpenRefused);
            }
            Some(Restore::to(frontend, slot))
        }
    }
}

/// A reply [`reply`] found untracked, leaving the node through an external
/// interface: the frontend to restore anyway, if any. A connection an older
/// data path forwarded ([`legacy_reply`]; only from a reply the node got
/// from the pod, `trusted`), or with `--cross-node plain` the backend's
/// primary frontend (counted as a fallback).
#[inline(always)]
pub fn restore_untracked(
    backend: Endpoint,
    client: Endpoint,
    primary: &NatTarget,
    seg: &Segment,
    trusted: bool,
) -> Option<Restore> {
    if trusted && let Some(restore) = legacy_reply(backend, client, primary, seg) {
        return Some(restore);
    }
    if !cross_node_plain() {
        return None;
    }
    count(Outcome::ReverseFallback);
    Some(Restore::to(primary.endpoint, primary.slot))
}

/// A reply [`reply`] found untracked, from `backend` (whose primary
/// frontend is `primary`) to `client`: if an older data path was
/// forwarding to that backend when this one replaced it, the frontend to
/// restore, adopting the connection into [`CONNS`] on the server's ACK.
#[inline(always)]
fn legacy_reply(
    backend: Endpoint,
    client: Endpoint,
    primary: &NatTarget,
    seg: &Segment,
) -> Option<Restore> {
    // SAFETY: copied out at once.
    let until = unsafe { LEGACY.get(backend) }.copied()?;
    let now = now();
    if until <= now {
        return None;
    }
    let key = ConnKey::new(client, backend);
    // SAFETY: as above.
    let target = unsafe { LEGACY_CONNS.get(key) }
        .copied()
        .unwrap_or(*primary);
    let restore = Restore::to(target.endpoint, target.slot);
    match conntrack::on_legacy_reply(seg, restore.frontend, restore.slot, now) {
        OnLegacyReply::Untracked => return None,
        OnLegacyReply::Adopt(conn) => {
            match CONNS.insert(key, conn, BPF_NOEXIST as u64) {
                Ok(()) => count(Outcome::ConnAdopted),
                // Another CPU adopted it a moment ago.
                Err(e) if e == -EEXIST => {}
                Err(_) => count(Outcome::ConnTableFull),
            }
            let _ = LEGACY_CONNS.remove(key);
        }
        OnLegacyReply::Restore => count(Outcome::LegacyReply),
    }
    Some(restore)
}

/// The established entry of `client`'s connection to `backend`: a
/// reference into the map, read at once (a copy of an absent entry would
/// hand the verifier registers the compiler never wrote).
#[inline(always)]
pub fn established(client: Endpoint, backend: Endpoint) -> Option<&'static Conn> {
    // SAFETY: the map's value stays valid for this program run; the callers
    // only read it, right away.
    unsafe { CONNS.get(ConnKey::new(client, backend)) }
}

/// The half-open entry of `client`'s handshake with `backend` that began
/// with the initial sequence number `client_isn` (as [`established`]).
#[inline(always)]
pub fn half_open(
    client: Endpoint,
    backend: Endpoint,
    client_isn: u32,
) -> Option<&'static HalfOpen> {
    let key = HalfOpenKey::new(ConnKey::new(client, backend), client_isn);
    // SAFETY: as above.
    unsafe { HALF_OPEN.get(key) }
}

/// The frontend a SYN `client -> backend` leaving the node carries to the
/// backend's node: see `ssh_fwd_common::conntrack::translated_syn`.
#[inline(always)]
pub fn translated_syn(client: Endpoint, backend: Endpoint, seg: &Segment) -> Option<Endpoint> {
    conntrack::translated_syn(seg, half_open(client, backend, seg.seq))
}
