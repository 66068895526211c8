//! Applies the connection-tracking decisions of
//! `ssh_fwd_common::conntrack` to a family's connection, half-open and claim
//! tables (`CONNS`, `HALF_OPEN`, `CLAIMS` for IPv4; see [`Family`]). The
//! decisions are pure and tested on the host; this only looks entries up,
//! checks the segments that would write (see [`crate::verify`]), writes
//! what was decided, and counts.

use core::mem::MaybeUninit;

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_NOEXIST},
    helpers::bpf_ktime_get_coarse_ns,
};
use ssh_fwd_common::{
    conntrack::{
        self, Found, OnReply, OnRequest, Segment, answers_handshake, claim_needs_write, closing,
        mss, reply_isn, reply_reads, store::store, trust::within_quota,
    },
    maps::{
        Addr, CONN_REOPENING, Claim, ClaimKey, Conn, ConnKey, Ended, Endpoint, HalfOpen,
        HalfOpenKey, NatTarget,
    },
    outcome::Outcome,
    packet::ETH_HLEN,
};

use crate::{
    atomic::{Bpf, add_u64},
    audit,
    config::{confirm_timeout_ns, conns_per_source, cross_node_plain},
    counters::{ConnCounter, Direction, count, count_conns},
    family::Family,
    packet::Headers,
    verify::{Checked, Verdict},
};

/// A family's connection entry.
type ConnOf<A> = Conn<Endpoint<A>>;

const EEXIST: i32 = 17;

/// The frontend a packet is rewritten to and the mapping it counts against.
#[derive(Clone, Copy)]
pub struct Restore<A: Addr = u32> {
    pub frontend: Endpoint<A>,
    pub slot: u32,
    /// For a SYN-ACK of a connection that came from another node: the MSS
    /// it may announce at most (0: leave it).
    pub mss_cap: u16,
}

