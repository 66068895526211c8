//! The leader's side of port reservations: which port a pod without a
//! Service gets, which ports held by Services still need a reservation,
//! which reservations made at admission to bind to their pod, and which
//! reservations are no longer in use.
//!
//! A reservation is in use while a Service holds its port, while the live
//! labelled pod it is for exists ([`binding::pod_of`]: its uid, or for a
//! provisional one its token's first carrier), or while a Service create
//! on its port is pending. A provisional one whose pod exists is bound to
//! that pod's uid. One this leader has never seen in use lapses once the
//! grace is over (time for an admitted pod to come into existence,
//! `--reservation-grace`): counted from when this process first saw it,
//! by any of its terms, or earlier for an old one first seen in a list
//! ([`FirstSeen`]). One that was in use is quarantined as soon as it is
//! not (`--port-reuse-after`; released at once when that is 0), and
//! released at the first pass over everything after its quarantine.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use prometheus_client::metrics::counter::Counter;

use super::{
    Action,
    scope::{PortSet, Scope},
};
use crate::{
    controller::{
        expect::Expectations,
        pod::{PodRef, PodView},
        ports,
        reservation::{
            self, FirstSeen, Holder, Reservation,
            binding::{self, Stage},
        },
        world::{World, book::pod_token},
    },
    k8s::ownership,
    vocabulary,
};

/// The shortest time between two passes woken by lapses: under a flood of
/// forged reviews (up to `--provisional-cap-total` lapsing per grace), a
/// pass over everything for each lapse would keep the leader busy; taken
/// a second at a time, a reservation lapses at most this after its grace.
pub const LAPSE_BATCH: Duration = Duration::from_secs(1);

