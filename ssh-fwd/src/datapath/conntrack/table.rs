//! What the agent removes from the connection tables, as logic over a
//! small [`Table`] trait: the kernel programs write the same tables at any
//! moment (a confirmation replacing a closing entry), so every removal is
//! decided on the entry it actually removes, never on one read a moment
//! before. The trait lets the tests slip a kernel write in between.

use std::collections::{BTreeMap, BTreeSet};

use ssh_fwd_common::{
    conntrack::{Expiry, closing, expiry},
    maps::{Claim, ClaimKey, Conn, ConnKey, Endpoint, HalfOpen, HalfOpenKey},
};

use super::activity::{Tallies, tally};
use crate::datapath::family::MapFamily;

/// One connection table, as the removals use it.
pub trait Table<K, V> {
    /// Every entry, as the walk finds them.
    fn entries(&self) -> Vec<(K, V)>;
    /// The entry of `key` now.
    fn get(&self, key: &K) -> Option<V>;
    /// Removes the entry of `key` and returns what it held, in one step
    /// (`BPF_MAP_LOOKUP_AND_DELETE_ELEM`).
    fn take(&mut self, key: &K) -> Option<V>;
    /// Stores `value` for `key` unless the kernel stored an entry there
    /// meanwhile (`BPF_NOEXIST`): the newer one wins. Whether it was
    /// stored.
    fn put_back(&mut self, key: &K, value: &V) -> bool;
}

/// What [`sweep`] removed and found in one family's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts<A: MapFamily = u32> {
    pub closed: u64,
    pub expired: u64,
    /// Entries left.
    pub conns: u64,
    /// The entries left that their clients hold (closed ones wait out
    /// their close timeout held by nobody), by client (raw, as `SOURCES`
    /// or `SOURCES6` keys it), as the walk found them.
    pub per_source: BTreeMap<A::Source, u64>,
    /// What the removals took from each client: entries it held (not
    /// closing) that are gone, for [`settle`] to count off.
    pub released: BTreeMap<A::Source, u64>,
    /// What was removed, as removed, and why.
    pub ended: Vec<(ConnKey<A>, Conn<Endpoint<A>>, Expiry)>,
    /// Each frontend's connections: open ones left, and the last packet
    /// of every entry walked, removed ones too.
    pub activity: Tallies,
}

impl<A: MapFamily> Default for Counts<A> {
    fn default() -> Self {
        Self {
            closed: 0,
            expired: 0,
            conns: 0,
            per_source: BTreeMap::new(),
            released: BTreeMap::new(),
            ended: Vec::new(),
            activity: Tallies::new(),
        }
    }
}

/// How long entries may stay, in nanoseconds of the kernel's clock.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub idle: u64,
    pub close: u64,
}

/// Removes the connections that closed or went idle by `now`, and counts
/// the rest by client.
pub fn sweep<A: MapFamily>(
    conns: &mut impl Table<ConnKey<A>, Conn<Endpoint<A>>>,
    now: u64,
    limits: &Limits,
) -> Counts<A> {
    let mut counts = Counts::default();
    for (key, seen) in conns.entries() {
        let Some(why) = expiry(&seen, now, limits.idle, limits.close) else {
            tally(&mut counts.activity, &seen, !closing(&seen));
            if !closing(&seen) {
                *counts.per_source.entry(A::source(&key)).or_default() += 1;
            }
            counts.conns += 1;
            continue;
        };
        let still = |c: &Conn<Endpoint<A>>| {
            c.created_ns == seen.created_ns
                && expiry(c, now, limits.idle, limits.close) == Some(why)
        };
        let removed = match remove_if(conns, &key, still) {
            Removal::Removed(removed) => Some(removed),
            Removal::Kept => None,
            Removal::Displaced(taken) => {
                release(&mut counts.released, &key, &taken);
                None
            }
        };
        tally(
            &mut counts.activity,
            &seen,
            removed.is_none() && !closing(&seen),
        );
        let Some(removed) = removed else {
            *counts.per_source.entry(A::source(&key)).or_default() += 1;
            counts.conns += 1;
            continue;
        };
        release(&mut counts.released, &key, &removed);
        counts.ended.push((key, removed, why));
        match why {
            Expiry::Closed => counts.closed += 1,
            Expiry::Idle => counts.expired += 1,
        }
    }
    counts
}

/// What [`purge`] removed: the connections, as removed, and what that
/// took from each client, for [`settle`].
pub struct Purged<A: MapFamily> {
    pub conns: Vec<(ConnKey<A>, Conn<Endpoint<A>>)>,
    pub released: BTreeMap<A::Source, u64>,
}

