//! The leader's caches as the plan reads them: labelled pods by uid, the
//! Services and the ports they claim on the SSH IP, our Services by the pod
//! they serve, and the port reservations. Kept up to date one object at a
//! time from the watches' changes ([`dirty`]), so that a change costs work
//! in proportion to what it touches and not to the size of the cluster;
//! rebuilt whole from the watches' stores on a relist and on the periodic
//! full pass. Each update names what it touched ([`Touched`]), from which
//! the pass's [`Scope`](super::plan::scope::Scope) is drawn. The index of
//! the reservations is [`book`].

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::api::core::v1::Service;

use super::{
    pod::PodView,
    reservation::LeaseView,
    service::{self, Claim},
};
use crate::source::kubernetes::desired::Policy;

use book::{Book, pod_token};

pub mod book;
pub mod dirty;

/// What an update changed: the pods (by uid) whose plan may differ now,
/// the ports whose claimants or reservation changed, and the
/// reservations (by Lease name) whose use may differ.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Touched {
    pub pods: BTreeSet<String>,
    pub ports: BTreeSet<u16>,
    pub reservations: BTreeSet<String>,
}

#[derive(Debug)]
pub struct World {
    /// Whose Services hold ports on the SSH IP: the agents' rules.
    policy: Policy,
    /// The published SSH IP, which names the reservations.
    ip: IpAddr,
    /// Labelled pods by uid (finished and terminating ones too).
    pods: BTreeMap<String, Arc<PodView>>,
    /// Each pod's uid by `(namespace, name)`: what a change names.
    pod_uids: BTreeMap<(String, String), String>,
    /// Pods by the reservation token they carry, in their namespace.
    tokens: BTreeMap<(Option<String>, String), BTreeSet<String>>,
    /// Ours and the others the agents honour, by `namespace/name`.
    services: BTreeMap<String, Arc<Service>>,
    /// Who claims each port on the SSH IP.
    claims: BTreeMap<u16, Vec<Claim>>,
    /// Our Services (`namespace/name`) by the uid of the pod they serve.
    ours: BTreeMap<String, BTreeSet<String>>,
    book: Book,
}

impl World {
    /// An empty world of the SSH IPs in `policy`, `ip` the published one.
    pub fn new(policy: Policy, ip: IpAddr) -> Self {
        Self {
            policy,
            ip,
            pods: BTreeMap::new(),
            pod_uids: BTreeMap::new(),
            tokens: BTreeMap::new(),
            services: BTreeMap::new(),
            claims: BTreeMap::new(),
            ours: BTreeMap::new(),
            book: Book::default(),
        }
    }