/// The port a pod was told at admission, from its endpoint annotation.
fn told_port(pod: &PodView) -> Option<u16> {
    let endpoint = pod.metadata.annotation(vocabulary::ENDPOINT)?;
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// What the leader keeps of the reservations from pass to pass: when each
/// one's grace started, and whether it was seen in use since.
#[derive(Debug)]
pub struct Upkeep {
    by_name: BTreeMap<String, Sighting>,
    /// When the watch first saw each; without it (tests), a reservation's
    /// grace starts at the first pass that notes it.
    first_seen: Option<Arc<FirstSeen>>,
    /// How long a reservation never seen in use is kept.
    grace: Duration,
    /// When the last pass over everything noted them: a grace that ends
    /// after it, even during a later pass that did not look at that
    /// reservation, is one to wake up for.
    last_full: Option<Instant>,
    /// Provisional reservations released because no pod came for them.
    lapsed: Counter,
    /// How long a port stays with nobody after its job (`--port-reuse-after`).
    quarantine: Duration,
}

#[derive(Debug)]
struct Sighting {
    /// The Lease's uid: one made anew under the same name starts anew.
    uid: Option<String>,
    since: Instant,
    used: bool,
    /// Its lapse is counted (a release that fails is planned again).
    lapse_counted: bool,
}

impl Upkeep {
    pub fn new(grace: Duration, first_seen: Option<Arc<FirstSeen>>) -> Self {
        Self {
            by_name: BTreeMap::new(),
            first_seen,
            grace,
            last_full: None,
            lapsed: Counter::default(),
            quarantine: Duration::ZERO,
        }
    }

    /// Quarantines each port whose job ended for `after`
    /// (`--port-reuse-after`; 0: none, the reservation is released).
    pub fn quarantine_for(mut self, after: Duration) -> Self {
        self.quarantine = after;
        self
    }

    /// Counts the provisional reservations that lapse in `lapsed` (the
    /// controller's metric).
    pub fn count_lapses_in(&mut self, lapsed: Counter) {
        self.lapsed = lapsed;
    }

    /// Notes the reservations `scope` names (all of them for a full pass)
    /// as seen at `now` (or since the watch first saw them) and whether
    /// each is in use ([`in_use`]); forgets those gone.
    pub fn note(&mut self, world: &World, scope: &Scope, expected: &Expectations, now: Instant) {
        let book = world.book();
        let first_seen = self.first_seen.as_deref();
        let seen = &mut self.by_name;
        let mut note = |name: &str| match book.get(name) {
            None => drop(seen.remove(name)),
            Some(r) => {
                let in_use = in_use(world, expected, r);
                let watched = (r.uid.as_deref()).and_then(|uid| first_seen?.since(uid));
                let since = watched.map_or(now, |at| at.min(now));
                match seen.get_mut(name) {
                    Some(s) if s.uid == r.uid => {
                        s.used |= in_use;
                        s.since = s.since.min(since);
                    }
                    _ => drop(seen.insert(
                        name.to_owned(),
                        Sighting {
                            uid: r.uid.clone(),
                            since,
                            used: in_use,
                            lapse_counted: false,
                        },
                    )),
                }
            }
        };
        match scope.reservations() {
            None => {
                for r in book.all() {
                    note(&r.name);
                }
                self.by_name.retain(|name, _| book.get(name).is_some());
                self.last_full = Some(now);
            }
            Some(names) => names.iter().for_each(|name| note(name)),
        }
    }

    /// The next moment a never-used reservation's grace ends, if one is
    /// still to come after `now`.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        self.by_name
            .values()
            .filter(|s| !s.used)
            .map(|s| s.since + self.grace)
            .filter(|due| *due > now)
            .min()
    }

    /// How long until a reservation's grace ends (a change to act on): at
    /// once for one that ended since the last pass over everything looked
    /// (a long pass may have ended past it), but never sooner than
    /// [`LAPSE_BATCH`] after that pass.
    pub fn until_due(&self, now: Instant) -> Option<Duration> {
        let due = self.next_due(self.last_full.unwrap_or(now))?;
        let due = match self.last_full {
            Some(last) => due.max(last + LAPSE_BATCH),
            None => due,
        };
        Some(due.saturating_duration_since(now))
    }

    fn within_grace(&self, name: &str, now: Instant) -> bool {
        match self.by_name.get(name) {
            Some(Sighting { used: true, .. }) => false,
            Some(s) => now.saturating_duration_since(s.since) < self.grace,
            None => true,
        }
    }

    /// Reservations for ports Services hold without one (someone else's
    /// Service, or ours from before reservations), bindings of provisional
    /// reservations to their pods, quarantines of reservations no longer
    /// in use, and releases of those never used or whose quarantine is
    /// over at `wall`: of the ports and reservations `scope` names.
    pub fn actions(
        &mut self,
        world: &World,
        scope: &Scope,
        expected: &Expectations,
        range: &std::ops::RangeInclusive<u16>,
        (now, wall): (Instant, Timestamp),
    ) -> Vec<Action> {
        let mut actions = reserve_held_ports(world, scope, expected, range);
        let book = world.book();
        let named: Vec<&Reservation> = match scope.reservations() {
            None => book.all().collect(),
            Some(names) => names.iter().filter_map(|name| book.get(name)).collect(),
        };
        let quarantine = ports::Quarantine {
            after: self.quarantine,
            now: wall,
        };
        for r in named {
            if let Stage::Quarantined { since } = r.stage() {
                if !quarantine.holds(since) {
                    actions.push(release(r));
                }
                continue;
            }
            if let Some(pod) = binding::pod_of(world, r) {
                if let Some(lease) = binding::bound(world.ip(), r, pod) {
                    actions.push(Action::Bind {
                        lease: Box::new(lease),
                        pod: PodRef::of(pod),
                    });
                }
                continue;
            }
            if in_use(world, expected, r) || self.within_grace(&r.name, now) {
                continue;
            }
            if !self.quarantine.is_zero() && self.was_used(r) {
                actions.push(Action::Quarantine {
                    lease: Box::new(quarantined(world, r, wall)),
                });
                continue;
            }
            self.count_lapse(r);
            actions.push(release(r));
        }
        actions
    }

    /// Whether a job may have held `r`'s port: it was bound to a pod or a
    /// Service's, or this leader saw its pod.
    fn was_used(&self, r: &Reservation) -> bool {
        match r.stage() {
            Stage::Provisional { .. } => self.by_name.get(&r.name).is_some_and(|s| s.used),
            Stage::Bound { .. } | Stage::Service => true,
            Stage::Quarantined { .. } => false,
        }
    }

    /// Counts `r`'s release as a lapse, once, if it is a provisional
    /// reservation never seen in use.
    fn count_lapse(&mut self, r: &Reservation) {
        let Stage::Provisional { .. } = r.stage() else {
            return;
        };
        if let Some(s) = self.by_name.get_mut(&r.name)
            && !s.used
            && !s.lapse_counted
        {
            s.lapse_counted = true;
            self.lapsed.inc();
        }
    }
}

/// The release of `r`, only if it is still the one read.
fn release(r: &Reservation) -> Action {
    Action::Release {
        name: r.name.clone(),
        port: r.port,
        uid: r.uid.clone(),
        resource_version: r.resource_version.clone(),
    }
}

/// `r` quarantined since `wall`, as the Lease to update it with, only if
/// it is still the one read (its uid and resourceVersion).
fn quarantined(world: &World, r: &Reservation, wall: Timestamp) -> Lease {
    let mut lease = reservation::build(world.ip(), r.port, &Holder::Quarantined { since: wall });
    lease.metadata.uid = r.uid.clone();
    lease.metadata.resource_version = r.resource_version.clone();
    lease
}

/// Reservations for the ports of `scope` that a Service holds without
/// one.
fn reserve_held_ports(
    world: &World,
    scope: &Scope,
    expected: &Expectations,
    range: &std::ops::RangeInclusive<u16>,
) -> Vec<Action> {
    let book = world.book();
    let mut actions = Vec::new();
    for port in scope.ports(world) {
        if !range.contains(&port) || book.has(port) || expected.is_creating_on(port) {
            continue;
        }
        // A granted port is its pod's to reserve (the plan does it for our
        // Service whose pod holds none).
        let Some(holder) = ownership::owner(world.claims_on(port)).filter(|c| !c.granted) else {
            continue;
        };
        actions.push(Action::Reserve {
            lease: Box::new(reservation::build(
                world.ip(),
                port,
                &Holder::Service {
                    key: holder.service.clone(),
                },
            )),
        });
    }
    actions
}

