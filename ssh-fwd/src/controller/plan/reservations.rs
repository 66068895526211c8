//! The plan's part for port reservations (`controller::reservation`): which
//! port a pod without a Service gets, which ports held by Services still
//! need a reservation, and which reservations are no longer in use.
//!
//! A reservation is in use while a Service holds its port, while a live
//! labelled pod carries its token or uid, or while a Service create on its
//! port is pending. One this leader has never seen in use is kept for
//! [`Input::grace`] after it first saw it (time for an admitted pod to come
//! into existence; judged by this leader's clock, so clock skew between
//! machines does not matter); one that was in use is released as soon as
//! it is not. A restarted leader sees every reservation anew, so it
//! releases none of those early.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;

use super::{Action, Input, asks_for_ssh};
use crate::controller::{
    pod::PodView,
    reservation::{self, Holder, POD_ANNOTATION, Reservation},
    service::{self, ENDPOINT_ANNOTATION},
};

/// The reservations on the SSH IP, as the plan reads them, with what a
/// pass looks them up by (thousands of pods each look up theirs).
#[derive(Debug, Default)]
pub struct Book {
    all: Vec<Reservation>,
    ports: BTreeSet<u16>,
    /// The first reservation of each `(namespace, token)` and `(namespace,
    /// pod uid)`, by index into `all`.
    by_token: BTreeMap<(Option<String>, String), usize>,
    by_uid: BTreeMap<(Option<String>, String), usize>,
}

impl Book {
    pub fn new(leases: &[Arc<Lease>], ip: std::net::Ipv4Addr) -> Self {
        let all: Vec<Reservation> = leases
            .iter()
            .filter_map(|l| reservation::read(l, ip))
            .collect();
        let mut book = Self {
            ports: all.iter().map(|r| r.port).collect(),
            ..Self::default()
        };
        for (i, r) in all.iter().enumerate() {
            let namespace = r.namespace.clone();
            if let Some(token) = &r.token {
                let key = (namespace.clone(), token.clone());
                book.by_token.entry(key).or_insert(i);
            }
            if let Some(uid) = &r.pod_uid {
                book.by_uid.entry((namespace, uid.clone())).or_insert(i);
            }
        }
        book.all = all;
        book
    }

    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.all.iter().map(|r| r.port)
    }

    fn has(&self, port: u16) -> bool {
        self.ports.contains(&port)
    }

    /// The reservation made for `pod`: the one whose token it carries (in
    /// its own namespace: a token copied into another namespace counts for
    /// nothing), or the one made for its uid; the first of them in the
    /// book when both are there.
    fn of_pod(&self, pod: &PodView) -> Option<&Reservation> {
        let namespace = &pod.metadata.namespace;
        let find = |index: &BTreeMap<(Option<String>, String), usize>, id: Option<&str>| {
            index.get(&(namespace.clone(), id?.to_owned())).copied()
        };
        let by_token = find(&self.by_token, pod_token(pod));
        let by_uid = find(&self.by_uid, pod.metadata.uid.as_deref());
        let first = match (by_token, by_uid) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        self.all.get(first)
    }
}

fn pod_token(pod: &PodView) -> Option<&str> {
    let token = pod.metadata.annotations.as_ref()?.get(POD_ANNOTATION)?;
    Some(token.as_str()).filter(|t| !t.is_empty())
}

/// The port a pod was told at admission, from its endpoint annotation.
fn told_port(pod: &PodView) -> Option<u16> {
    let endpoint = pod
        .metadata
        .annotations
        .as_ref()?
        .get(ENDPOINT_ANNOTATION)?;
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// When this leader first saw each reservation, and whether it has seen
/// it in use since.
#[derive(Debug, Default)]
pub struct Sightings(BTreeMap<String, (Instant, bool)>);

impl Sightings {
    /// Notes the reservations in `book` at `now`, and which are `used`
    /// ([`in_use`]); forgets those gone.
    pub fn update(&mut self, book: &Book, used: &BTreeSet<String>, now: Instant) {
        let names: BTreeSet<&str> = book.all.iter().map(|r| r.name.as_str()).collect();
        self.0.retain(|name, _| names.contains(name.as_str()));
        for name in names {
            let in_use = used.contains(name);
            match self.0.get_mut(name) {
                Some(seen) => seen.1 |= in_use,
                None => drop(self.0.insert(name.to_owned(), (now, in_use))),
            }
        }
    }

    /// The next moment a never-used reservation's grace ends, if one is
    /// still to come.
    pub fn next_due(&self, grace: Duration, now: Instant) -> Option<Instant> {
        self.0
            .values()
            .filter(|(_, used)| !used)
            .map(|(seen, _)| *seen + grace)
            .filter(|due| *due > now)
            .min()
    }

    fn within_grace(&self, name: &str, grace: Duration, now: Instant) -> bool {
        match self.0.get(name) {
            Some((_, true)) => false,
            Some((seen, false)) => now.saturating_duration_since(*seen) < grace,
            None => true,
        }
    }
}

/// How a pod without a Service gets its port.
#[derive(Debug, PartialEq)]
pub enum Choice {
    /// The port reserved for it, free for its Service.
    Reserved(u16),
    /// A port to reserve for it now, with the reservation to create first.
    /// `told`: the port its variable names, when that one is lost.
    Fresh {
        port: u16,
        lease: Box<Lease>,
        told: Option<u16>,
        admitted: bool,
    },
    Full,
}

/// The ports a create may take, and what the pass has handed out.
pub struct Free<'a, R> {
    pub range: &'a std::ops::RangeInclusive<u16>,
    /// Ports held by Services, reserved, or handed out in this pass.
    pub used: &'a mut BTreeSet<u16>,
    /// Ports held by Services.
    pub claimed: &'a BTreeSet<u16>,
    pub rng: &'a mut R,
}