impl<A: Addr> Restore<A> {
    #[inline(always)]
    const fn to(frontend: Endpoint<A>, slot: u32) -> Self {
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
/// a byte), which was most of what connection tracking cost a packet. The
/// copy is a `memcpy` the compiler expands into word moves; a plain
/// assignment may overlap for all it knows, and becomes a call to the
/// byte-by-byte `memmove`.
#[inline(always)]
fn copy_out<T: Copy>(ptr: Option<*mut T>, slot: &mut MaybeUninit<T>) -> Option<&T> {
    ptr.map(|p| {
        // SAFETY: a pointer the map gave us, valid for this program run, to
        // a value of its own that cannot overlap the stack slot; the slot is
        // fully written before it is read.
        unsafe {
            core::ptr::copy_nonoverlapping(p.cast_const(), slot.as_mut_ptr(), 1);
            slot.assume_init_ref()
        }
    })
}

/// Where an entry of `A`'s connection table is copied: `stack`, or for a
/// family whose copies go to a map ([`Family::COPY_IN_MAP`]) that map's
/// place, and `stack` goes unused (and takes no room). `None` only if the
/// map had no place, which a per-CPU array of one always has.
#[inline(always)]
fn conn_place<A: Family>(
    stack: &mut MaybeUninit<ConnOf<A>>,
) -> Option<&mut MaybeUninit<ConnOf<A>>> {
    if A::COPY_IN_MAP {
        A::conn_copy()
    } else {
        Some(stack)
    }
}

/// Writes into the entry of `key` at `ptr` what `next` changed of `read`,
/// the copy the decision was made on (see
/// `ssh_fwd_common::conntrack::store`). A write that closes the connection
/// gives its client's quota back: a closed connection waits out its close
/// timeout in the table, but its client no longer holds it.
#[inline(always)]
fn write_back<A: Family>(
    key: &ConnKey<A>,
    ptr: Option<*mut ConnOf<A>>,
    read: Option<&ConnOf<A>>,
    next: Option<ConnOf<A>>,
) {
    if let (Some(p), Some(read), Some(next)) = (ptr, read, next) {
        // SAFETY: a pointer into the map's value, valid for this run.
        if unsafe { store::<Bpf, _>(p, read, &next) } {
            sources_add(key.client_addr, u64::MAX);
        }
    }
}

/// Removes the entry of `key` (`read`, as copied) on a reset; its client
/// holds one connection less unless it had closed already.
#[inline(always)]
fn remove_reset<A: Family>(key: &ConnKey<A>, read: Option<&ConnOf<A>>) {
    if A::conns().remove(key).is_ok() {
        count(Outcome::ConnReset);
        if let Some(c) = read {
            audit::closed::<A>(key, c, Ended::Reset);
        }
        if !read.is_some_and(closing) {
            sources_add(key.client_addr, u64::MAX);
        }
    }
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Whether `backend` lives on this node: the agent has seen its address
/// on one of the node's pod interfaces.
#[inline(always)]
fn is_local<A: Family>(backend: Endpoint<A>) -> bool {
    // SAFETY: only tested for presence.
    unsafe { A::owners().get(backend.addr) }.is_some()
}

/// The request `h` (from `h.source`) through `frontend` to `backend`
/// (mapping `slot`). `Err`: drop it, and count why: its 4-tuple is live
/// through another frontend ([`Outcome::ConflictDropped`]), it failed the
/// checks of a segment that writes state ([`crate::verify`]), or it would
/// claim a connection for a client past its quota
/// ([`Outcome::SourceLimited`]: held back, so that the pod stays in
/// SYN-RECV and nothing is sent unrestored).
#[inline(always)]
pub fn request<P: Checked, A: Family>(
    p: &P,
    h: &Headers<A>,
    frontend: Endpoint<A>,
    backend: Endpoint<A>,
    slot: u32,
) -> Result<(), Outcome> {
    let key = ConnKey::new(h.source, backend);
    let conn_ptr = A::conns().get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(
        conn_ptr,
        conn_place::<A>(&mut conn_slot).ok_or(Outcome::RewriteError)?,
    );
    let decision = conntrack::on_request(&h.seg, frontend, conn, || is_local(backend));
    let opened = Opened {
        frontend,
        slot,
        mss_cap: 0,
    };
    apply_request(p, h, &key, decision, &opened, conn_ptr, conn)?;
    if conn.is_some() {
        audit::traffic::<A>(&key, Direction::ToBackend, frame_len(h));
    }
    Ok(())
}

/// A packet's length as the mapping's counters take it: its frame.
#[inline(always)]
fn frame_len<A: Addr>(h: &Headers<A>) -> u64 {
    (h.total_len + ETH_HLEN) as u64
}

/// What a request's half-open entry or claim records besides the segment.
struct Opened<A: Addr> {
    frontend: Endpoint<A>,
    slot: u32,
    mss_cap: u16,
}

/// A request to a backend of this node that another node translated, or
/// that a peer in the cluster sent to the pod's address. A SYN opens state
/// only with `option`, the frontend its IP option carries from a cluster
/// interface, and only if that frontend maps to this backend; it records
/// the MSS the link it came in on carries (`mss_cap`: see
/// `ssh_fwd_common::conntrack::mss`). Any other segment follows the state
/// its handshake left here, and may claim its connection for the frontend
/// its SYN named. `Err`: drop it (see [`request`]).
#[inline(always)]
pub fn to_backend<P: Checked, A: Family>(
    p: &P,
    h: &Headers<A>,
    option: Option<Endpoint<A>>,
    mss_cap: impl FnOnce() -> u16,
) -> Result<(), Outcome> {
    let (client, backend, seg) = (h.source, h.destination, &h.seg);
    let key = ConnKey::new(client, backend);
    let conn_ptr = A::conns().get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(
        conn_ptr,
        conn_place::<A>(&mut conn_slot).ok_or(Outcome::RewriteError)?,
    );
    let opened = if seg.is_syn() {
        // A SYN without the option: in-cluster, never tracked.
        let Some(frontend) = option else {
            return Ok(());
        };
        // SAFETY: copied out immediately.
        match unsafe { A::frontends().get(frontend) }
            .copied()
            .filter(|t| t.endpoint == backend)
        {
            Some(t) => {
                count(Outcome::OptionLearned);
                Opened {
                    frontend,
                    slot: t.slot,
                    mss_cap: mss_cap(),
                }
            }
            None => {
                count(Outcome::OptionRejected);
                return Ok(());
            }
        }
    } else {
        match frontend_of(&key, seg, conn) {
            Some((frontend, slot)) => Opened {
                frontend,
                slot,
                mss_cap: 0,
            },
            None => return Ok(()),
        }
    };
    let decision = conntrack::on_request(seg, opened.frontend, conn, || true);
    apply_request(p, h, &key, decision, &opened, conn_ptr, conn)?;
    if conn.is_some() {
        audit::traffic::<A>(&key, Direction::ToBackend, frame_len(h));
    }
    Ok(())
}

/// The frontend a segment after the SYN of a connection translated on
/// another node belongs to: its live entry's; else the one its SYN named
/// (the half-open entry a handshake's last ACK finds by its sequence
/// number), as for a client that reuses its port through another frontend
/// once the old connection closed; else the old entry's. Nothing else: a
/// pod of another node dialling this pod's address directly (a job's
/// ranks) sends the same segments, with no option on its SYN, and must
/// stay untracked.
#[inline(always)]
fn frontend_of<A: Family>(
    key: &ConnKey<A>,
    seg: &Segment,
    conn: Option<&ConnOf<A>>,
) -> Option<(Endpoint<A>, u32)> {
    if let Some(c) = conn
        && !conntrack::open_to_new(c)
    {
        return Some((c.frontend, c.slot));
    }
    let isn = seg.seq.wrapping_sub(1);
    // SAFETY: copied out immediately.
    if let Some(h) = unsafe { A::half_open().get(HalfOpenKey::new(*key, isn)) } {
        return Some((h.frontend, h.slot));
    }
    conn.map(|c| (c.frontend, c.slot))
}

/// What [`apply_request`] does, flattened out of an [`OnRequest`] with
/// every field defined: the verifier refuses a program that spills a
/// register holding an enum payload that is undefined on some path, and a
/// live `OnRequest` across the helper calls of [`verify::client_segment`]
/// produced exactly that.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    OpenHalf,
    Claim,
    Established,
    Reset,
    IgnoredReset,
    Conflict,
    Forward,
}

struct Plan<A: Addr> {
    step: Step,
    /// `OpenHalf`: reopening; `Established`: claim too.
    flag: bool,
    /// The entry to store, when `has_update`.
    update: ConnOf<A>,
    has_update: bool,
}

#[inline(always)]
fn plan<A: Addr>(decision: OnRequest<Endpoint<A>>) -> Plan<A> {
    let (step, flag, update) = match decision {
        OnRequest::OpenHalf { reopening } => (Step::OpenHalf, reopening, None),
        OnRequest::Claim => (Step::Claim, false, None),
        OnRequest::Established { update, claim } => (Step::Established, claim, update),
        OnRequest::Reset => (Step::Reset, false, None),
        OnRequest::IgnoredReset(update) => (Step::IgnoredReset, false, update),
        OnRequest::Conflict => (Step::Conflict, false, None),
        OnRequest::Forward => (Step::Forward, false, None),
    };
    Plan {
        step,
        flag,
        has_update: update.is_some(),
        update: update.unwrap_or(Conn::ZERO),
    }
}

#[inline(always)]
fn apply_request<P: Checked, A: Family>(
    p: &P,
    h: &Headers<A>,
    key: &ConnKey<A>,
    decision: OnRequest<Endpoint<A>>,
    opened: &Opened<A>,
    conn_ptr: Option<*mut ConnOf<A>>,
    conn: Option<&ConnOf<A>>,
) -> Result<(), Outcome> {
    let writes = decision.writes_state();
    let plan = plan(decision);
    if writes {
        match A::verify(p, h) {
            Verdict::Trusted => {}
            Verdict::Refused(outcome) => return Err(outcome),
            // A SYN forwarded without its half-open entry would have its
            // answer leave the node unrestored, naming the pod.
            Verdict::Unverified if plan.step == Step::OpenHalf => {
                return Err(Outcome::SynUnverified);
            }
            Verdict::Unverified => return Ok(()),
        }
    }
    let seg = &h.seg;
    let update = plan.has_update.then_some(plan.update);
    match plan.step {
        Step::OpenHalf => {
            open_half(key, seg, opened);
            if plan.flag
                && let Some(p) = conn_ptr
            {
                // SAFETY: a pointer into the map's value, which stays valid
                // for this program run.
                unsafe {
                    <Bpf as conntrack::store::AtomicFlags<Endpoint<A>>>::or(p, CONN_REOPENING)
                };
            }
        }
        Step::Claim => claim(key, seg, opened, true)?,
        Step::Established => {
            write_back(key, conn_ptr, conn, update);
            if plan.flag {
                claim(key, seg, opened, false)?;
            }
        }
        Step::Reset => remove_reset(key, conn),
        Step::IgnoredReset => {
            count(Outcome::ResetIgnored);
            write_back(key, conn_ptr, conn, update);
        }
        // The caller counts the drop.
        Step::Conflict => return Err(Outcome::ConflictDropped),
        Step::Forward => {}
    }
    Ok(())
}

/// Records a SYN's half-open entry, unless its handshake has one through
/// the same frontend: a retransmitted SYN (same ISN) keeps it. Looked up
/// first: a full LRU evicts an entry even for an insert that then fails on
/// the existing one. One through another frontend is a later handshake of
/// the 4-tuple with the same ISN (only the client knows it), and replaces
/// it.
#[inline(always)]
fn open_half<A: Family>(key: &ConnKey<A>, seg: &Segment, opened: &Opened<A>) {
    let half_key = HalfOpenKey::new(*key, seg.seq);
    // SAFETY: read at once.
    if unsafe { A::half_open().get(half_key) }.is_some_and(|h| h.frontend == opened.frontend) {
        return;
    }
    let half = HalfOpen {
        frontend: opened.frontend,
        slot: opened.slot,
        flags: mss::with_cap(0, opened.mss_cap),
        client_isn: seg.seq,
        server_isn: 0,
        last_seen_ns: now(),
    };
    if A::half_open()
        .insert(half_key, half, BPF_ANY as u64)
        .is_ok()
    {
        count(Outcome::HalfOpened);
    }
}

/// Records the client's claim that this 4-tuple came through `opened`'s
/// frontend, unless a fresh one says so already. With `quota`, refused for
/// a client that holds `--conns-per-source` connections.
#[inline(always)]
fn claim<A: Family>(
    key: &ConnKey<A>,
    seg: &Segment,
    opened: &Opened<A>,
    quota: bool,
) -> Result<(), Outcome> {
    if quota {
        // SAFETY: copied out immediately.
        let held = unsafe { A::sources().get(A::source_of(key.client_addr)) }
            .copied()
            .unwrap_or(0);
        if !within_quota(held, conns_per_source()) {
            count_conns(opened.slot, ConnCounter::SourceLimited);
            return Err(Outcome::SourceLimited);
        }
    }
    let claim_key = ClaimKey::new(*key, seg.ack);
    let now = now();
    // SAFETY: read at once.
    let existing = unsafe { A::claims().get(claim_key) };
    if !claim_needs_write(existing, opened.frontend, now) {
        return Ok(());
    }
    let claim = Claim {
        frontend: opened.frontend,
        slot: opened.slot,
        _pad: 0,
        seen_ns: now,
    };
    if A::claims().insert(claim_key, claim, BPF_ANY as u64).is_ok() {
        count(Outcome::ConnClaimed);
    }
    Ok(())
}

/// Adds `n` (wrapping: `u64::MAX` is minus one) to the connections
/// `client_addr` holds.
#[inline(always)]
fn sources_add<A: Family>(client_addr: A, n: u64) {
    sources_add_to::<A>(A::source_of(client_addr), n);
}

/// [`sources_add`] by the key the client is counted under.
#[inline(always)]
pub fn sources_add_to<A: Family>(source: A::Source, n: u64) {
    sources_add_at::<A>(source, A::sources().get_ptr_mut(source), n);
}

/// [`sources_add`] with the count of `source` already looked up
/// (`found`).
#[inline(always)]
fn sources_add_at<A: Family>(source: A::Source, found: Option<*mut u64>, n: u64) {
    if let Some(p) = found {
        // SAFETY: a pointer into the map's value, valid for this run.
        unsafe { add_u64(p, n) };
        return;
    }
    if n as i64 <= 0 {
        // Nothing to take away from: a client with no entry holds nothing.
        return;
    }
    if let Err(e) = A::sources().insert(source, n, BPF_NOEXIST as u64)
        && e == -EEXIST
        && let Some(p) = A::sources().get_ptr_mut(source)
    {
        // Another CPU counted the first one a moment ago.
        // SAFETY: as above.
        unsafe { add_u64(p, n) };
    }
}

/// A reply from `backend` to `client` that came from the pod itself (see
/// `ssh_fwd_common::conntrack::trust::ownership`): the frontend to restore,
/// or `None` when it belongs to no connection ssh-fwd forwarded. `Err`:
/// drop it (a confirmation the full table cannot hold:
/// [`Outcome::ConnTableFull`], and the server retransmits).
#[inline(always)]
pub fn reply<A: Family>(
    backend: Endpoint<A>,
    client: Endpoint<A>,
    seg: &Segment,
    frame_len: u64,
) -> Result<Option<Restore<A>>, Outcome> {
    let key = ConnKey::new(client, backend);
    let conn_ptr = A::conns().get_ptr_mut(key);
    let mut conn_slot = MaybeUninit::uninit();
    let conn = copy_out(
        conn_ptr,
        conn_place::<A>(&mut conn_slot).ok_or(Outcome::RewriteError)?,
    );
    let (read_half, read_claim) = reply_reads(seg, conn);
    // The claim and the half-open entry are read in place, not copied:
    // nothing writes into them, they are only inserted whole and removed,
    // so what a reference reads stays as it was for this run.
    // Their keys are built again where they are needed: one kept from here
    // to there would hold stack room the IPv6 path has not got.
    let claim = if read_claim {
        // SAFETY: a reference into the map's value, valid for this run.
        unsafe { A::claims().get(ClaimKey::new(key, seg.seq)) }
    } else {
        None
    };
    let half = if read_half || (claim.is_none() && answers_handshake(seg, conn)) {
        // SAFETY: as above.
        unsafe { A::half_open().get(HalfOpenKey::new(key, reply_isn(seg))) }
    } else {
        None
    };
    let found = Found { conn, half, claim };
    Ok(
        match conntrack::on_reply(seg, &found, now(), confirm_timeout_ns()) {
            OnReply::Untracked => None,
            OnReply::Established {
                frontend,
                slot,
                update,
            } => {
                write_back(&key, conn_ptr, conn, update);
                audit::traffic::<A>(&key, Direction::ToClient, frame_len);
                Some(Restore::to(frontend, slot))
            }
            OnReply::Reset { frontend, slot } => {
                remove_reset(&key, conn);
                Some(Restore::to(frontend, slot))
            }
            OnReply::IgnoredReset { frontend, slot } => {
                count(Outcome::ResetIgnored);
                Some(Restore::to(frontend, slot))
            }
            OnReply::Accept {
                frontend,
                slot,
                mss_cap,
            } => Some(Restore {
                frontend,
                slot,
                mss_cap,
            }),
            OnReply::Answer { frontend, slot } => {
                count(Outcome::HandshakeAnswered);
                Some(Restore::to(frontend, slot))
            }
            OnReply::Refuse { frontend, slot } => {
                if A::half_open()
                    .remove(HalfOpenKey::new(key, reply_isn(seg)))
                    .is_ok()
                {
                    count(Outcome::HalfOpenRefused);
                }
                Some(Restore::to(frontend, slot))
            }
            OnReply::ClaimReset { frontend, slot } => {
                let _ = A::claims().remove(ClaimKey::new(key, seg.seq));
                count(Outcome::ClaimReset);
                Some(Restore::to(frontend, slot))
            }
            OnReply::Confirm {
                conn: confirmed,
                replacing,
            } => {
                let replaced = if replacing { conn } else { None };
                confirm(&key, seg.seq, &confirmed, replaced, frame_len)?;
                Some(Restore::to(confirmed.frontend, confirmed.slot))
            }
        },
    )
}

/// Stores a connection the server confirmed, and forgets its claim, in
/// place of `replaced` (a closing or reopened entry of the 4-tuple), if
/// any. `Err`: the table is full, or the client reached its quota since it
/// claimed (claims race their confirmations); the claim stays for the
/// server's retransmission.
#[inline(always)]
fn confirm<A: Family>(
    key: &ConnKey<A>,
    claimed_seq: u32,
    conn: &ConnOf<A>,
    replaced: Option<&ConnOf<A>>,
    frame_len: u64,
) -> Result<(), Outcome> {
    // A closed connection no longer counted for its client; a reopened one
    // still does.
    let held_more = replaced.is_none_or(closing);
    // Looked up once, for the quota and then the count. The agent's sweep
    // may take an element that holds nothing in between (and gives back
    // what it finds counted); an add to the element it took is lost, and
    // the client may hold one connection past its quota until its count
    // is back to nothing.
    let source = A::source_of(key.client_addr);
    let mut held_ptr = None;
    if held_more {
        held_ptr = A::sources().get_ptr_mut(source);
        // SAFETY: a pointer into the map's value, valid for this run; read
        // at once.
        let held = held_ptr.map_or(0, |p| unsafe { *p });
        if !within_quota(held, conns_per_source()) {
            count_conns(conn.slot, ConnCounter::SourceLimited);
            return Err(Outcome::SourceLimited);
        }
    }
    let flags = if replaced.is_some() {
        BPF_ANY
    } else {
        BPF_NOEXIST
    };
    match A::conns().insert(key, conn, flags as u64) {
        Ok(()) => {
            if legacy_until(key.backend()).is_some() {
                count(Outcome::ConnAdopted);
            } else {
                count(Outcome::ConnEstablished);
            }
            count_conns(conn.slot, ConnCounter::Opened);
            if replaced.is_some() {
                count(Outcome::ConnReplaced);
            }
            if held_more {
                sources_add_at::<A>(source, held_ptr, 1);
            }
            if let Some(old) = replaced {
                audit::closed::<A>(key, old, Ended::Reused);
            }
            audit::accepted::<A>(key, conn);
            audit::traffic::<A>(key, Direction::ToClient, frame_len);
        }
        // Another CPU confirmed it a moment ago.
        Err(e) if e == -EEXIST => {}
        Err(_) => return Err(Outcome::ConnTableFull),
    }
    let _ = A::claims().remove(ClaimKey::new(*key, claimed_seq));
    Ok(())
}

/// Until when `backend`'s untracked replies may belong to a connection an
/// older data path forwarded, if that time has not passed.
#[inline(always)]
fn legacy_until<A: Family>(backend: Endpoint<A>) -> Option<u64> {
    let until = A::legacy_until(backend)?;
    (until > now()).then_some(until)
}

/// A reply [`reply`] found untracked, leaving the node through an external
/// interface: the frontend to restore anyway, if any. A connection an older
/// data path forwarded (restored as it did, to the frontend it recorded or
/// the backend's primary, until the client's segment claims it and the
/// server confirms; only for a reply the pod itself sent, `trusted`), or
/// with `--cross-node plain` the backend's primary frontend (counted as a
/// fallback).
#[inline(always)]
pub fn restore_untracked<A: Family>(
    backend: Endpoint<A>,
    client: Endpoint<A>,
    primary: &NatTarget<A>,
    seg: &Segment,
    trusted: bool,
) -> Option<Restore<A>> {
    if trusted && seg.flags & conntrack::TCP_SYN == 0 && legacy_until(backend).is_some() {
        let key = ConnKey::new(client, backend);
        let target = A::legacy_target(&key).unwrap_or(*primary);
        count(Outcome::LegacyReply);
        return Some(Restore::to(target.endpoint, target.slot));
    }
    if !cross_node_plain() {
        return None;
    }
    count(Outcome::ReverseFallback);
    Some(Restore::to(primary.endpoint, primary.slot))
}

/// The established entry of `client`'s connection to `backend`: a
/// reference into the map, read at once (a copy of an absent entry would
/// hand the verifier registers the compiler never wrote).
#[inline(always)]
pub fn established<A: Family>(
    client: Endpoint<A>,
    backend: Endpoint<A>,
) -> Option<&'static ConnOf<A>> {
    // SAFETY: the map's value stays valid for this program run; the callers
    // only read it, right away.
    unsafe { A::conns().get(ConnKey::new(client, backend)) }
}

/// The half-open entry of `client`'s handshake with `backend` that began
/// with the initial sequence number `client_isn` (as [`established`]).
#[inline(always)]
pub fn half_open<A: Family>(
    client: Endpoint<A>,
    backend: Endpoint<A>,
    client_isn: u32,
) -> Option<&'static HalfOpen<Endpoint<A>>> {
    let key = HalfOpenKey::new(ConnKey::new(client, backend), client_isn);
    // SAFETY: as above.
    unsafe { A::half_open().get(key) }
}

/// The frontend a SYN `client -> backend` leaving the node carries to the
/// backend's node: see `ssh_fwd_common::conntrack::translated_syn`.
#[inline(always)]
pub fn translated_syn<A: Family>(
    client: Endpoint<A>,
    backend: Endpoint<A>,
    seg: &Segment,
) -> Option<Endpoint<A>> {
    conntrack::translated_syn(seg, half_open(client, backend, seg.seq))
}

/// Whether `backend` lives on this node (see [`is_local`]): where its
/// connections are tracked.
#[inline(always)]
pub fn backend_is_local<A: Family>(backend: Endpoint<A>) -> bool {
    is_local(backend)
}