/// How a pod without a Service gets its port.
#[derive(Debug, PartialEq)]
pub enum Choice {
    /// The port reserved for it, free for its Service.
    Reserved(u16),
    /// A port to reserve for it now, with the reservation to create first.
    /// `told`: the port its variable names, when that one is lost.
    /// `reclaim`: the quarantined reservation of the port, deleted first
    /// ([`reservation::reclaim`]).
    Fresh {
        port: u16,
        lease: Box<Lease>,
        told: Option<u16>,
        admitted: bool,
        reclaim: Option<Box<Reservation>>,
    },
    Full,
}

/// The ports a create may take, and what the pass has handed out.
pub struct Free<'a, R> {
    pub range: &'a std::ops::RangeInclusive<u16>,
    /// Ports held by Services, reserved, or being created.
    pub taken: &'a PortSet<'a>,
    /// Ports handed out in this pass.
    pub handed: &'a mut BTreeSet<u16>,
    /// `--port-reuse-after`, and now.
    pub quarantine: &'a ports::Quarantine,
    pub rng: &'a mut R,
}

impl<R> Free<'_, R> {
    fn used(&self, port: u16) -> bool {
        self.taken.contains(port) || self.handed.contains(&port)
    }

    /// The quarantined ports a pod may be given when none is free: not
    /// handed out in this pass, held by no Service, being created by none.
    fn resting(&self) -> impl Iterator<Item = ports::Resting> + '_ {
        let world = self.taken.world;
        (world.book().ports_in(self.range))
            .filter(|port| {
                !self.handed.contains(port)
                    && !world.is_claimed(*port)
                    && !self.taken.expected.is_creating_on(*port)
            })
            .filter_map(move |port| world.book().on_port(port)?.resting())
    }
}

/// The port for `pod` (which has no Service): its own reservation
/// ([`binding::reservation_of`]) if it has one whose port no Service
/// holds; else the port it was told, if it carries a token but no
/// reservation (the reservation lapsed before the pod was created) and
/// the port is still free (reserved again, bound to its uid); else one
/// from [`ports::pick`]: a free one, or the one quarantined longest.
pub fn choose(
    pod: &PodView,
    pod_ref: &PodRef,
    world: &World,
    free: &mut Free<'_, impl rand::Rng>,
) -> Choice {
    let ip = world.ip();
    let own = binding::reservation_of(world, pod);
    // The reservation is the one authority: someone else's Service
    // listing the port holds no grant, and one of ours granted it without
    // the reservation is replaced in the same pass.
    if let Some(own) = own
        && free.handed.insert(own.port)
    {
        return Choice::Reserved(own.port);
    }
    let told = told_port(pod).filter(|_| pod_token(pod).is_some());
    if let (Some(token), Some(port)) = (pod_token(pod), told)
        && own.is_none()
        && free.range.contains(&port)
        && !free.used(port)
    {
        free.handed.insert(port);
        let holder = Holder::Pod {
            namespace: pod_ref.namespace.clone(),
            name: pod_ref.name.clone(),
            uid: pod_ref.uid.clone(),
            token: Some(token.to_owned()),
        };
        return Choice::Fresh {
            port,
            lease: Box::new(reservation::build(ip, port, &holder)),
            told: None,
            admitted: true,
            reclaim: None,
        };
    }
    let picked = {
        let resting: Vec<_> = free.resting().collect();
        let (taken, handed) = (free.taken, &*free.handed);
        let used = |port| taken.contains(port) || handed.contains(&port);
        ports::pick(free.range, &used, resting, free.quarantine, &mut *free.rng)
    };
    let Some(pick) = picked else {
        return Choice::Full;
    };
    let port = pick.port();
    free.handed.insert(port);
    let reclaim = match pick {
        ports::Pick::Resting { .. } => world.book().on_port(port).cloned().map(Box::new),
        ports::Pick::Free(_) => None,
    };
    let holder = Holder::Pod {
        namespace: pod_ref.namespace.clone(),
        name: pod_ref.name.clone(),
        uid: pod_ref.uid.clone(),
        token: None,
    };
    Choice::Fresh {
        port,
        lease: Box::new(reservation::build_picked(ip, &pick, &holder)),
        told,
        admitted: false,
        reclaim,
    }
}

/// Whether a reservation is in use now (its grace aside): a Service holds
/// its port, a create on its port is pending, or the live labelled pod it
/// is for exists ([`binding::pod_of`]).
pub fn in_use(world: &World, expected: &Expectations, r: &Reservation) -> bool {
    world.is_claimed(r.port)
        || expected.is_creating_on(r.port)
        || binding::pod_of(world, r).is_some()
}

#[cfg(test)]
mod tests;