/// The port for `pod` (which has no Service): its own reservation if it
/// has one whose port no Service holds; else the port it was told, if its
/// reservation vanished and the port is still free (reserved again under
/// its token); else a fresh one from [`crate::controller::ports::pick_free`].
pub fn choose(
    pod: &PodView,
    pod_ref: &super::PodRef,
    book: &Book,
    ip: std::net::Ipv4Addr,
    free: &mut Free<'_, impl rand::Rng>,
    handed: &mut BTreeSet<u16>,
) -> Choice {
    if let Some(own) = book.of_pod(pod)
        && !free.claimed.contains(&own.port)
        && handed.insert(own.port)
    {
        return Choice::Reserved(own.port);
    }
    let told = told_port(pod).filter(|_| pod_token(pod).is_some());
    if let (Some(token), Some(port)) = (pod_token(pod), told)
        && book.of_pod(pod).is_none()
        && free.range.contains(&port)
        && !free.used.contains(&port)
    {
        free.used.insert(port);
        handed.insert(port);
        let holder = Holder::Admitted {
            namespace: pod_ref.namespace.clone(),
            name: pod_ref.name.clone(),
            token: token.to_owned(),
        };
        return Choice::Fresh {
            port,
            lease: Box::new(reservation::build(ip, port, &holder)),
            told: None,
            admitted: true,
        };
    }
    let Some(port) = crate::controller::ports::pick_free(free.range, free.used, free.rng) else {
        return Choice::Full;
    };
    free.used.insert(port);
    handed.insert(port);
    let holder = Holder::Pod {
        namespace: pod_ref.namespace.clone(),
        name: pod_ref.name.clone(),
        uid: pod_ref.uid.clone(),
    };
    Choice::Fresh {
        port,
        lease: Box::new(reservation::build(ip, port, &holder)),
        told,
        admitted: false,
    }
}

/// The ports Services hold, each with the first holder's `namespace/name`.
fn holders(
    services: &[Arc<k8s_openapi::api::core::v1::Service>],
    ip: std::net::Ipv4Addr,
) -> BTreeMap<u16, String> {
    let mut holders = BTreeMap::new();
    for claim in services.iter().flat_map(|s| service::claims(s, ip)) {
        holders.entry(claim.port).or_insert(claim.service);
    }
    holders
}

/// The names of the reservations in use now (the grace aside).
pub fn in_use(
    book: &Book,
    pods: &[Arc<PodView>],
    services: &[Arc<k8s_openapi::api::core::v1::Service>],
    expected: &crate::controller::expect::Expectations,
    ip: std::net::Ipv4Addr,
) -> BTreeSet<String> {
    in_use_beside(book, pods, &holders(services, ip), expected)
}

/// [`in_use`], given the ports Services hold.
fn in_use_beside(
    book: &Book,
    pods: &[Arc<PodView>],
    holders: &BTreeMap<u16, String>,
    expected: &crate::controller::expect::Expectations,
) -> BTreeSet<String> {
    let pending: BTreeSet<u16> = expected.ports().collect();
    // What live pods carry: (namespace, token) and (namespace, uid).
    let mut tokens = BTreeSet::new();
    let mut uids = BTreeSet::new();
    for pod in pods.iter().filter(|p| asks_for_ssh(p)) {
        let namespace = pod.metadata.namespace.as_deref();
        if let Some(token) = pod_token(pod) {
            tokens.insert((namespace, token));
        }
        if let Some(uid) = pod.metadata.uid.as_deref() {
            uids.insert((namespace, uid));
        }
    }
    let carried = |r: &Reservation| {
        let namespace = r.namespace.as_deref();
        r.token
            .as_deref()
            .is_some_and(|t| tokens.contains(&(namespace, t)))
            || r.pod_uid
                .as_deref()
                .is_some_and(|u| uids.contains(&(namespace, u)))
    };
    book.all
        .iter()
        .filter(|r| holders.contains_key(&r.port) || pending.contains(&r.port) || carried(r))
        .map(|r| r.name.clone())
        .collect()
}

/// Reservations for ports Services hold without one (someone else's
/// Service, or ours from before reservations), and releases of
/// reservations no longer in use.
pub fn upkeep(
    input: &Input<'_>,
    ip: std::net::Ipv4Addr,
    range: &std::ops::RangeInclusive<u16>,
    now: Instant,
) -> Vec<Action> {
    let book = input.book;
    let holders = holders(input.services, ip);
    let pending: BTreeSet<u16> = input.expected.ports().collect();
    let mut actions: Vec<Action> = holders
        .iter()
        .filter(|(port, _)| range.contains(port) && !book.has(**port) && !pending.contains(port))
        .map(|(port, key)| Action::Reserve {
            lease: Box::new(reservation::build(
                ip,
                *port,
                &Holder::Service { key: key.clone() },
            )),
        })
        .collect();
    let used = in_use_beside(book, input.pods, &holders, input.expected);
    for r in &book.all {
        if used.contains(&r.name) || input.sightings.within_grace(&r.name, input.grace, now) {
            continue;
        }
        actions.push(Action::Release {
            name: r.name.clone(),
            port: r.port,
            uid: r.uid.clone(),
            resource_version: r.resource_version.clone(),
        });
    }
    actions
}
