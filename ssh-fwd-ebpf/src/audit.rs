//! The connection log: a record in `CONN_EVENTS` for each connection the
//! server confirms, and with `--conn-log all` for each refused SYN and each
//! connection the programs remove, with its traffic from `CONN_STATS`.
//! A full ring loses the record, counted, and never the packet. Records of
//! refused SYNs, which anyone can forge, fill at most half of the ring:
//! the rest is kept for real connections (`ssh_fwd_common::audit`). Every
//! record not written is counted by kind in `CONN_EVENTS_DROPPED`.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::bpf_ktime_get_coarse_ns,
};
use ssh_fwd_common::{
    audit::{refused_has_room, take},
    maps::{
        CONN_EVENTS_BYTES, Conn, ConnEvent, ConnKey, ConnStats, Ended, Endpoint, EventKind,
        NatTarget,
    },
    outcome::Outcome,
};

use crate::{
    atomic::add_u64,
    config::{log_accepted, log_all, refused_records},
    counters::{Direction, count},
    family::Family,
    maps::{AUDIT_BUDGET, CONN_EVENTS, CONN_EVENTS_DROPPED},
    packet::Headers,
};

/// How full the ring may get before a record wakes the agent. Below it,
/// records wait for the agent's next look (it reads every 100 ms): a
/// wake-up per record would cost a context switch per connection at
/// setup rates.
const WAKE_AT: u64 = CONN_EVENTS_BYTES as u64 / 4;

/// What the ring holds that the agent has not read, in bytes.
#[inline(always)]
fn pending() -> u64 {
    CONN_EVENTS.query(BPF_RB_AVAIL_DATA as u64)
}

#[inline(always)]
fn emit<E: Copy + 'static>(event: ConnEvent<E>) {
    match CONN_EVENTS.reserve::<ConnEvent<E>>(0) {
        Some(mut entry) => {
            entry.write(event);
            let wake = if pending() >= WAKE_AT {
                BPF_RB_FORCE_WAKEUP
            } else {
                BPF_RB_NO_WAKEUP
            };
            entry.submit(wake as u64);
        }
        None => {
            count(Outcome::EventsLost);
            dropped(event.kind);
        }
    }
}

/// Counts a record of `kind` (an `EventKind`) that was not written.
#[inline(always)]
fn dropped(kind: u8) {
    if let Some(n) = CONN_EVENTS_DROPPED.get_ptr_mut(u32::from(kind)) {
        // SAFETY: this CPU's slot, only this program run writes it meanwhile.
        unsafe { *n += 1 };
    }
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// A SYN to `h.destination` (mapped by `target`) refused for `kind`,
/// within this CPU's budget of such records and their share of the ring.
#[inline(always)]
pub fn refused<A: Family>(h: &Headers<A>, target: &NatTarget<A>, kind: EventKind) {
    if !log_all() {
        return;
    }
    let Some(budget) = AUDIT_BUDGET.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot, only this program run writes it meanwhile.
    // The budget first: under a flood it spares most SYNs the look at the
    // ring's positions, which every CPU writes.
    if !take(unsafe { &mut *budget }, now(), refused_records()) || !refused_has_room(pending()) {
        count(Outcome::EventsThrottled);
        dropped(kind as u8);
        return;
    }
    emit(ConnEvent {
        time_ns: now(),
        client: h.source,
        frontend: h.destination,
        backend: target.endpoint,
        slot: target.slot,
        kind: kind as u8,
        ended: 0,
        _pad: 0,
        created_ns: 0,
        stats: ConnStats::default(),
    });
}

/// The server confirmed `conn`: logged, and its traffic counted from now.
#[inline(always)]
pub fn accepted<A: Family>(key: &ConnKey<A>, conn: &Conn<Endpoint<A>>) {
    if log_all() {
        // A 4-tuple reused after its close starts from zero: the closed
        // connection's record took its counts.
        let _ = A::conn_stats().insert(key, ConnStats::default(), BPF_NOEXIST as u64);
    }
    if !log_accepted() {
        return;
    }
    emit(ConnEvent {
        time_ns: now(),
        client: key.client(),
        frontend: conn.frontend,
        backend: key.backend(),
        slot: conn.slot,
        kind: EventKind::Accepted as u8,
        ended: 0,
        _pad: 0,
        created_ns: conn.created_ns,
        stats: ConnStats::default(),
    });
}

/// `conn` left the table for `ended`: logged with its traffic, which is
/// forgotten.
#[inline(always)]
pub fn closed<A: Family>(key: &ConnKey<A>, conn: &Conn<Endpoint<A>>, ended: Ended) {
    if !log_all() {
        return;
    }
    // SAFETY: copied out at once.
    let stats = unsafe { A::conn_stats().get(key) }
        .copied()
        .unwrap_or_default();
    let _ = A::conn_stats().remove(key);
    emit(ConnEvent {
        time_ns: now(),
        client: key.client(),
        frontend: conn.frontend,
        backend: key.backend(),
        slot: conn.slot,
        kind: EventKind::Closed as u8,
        ended: ended as u8,
        _pad: 0,
        created_ns: conn.created_ns,
        stats,
    });
}

/// Counts a packet of `bytes` of the connection `key` going `direction`,
/// with `--conn-log all`.
#[inline(always)]
pub fn traffic<A: Family>(key: &ConnKey<A>, direction: Direction, bytes: u64) {
    if !log_all() {
        return;
    }
    let Some(stats) = A::conn_stats().get_ptr_mut(key) else {
        return;
    };
    let (packets, total) = match direction {
        // SAFETY: pointers into the map's value, valid for this run.
        Direction::ToBackend => unsafe {
            (&raw mut (*stats).packets_in, &raw mut (*stats).bytes_in)
        },
        // SAFETY: as above.
        Direction::ToClient => unsafe {
            (&raw mut (*stats).packets_out, &raw mut (*stats).bytes_out)
        },
    };
    // SAFETY: aligned words of the entry; both directions of a connection
    // may run on two CPUs at once.
    unsafe {
        add_u64(packets, 1);
        add_u64(total, bytes);
    }
}
