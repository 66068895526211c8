//! When the grace of each port reservation started. A reservation never
//! seen in use is kept for `--reservation-grace` from the first sighting
//! by any term of this process: every replica with a webhook watches the
//! reservations, so a standby that takes over knows how long each has
//! waited already. A reservation first seen in a list (a process just
//! started, a relist) may be older than that sighting: its grace also ends
//! [`API_REQUEST_TIMEOUT`] (or the grace, if longer) plus
//! [`CLOCK_SKEW_MARGIN`] after its `creationTimestamp`, by the API
//! server's clock read with ours. The pod of a reservation can only come
//! into existence within the create request that made it, which the API
//! server ends within [`API_REQUEST_TIMEOUT`]; so the creation bound never
//! releases a reservation whose pod may still be created, unless the
//! clocks are more than [`CLOCK_SKEW_MARGIN`] apart.

use std::{
    collections::{HashMap, HashSet},
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;

use super::LeaseView;

/// How long the API server lets a request run (kube-apiserver's
/// `--request-timeout`, 1 minute by default): the pod create during which
/// a reservation was made ends, with every admission step after ours,
/// within this of the reservation's making.
pub const API_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How far this controller's clock may be from the API server's when a
/// reservation's age is read from its `creationTimestamp`.
pub const CLOCK_SKEW_MARGIN: Duration = Duration::from_secs(20);

/// When each reservation's grace started, by Lease uid: when this process
/// first saw it, or earlier for one first seen in a list whose
/// `creationTimestamp` says it is older (see the module's doc). Kept by
/// the reservations' watch, on every replica that runs it, so it outlives
/// terms.
#[derive(Debug)]
pub struct FirstSeen {
    grace: Duration,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    by_uid: HashMap<String, Instant>,
    /// The uids of the list being received (a first list or a relist).
    listing: Option<HashSet<String>>,
}

impl FirstSeen {
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            seen: Mutex::default(),
        }
    }

    /// Notes a watch event now.
    pub fn note(&self, event: &watcher::Event<LeaseView>) {
        self.note_at(event, Instant::now(), Timestamp::now());
    }

    /// Notes a watch event at `now`, `wall` being the time of day then.
    fn note_at(&self, event: &watcher::Event<LeaseView>, now: Instant, wall: Timestamp) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let uid_of = |lease: &LeaseView| lease.uid.clone();
        match event {
            watcher::Event::Init => seen.listing = Some(HashSet::new()),
            watcher::Event::InitApply(lease) => {
                let Some(uid) = uid_of(lease) else { return };
                if let Some(listing) = seen.listing.as_mut() {
                    listing.insert(uid.clone());
                }
                let start = self.listed_start(lease, now, wall);
                seen.by_uid.entry(uid).or_insert(start);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = seen.listing.take() {
                    seen.by_uid.retain(|uid, _| listed.contains(uid));
                }
            }
            watcher::Event::Apply(lease) => {
                if let Some(uid) = uid_of(lease) {
                    seen.by_uid.entry(uid).or_insert(now);
                }
            }
            watcher::Event::Delete(lease) => {
                if let Some(uid) = uid_of(lease) {
                    seen.by_uid.remove(&uid);
                }
            }
        }
    }

    /// The grace's start for a reservation first seen in a list at `now`:
    /// `now`, or earlier by as much as its age exceeds the time its pod
    /// might still be created in (and the grace, if longer), plus the
    /// clocks' margin.
    fn listed_start(&self, lease: &LeaseView, now: Instant, wall: Timestamp) -> Instant {
        let Some(created) = lease.creation_timestamp.as_ref() else {
            return now;
        };
        let Ok(age) = Duration::try_from(wall.duration_since(created.0)) else {
            return now; // made "in the future": the clocks disagree
        };
        let waited = API_REQUEST_TIMEOUT.saturating_sub(self.grace) + CLOCK_SKEW_MARGIN;
        now.checked_sub(age.saturating_sub(waited)).unwrap_or(now)
    }

    /// When the grace of the reservation with this Lease uid started, if
    /// the watch has seen it.
    pub fn since(&self, uid: &str) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.by_uid.get(uid).copied()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::SignedDuration};

    use super::*;

    const GRACE: Duration = Duration::from_secs(60);

    fn lease(uid: &str, created: Timestamp) -> LeaseView {
        let mut lease = LeaseView::default();
        lease.uid = Some(uid.into());
        lease.creation_timestamp = Some(Time(created));
        lease
    }

    fn ago(wall: Timestamp, secs: i64) -> Timestamp {
        wall - SignedDuration::from_secs(secs)
    }

    #[test]
    fn a_reservation_seen_live_starts_its_grace_then_and_keeps_it_through_a_relist() {
        let seen = FirstSeen::new(GRACE);
        let (t0, wall) = (Instant::now(), Timestamp::now());
        // Its creation time does not matter: it is seen as it is made.
        seen.note_at(&watcher::Event::Apply(lease("a", ago(wall, 500))), t0, wall);
        assert_eq!(seen.since("a"), Some(t0));
        // A relist later: the first sighting stands.
        let later = t0 + Duration::from_secs(30);
        seen.note_at(&watcher::Event::Init, later, wall);
        let relisted = watcher::Event::InitApply(lease("a", ago(wall, 500)));
        seen.note_at(&relisted, later, wall);
        seen.note_at(&watcher::Event::InitDone, later, wall);
        assert_eq!(seen.since("a"), Some(t0));
        seen.note_at(&watcher::Event::Delete(lease("a", wall)), later, wall);
        assert_eq!(seen.since("a"), None);
    }

    #[test]
    fn a_reservation_first_seen_in_a_list_counts_from_its_creation_with_the_margins() {
        let seen = FirstSeen::new(GRACE);
        let (now, wall) = (Instant::now() + Duration::from_secs(3600), Timestamp::now());
        seen.note_at(&watcher::Event::Init, now, wall);
        for (uid, age) in [("old", 200), ("young", 10), ("future", -30)] {
            let listed = watcher::Event::InitApply(lease(uid, ago(wall, age)));
            seen.note_at(&listed, now, wall);
        }
        seen.note_at(&watcher::Event::InitDone, now, wall);
        // Made 200 s ago: its grace ends 60 s + the margin after its making.
        let old = seen.since("old").unwrap();
        assert_eq!(
            old + GRACE,
            now - Duration::from_secs(200) + GRACE + CLOCK_SKEW_MARGIN
        );
        // Younger than that: the whole grace from now, as for one seen live.
        assert_eq!(seen.since("young"), Some(now));
        assert_eq!(seen.since("future"), Some(now), "clocks apart");
    }

    #[test]
    fn with_a_short_grace_the_creation_bound_still_waits_out_the_request_timeout() {
        let grace = Duration::from_secs(5);
        let seen = FirstSeen::new(grace);
        let (now, wall) = (Instant::now() + Duration::from_secs(3600), Timestamp::now());
        seen.note_at(&watcher::Event::Init, now, wall);
        for (uid, age) in [("made-30s-ago", 30), ("made-78s-ago", 78)] {
            let listed = watcher::Event::InitApply(lease(uid, ago(wall, age)));
            seen.note_at(&listed, now, wall);
        }
        seen.note_at(&watcher::Event::InitDone, now, wall);
        // The grace from now comes first, as for one seen live.
        assert_eq!(seen.since("made-30s-ago"), Some(now));
        // Due 60 s + the margin after its making (2 s from now), not the
        // grace and the margin after it (long past).
        let due = seen.since("made-78s-ago").unwrap() + grace;
        assert_eq!(due, now + Duration::from_secs(2));
    }

    #[test]
    fn a_relist_forgets_the_reservations_it_no_longer_shows() {
        let seen = FirstSeen::new(GRACE);
        let (t0, wall) = (Instant::now(), Timestamp::now());
        seen.note_at(&watcher::Event::Apply(lease("gone", wall)), t0, wall);
        seen.note_at(&watcher::Event::Apply(lease("kept", wall)), t0, wall);
        seen.note_at(&watcher::Event::Init, t0, wall);
        seen.note_at(&watcher::Event::InitApply(lease("kept", wall)), t0, wall);
        assert!(seen.since("gone").is_some(), "until the list is whole");
        seen.note_at(&watcher::Event::InitDone, t0, wall);
        assert_eq!(seen.since("gone"), None);
        assert_eq!(seen.since("kept"), Some(t0));
    }
}