    /// The world of these objects, built whole.
    pub fn of(
        policy: Policy,
        ip: IpAddr,
        pods: &[Arc<PodView>],
        services: &[Arc<Service>],
        leases: &[Arc<LeaseView>],
    ) -> Self {
        let mut world = Self::new(policy, ip);
        let mut touched = Touched::default();
        for pod in pods {
            world.set_pod(&key_of_pod(pod), Some(pod.clone()), &mut touched);
        }
        for svc in services {
            world.set_service(&key_of_service(svc), Some(svc.clone()), &mut touched);
        }
        for lease in leases {
            let name = lease.name.clone().unwrap_or_default();
            world.set_lease(&name, Some(lease), &mut touched);
        }
        world
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Puts the pod `key` (`namespace`, `name`) as it is now (`None`: gone).
    pub fn set_pod(
        &mut self,
        key: &(String, String),
        now: Option<Arc<PodView>>,
        touched: &mut Touched,
    ) {
        if let Some(uid) = self.pod_uids.remove(key)
            && let Some(old) = self.pods.remove(&uid)
        {
            self.touch_pod(&old, touched);
            if let Some(token) = pod_token(&old) {
                let at = (old.metadata.namespace.clone(), token.to_owned());
                if let Some(uids) = self.tokens.get_mut(&at) {
                    uids.remove(&uid);
                    if uids.is_empty() {
                        self.tokens.remove(&at);
                    }
                }
            }
        }
        let Some(pod) = now else { return };
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.touch_pod(&pod, touched);
        if let Some(token) = pod_token(&pod) {
            let at = (pod.metadata.namespace.clone(), token.to_owned());
            self.tokens.entry(at).or_default().insert(uid.clone());
        }
        // A namesake with another uid (a pod made again under its name).
        if let Some(old) = self.pods.insert(uid.clone(), pod) {
            self.touch_pod(&old, touched);
        }
        self.pod_uids.insert(key.clone(), uid);
    }

    /// A pod's change touches it and the reservations it may carry.
    fn touch_pod(&self, pod: &PodView, touched: &mut Touched) {
        if let Some(uid) = &pod.metadata.uid {
            touched.pods.insert(uid.clone());
        }
        for r in self.book.all_of_pod(pod) {
            touched.reservations.insert(r.name.clone());
            touched.ports.insert(r.port);
        }
    }

    /// Puts the Service `key` (`namespace/name`) as it is now (`None`:
    /// gone, or no longer one the controller reads).
    pub fn set_service(&mut self, key: &str, now: Option<Arc<Service>>, touched: &mut Touched) {
        if let Some(old) = self.services.remove(key) {
            for claim in service::claims(&old, &self.policy) {
                touched.ports.insert(claim.port);
                if let Some(claimants) = self.claims.get_mut(&claim.port) {
                    claimants.retain(|c| c.service != key);
                    if claimants.is_empty() {
                        self.claims.remove(&claim.port);
                    }
                }
            }
            if let Some(uid) = served_pod(&old) {
                touched.pods.insert(uid.to_owned());
                if let Some(keys) = self.ours.get_mut(uid) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.ours.remove(uid);
                    }
                }
            }
        }
        let Some(svc) = now else { return };
        for claim in service::claims(&svc, &self.policy) {
            touched.ports.insert(claim.port);
            self.claims.entry(claim.port).or_default().push(claim);
        }
        if let Some(uid) = served_pod(&svc) {
            touched.pods.insert(uid.to_owned());
            self.ours
                .entry(uid.to_owned())
                .or_default()
                .insert(key.to_owned());
        }
        self.services.insert(key.to_owned(), svc);
    }

    /// Puts the Lease `name` as it is now (`None`: gone). Only well-formed
    /// reservations on the SSH IP count.
    pub fn set_lease(&mut self, name: &str, now: Option<&LeaseView>, touched: &mut Touched) {
        if let Some(old) = self.book.remove(name) {
            self.touch_reservation(&old, touched);
        }
        let Some(lease) = now else { return };
        if let Some(r) = super::reservation::read(lease, self.ip) {
            self.touch_reservation(&r, touched);
            self.book.insert(r);
        }
    }

    /// A reservation's change touches its port, and the pods it is for:
    /// the port a pod's Service is granted is its reservation's.
    fn touch_reservation(&self, r: &super::reservation::Reservation, touched: &mut Touched) {
        touched.reservations.insert(r.name.clone());
        touched.ports.insert(r.port);
        touched.pods.extend(r.pod_uid.iter().cloned());
        if let Some(token) = &r.token {
            let carriers = self.tokens.get(&(r.namespace.clone(), token.clone()));
            touched.pods.extend(carriers.into_iter().flatten().cloned());
        }
    }

    pub fn pods(&self) -> impl Iterator<Item = (&str, &PodView)> {
        self.pods.iter().map(|(uid, p)| (uid.as_str(), p.as_ref()))
    }

    pub fn pod(&self, uid: &str) -> Option<&PodView> {
        self.pods.get(uid).map(AsRef::as_ref)
    }

    /// The pods carrying `token` in `namespace`.
    pub fn pods_with_token<'a>(
        &'a self,
        namespace: Option<&str>,
        token: &str,
    ) -> impl Iterator<Item = &'a PodView> {
        self.tokens
            .get(&(namespace.map(str::to_owned), token.to_owned()))
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pod(uid))
    }

    /// The Service `namespace/name`, ours or another the agents honour.
    pub fn service(&self, key: &str) -> Option<&Service> {
        self.services.get(key).map(AsRef::as_ref)
    }

    /// The Services claiming `port` on the SSH IP.
    pub fn claims_on(&self, port: u16) -> &[Claim] {
        self.claims
            .get(&port)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn claimed_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.claims.keys().copied()
    }

    /// How many ports of `range` a Service claims or a reservation holds.
    pub fn ports_used(&self, range: &std::ops::RangeInclusive<u16>) -> usize {
        let claimed = self.claims.range(range.clone()).count();
        // A quarantined port is not used: a job gets it when none is free.
        let reserved_only = self
            .book
            .ports_in(range)
            .filter(|port| !self.claims.contains_key(port))
            .filter(|port| (self.book.on_port(*port)).is_some_and(|r| r.released_at.is_none()))
            .count();
        claimed + reserved_only
    }

    pub fn is_claimed(&self, port: u16) -> bool {
        self.claims.contains_key(&port)
    }

    /// Our Services for the pod with this uid.
    pub fn ours_of(&self, uid: &str) -> impl Iterator<Item = &Service> {
        self.ours
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|key| self.service(key))
    }

    /// The pod uids our Services are for (whether those pods exist).
    pub fn served_uids(&self) -> impl Iterator<Item = &str> {
        self.ours.keys().map(String::as_str)
    }

    pub fn book(&self) -> &Book {
        &self.book
    }
}

/// The pod one of our Services is for; `None` for a Service that is not
/// ours ([`service::served_pod`]).
pub fn served_pod(svc: &Service) -> Option<&str> {
    service::served_pod(svc)
}

/// The policy of a controller on `ip` whose range is every port and whose
/// agents honour both shapes: what the plan's tests assume.
#[cfg(test)]
pub fn policy_for(ip: IpAddr) -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: [ip].into(),
        ports: 1..=u16::MAX,
        styles: crate::source::kubernetes::desired::Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

pub fn key_of_pod(pod: &PodView) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

pub fn key_of_service(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or(""),
        svc.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests;