/// Removes every entry opened through one of `frontends` (connections,
/// SYNs not yet answered, claims not yet confirmed).
pub fn purge<A: MapFamily>(
    conns: &mut impl Table<ConnKey<A>, Conn<Endpoint<A>>>,
    halves: &mut impl Table<HalfOpenKey<A>, HalfOpen<Endpoint<A>>>,
    claims: &mut impl Table<ClaimKey<A>, Claim<Endpoint<A>>>,
    frontends: &BTreeSet<Endpoint<A>>,
) -> Purged<A> {
    let mut purged = Purged {
        conns: Vec::new(),
        released: BTreeMap::new(),
    };
    if frontends.is_empty() {
        return purged;
    }
    let retired = |frontend: &Endpoint<A>| frontends.contains(frontend);
    for (key, _) in halves
        .entries()
        .iter()
        .filter(|(_, h)| retired(&h.frontend))
    {
        let _ = remove_if(halves, key, |h: &HalfOpen<Endpoint<A>>| {
            retired(&h.frontend)
        });
    }
    for (key, _) in claims
        .entries()
        .iter()
        .filter(|(_, c)| retired(&c.frontend))
    {
        let _ = remove_if(claims, key, |c: &Claim<Endpoint<A>>| retired(&c.frontend));
    }
    for (key, _) in conns.entries().iter().filter(|(_, c)| retired(&c.frontend)) {
        match remove_if(conns, key, |c: &Conn<Endpoint<A>>| retired(&c.frontend)) {
            Removal::Removed(conn) => {
                release(&mut purged.released, key, &conn);
                purged.conns.push((*key, conn));
            }
            Removal::Displaced(taken) => release(&mut purged.released, key, &taken),
            Removal::Kept => {}
        }
    }
    purged
}

/// Counts `conn`, removed, off what its client holds, unless it was
/// closing: the kernel counted a close off already.
fn release<A: MapFamily>(
    released: &mut BTreeMap<A::Source, u64>,
    key: &ConnKey<A>,
    conn: &Conn<Endpoint<A>>,
) {
    if !closing(conn) {
        *released.entry(A::source(key)).or_default() += 1;
    }
}

/// A quota table (`SOURCES`, `SOURCES6`): what each client holds. The
/// kernel programs count up and down in it at any moment, so the agent
/// never writes a count: it adds, in the kernel, as they do.
pub trait Quota<S>: Table<S, u64> {
    /// Adds `n` (wrapping) to what `source` holds, atomically; to a client
    /// with no entry, a positive `n` is stored and a negative one does
    /// nothing.
    fn add(&mut self, source: &S, n: u64);
}

/// Counts off what removals `released`, and removes the clients that hold
/// nothing (the table is as large as the connection table, and a full
/// one would count no new client). A count below zero (an add the kernel
/// lost, see `sources_add_at` in the eBPF crate) holds nothing, as the
/// programs read it, and goes too.
pub fn settle<S: Copy>(quota: &mut impl Quota<S>, released: &BTreeMap<S, u64>) {
    for (source, n) in released {
        quota.add(source, n.wrapping_neg());
    }
    let holds = |n: u64| n as i64 > 0;
    for (source, held) in quota.entries() {
        if holds(held) {
            continue;
        }
        // Taken in one step: what the kernel counted since the walk read
        // it goes back.
        if let Some(counted) = quota.take(&source)
            && holds(counted)
        {
            quota.add(&source, counted);
        }
    }
}

/// What each client holds in `conns`: its entries that are not closing.
pub fn held<A: MapFamily>(conns: &[(ConnKey<A>, Conn<Endpoint<A>>)]) -> BTreeMap<A::Source, u64> {
    let mut held = BTreeMap::new();
    for (key, _) in conns.iter().filter(|(_, c)| !closing(c)) {
        *held.entry(A::source(key)).or_default() += 1;
    }
    held
}

/// Raises each client's count to at least what it `held` by a walk of the
/// connections, by atomic adds: for the tables of a data path that did not
/// count them (see `LOADED_QUOTA_BY_KERNEL`), once. Never lowers a count:
/// a connection confirmed meanwhile is counted by the kernel already.
pub fn count_held<S: Copy + Ord>(quota: &mut impl Quota<S>, held: &BTreeMap<S, u64>) -> u64 {
    let stored: BTreeMap<S, u64> = quota.entries().into_iter().collect();
    let mut added = 0;
    for (source, n) in held {
        // A count below zero is raised from where it is.
        let counted = stored.get(source).map_or(0, |c| *c as i64);
        let short = (*n as i64).saturating_sub(counted);
        if short > 0 {
            quota.add(source, short as u64);
            added += short as u64;
        }
    }
    added
}

/// What [`remove_if`] did.
enum Removal<V> {
    /// The entry, as removed.
    Removed(V),
    /// The entry stays (it no longer qualifies, or is gone).
    Kept,
    /// The entry taken no longer qualified, and the kernel stored another
    /// for its key while it was out: the one taken is gone.
    Displaced(V),
}

/// Removes the entry of `key` if it still `qualifies`. The decision is
/// made on the entry removed: if the kernel refreshed or replaced it since
/// it was read (a completed handshake over a closing entry), it goes back,
/// unless the kernel stored yet another meanwhile. Between the two steps
/// the entry is missing for a moment; reading it first keeps that to
/// entries that changed within that moment.
fn remove_if<K, V>(
    table: &mut impl Table<K, V>,
    key: &K,
    qualifies: impl Fn(&V) -> bool,
) -> Removal<V> {
    // Read again: a packet may have refreshed it since the walk.
    if !table.get(key).is_some_and(|v| qualifies(&v)) {
        return Removal::Kept;
    }
    let Some(taken) = table.take(key) else {
        return Removal::Kept;
    };
    if qualifies(&taken) {
        Removal::Removed(taken)
    } else if table.put_back(key, &taken) {
        Removal::Kept
    } else {
        Removal::Displaced(taken)
    }
}

#[cfg(test)]
mod tests;
