//! Who may open a connection through a frontend, and how fast: nobody while
//! its backend drains, the source allowlist (`ALLOWLIST`) and the
//! per-source rate of new connections (`GUARDS`, `SYN_BUCKETS`), checked on
//! a client's segment before it may write any state or be translated. A
//! frontend without a guard flag pays one test of its flags.

use aya_ebpf::{bindings::BPF_ANY, helpers::bpf_ktime_get_ns};
use ssh_fwd_common::{
    guard::admit,
    maps::{
        Bucket, EventKind, FLAG_ALLOWLIST, FLAG_ALLOWLIST_ALL, FLAG_DRAINING, FLAG_SYN_LIMIT,
        FLAGS_GUARDED, NatTarget,
    },
    outcome::Outcome,
};

use crate::{
    audit,
    counters::{ConnCounter, count_conns},
    family::Family,
    maps::GUARDS,
    packet::Headers,
};

/// Whether `h`, a client's segment to a frontend whose entry is `target`,
/// may go on. `Err`: drop it, counted against the mapping, nothing written.
/// Only a SYN (without ACK) is checked, unless the frontend enforces its
/// allowlist on every segment; only a SYN is ever rate-limited.
#[inline(always)]
pub fn check<A: Family>(h: &Headers<A>, target: &NatTarget<A>) -> Result<(), Outcome> {
    let flags = target.flags;
    if flags & FLAGS_GUARDED == 0 {
        return Ok(());
    }
    let syn = h.seg.is_syn();
    if syn && flags & FLAG_DRAINING != 0 {
        return Err(Outcome::Draining);
    }
    if flags & FLAG_ALLOWLIST != 0
        && (syn || flags & FLAG_ALLOWLIST_ALL != 0)
        && !A::allowed(target.slot, h.source.addr)
    {
        count_conns(target.slot, ConnCounter::Denied);
        audit::refused(h, target, EventKind::Denied);
        return Err(Outcome::Denied);
    }
    if syn && flags & FLAG_SYN_LIMIT != 0 && !within_rate::<A>(h.source.addr, target.slot) {
        count_conns(target.slot, ConnCounter::SynLimited);
        audit::refused(h, target, EventKind::SynLimited);
        return Err(Outcome::SynLimited);
    }
    Ok(())
}

/// Takes a token from the bucket of `client` (its /64 for IPv6) under the
/// rate of `slot`.
/// Two CPUs taking from one bucket at once may both be admitted on the same
/// token: the limit is overshot by at most one SYN per CPU racing, which is
/// cheaper than an atomic the baseline CPU lacks at this width.
#[inline(always)]
fn within_rate<A: Family>(client: A, slot: u32) -> bool {
    let Some(guard) = GUARDS.get(slot) else {
        return true;
    };
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let source = A::source_of(client);
    let bucket = A::syn_buckets().get_ptr_mut(source);
    // SAFETY: a pointer into the map's value, valid for this run.
    let due = bucket.map(|b| unsafe { (*b).due_ns });
    let Some(next) = admit(due, now, guard) else {
        return false;
    };
    match bucket {
        // SAFETY: as above; one aligned 8-byte store.
        Some(b) => unsafe { (*b).due_ns = next },
        None => {
            // A full table evicts its least recently used bucket: a
            // bucket's own SYNs keep it in use.
            let _ = A::syn_buckets().insert(source, Bucket { due_ns: next }, BPF_ANY as u64);
        }
    }
    true
}
