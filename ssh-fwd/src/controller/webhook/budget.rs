//! The provisional budget: how many reservations made at admission may
//! wait for their pod at once. Each costs a port until the leader binds it
//! to its pod or it lapses (`--reservation-grace`), and anyone who can
//! reach the webhook can ask for one with a forged review, naming any
//! namespace. So they are capped per namespace (`--provisional-cap`: one
//! tenant's burst cannot spend the others' share) and in all
//! (`--provisional-cap-total`, held to half of `--port-range`: a forger
//! naming a thousand namespaces still holds at most that, and the rest of
//! the range stays to the pods the leader serves). Past a cap a pod is
//! admitted without a port, and the leader gives it one once it exists.
//!
//! Counted from the reservations' watch, plus those this replica is
//! making or has made that the watch does not show yet (held in
//! [`Budget`], matched by name and token): concurrent admissions on one
//! replica never overshoot. Another replica's new reservations count once
//! this one's watch shows them, so with R replicas the total may be
//! exceeded by what the others made within that delay (milliseconds), at
//! most R times the cap.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use crate::controller::reservation::{Reservation, binding::Stage};

/// The caps, and the reservations this replica has in flight or made.
#[derive(Debug)]
pub struct Budget {
    pub per_namespace: usize,
    pub total: usize,
    /// How long a reservation this replica made counts before the watch
    /// shows it: the grace, after which the leader releases it anyway.
    pending_for: Duration,
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    next: u64,
    by_id: BTreeMap<u64, Making>,
}

#[derive(Debug)]
struct Making {
    namespace: String,
    token: String,
    /// The Lease's name, once made.
    name: Option<String>,
    since: Instant,
}

/// Why a pod is admitted without a port: a cap is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capped {
    Namespace { namespace: String, cap: usize },
    Total { cap: usize },
}

impl fmt::Display for Capped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let after = "the controller gives this pod a port once it exists";
        match self {
            Self::Namespace { namespace, cap } => write!(
                f,
                "no port reserved at admission: {cap} pods of namespace {namespace} admitted with a port do not exist yet (--provisional-cap {cap}); {after}"
            ),
            Self::Total { cap } => write!(
                f,
                "no port reserved at admission: {cap} pods admitted with a port do not exist yet (--provisional-cap-total {cap}, at most half of --port-range); {after}"
            ),
        }
    }
}

/// A place in the budget, held while a reservation is made; given back
/// when dropped, unless [`Slot::made`] says the reservation exists.
pub struct Slot<'a> {
    budget: &'a Budget,
    id: u64,
    made: bool,
}

impl Slot<'_> {
    /// The reservation was made as the Lease `name`: it counts until the
    /// watch shows it.
    pub fn made(mut self, name: String) {
        let mut pending = self.budget.lock();
        if let Some(making) = pending.by_id.get_mut(&self.id) {
            making.name = Some(name);
        }
        self.made = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.made {
            self.budget.lock().by_id.remove(&self.id);
        }
    }
}

/// The effective `--provisional-cap-total` for `range`: at most half of
/// it, and at least 1.
pub fn total_for(asked: usize, range: &std::ops::RangeInclusive<u16>) -> usize {
    let size = usize::from(range.end() - range.start()) + 1;
    asked.min(size / 2).max(1)
}

impl Budget {
    pub fn new(per_namespace: usize, total: usize, pending_for: Duration) -> Self {
        Self {
            per_namespace,
            total,
            pending_for,
            pending: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a reservation of `token` in `namespace`, at `now`, if
    /// neither cap is reached by the provisional reservations the watch
    /// shows (`watched`, read under the budget's lock: a snapshot taken
    /// before another admission pruned what a fresher one showed would
    /// miss a reservation) and those this replica makes. Also returns what
    /// `watched` gave, for the ports in use.
    pub fn take(
        &self,
        watched: impl FnOnce() -> Vec<Reservation>,
        namespace: &str,
        token: &str,
        now: Instant,
    ) -> (Vec<Reservation>, Result<Slot<'_>, Capped>) {
        let mut pending = self.lock();
        let watched = watched();
        let verdict = self.admit(&mut pending, &watched, namespace, token, now);
        drop(pending);
        (watched, verdict)
    }

    fn admit(
        &self,
        pending: &mut Pending,
        watched: &[Reservation],
        namespace: &str,
        token: &str,
        now: Instant,
    ) -> Result<Slot<'_>, Capped> {
        // The namespaces of the watched provisional reservations, and the
        // token of each watched reservation made at admission.
        let mut provisional: Vec<&str> = Vec::new();
        let mut shown: BTreeMap<&str, &str> = BTreeMap::new();
        for r in watched {
            if let Some(t) = r.token.as_deref() {
                shown.insert(r.name.as_str(), t);
            }
            if let Stage::Provisional { .. } = r.stage() {
                provisional.push(r.namespace.as_deref().unwrap_or_default());
            }
        }
        // Made and shown by the watch (in whatever stage), or too old to
        // wait for: the watch's count is the one.
        pending.by_id.retain(|_, m| {
            let seen = m
                .name
                .as_deref()
                .is_some_and(|n| shown.get(n) == Some(&m.token.as_str()));
            !seen && now.saturating_duration_since(m.since) < self.pending_for
        });
        let in_namespace = provisional.iter().filter(|ns| **ns == namespace).count()
            + pending
                .by_id
                .values()
                .filter(|m| m.namespace == namespace)
                .count();
        let total = provisional.len() + pending.by_id.len();
        if total >= self.total {
            return Err(Capped::Total { cap: self.total });
        }
        if in_namespace >= self.per_namespace {
            return Err(Capped::Namespace {
                namespace: namespace.to_owned(),
                cap: self.per_namespace,
            });
        }
        let id = pending.next;
        pending.next += 1;
        pending.by_id.insert(
            id,
            Making {
                namespace: namespace.to_owned(),
                token: token.to_owned(),
                name: None,
                since: now,
            },
        );
        Ok(Slot {
            budget: self,
            id,
            made: false,
        })
    }
}

#[cfg(test)]
mod tests;
