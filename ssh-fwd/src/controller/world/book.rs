//! The world's index of the port reservations on the SSH IP: by name, by
//! port, and by the token or pod uid each was made for, so that each of
//! thousands of pods finds its own without a scan.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    controller::{pod::PodView, reservation::Reservation},
    vocabulary,
};

/// The reservations on the SSH IP, as the plan reads them, with what a
/// pass looks them up by (thousands of pods each look up theirs). Kept
/// one reservation at a time as Leases change.
#[derive(Debug, Default)]
pub struct Book {
    /// By Lease name. A name is made of the IP and the port
    /// ([`crate::controller::reservation::read`] refuses any other), so a port has at most
    /// one reservation.
    all: BTreeMap<String, Reservation>,
    by_port: BTreeMap<u16, String>,
    /// The reservations of each `(namespace, token)` and `(namespace, pod
    /// uid)`, by name.
    by_token: BTreeMap<(Option<String>, String), BTreeSet<String>>,
    by_uid: BTreeMap<(Option<String>, String), BTreeSet<String>>,
}

impl Book {
    pub fn insert(&mut self, r: Reservation) {
        self.remove(&r.name.clone());
        self.by_port.insert(r.port, r.name.clone());
        if let Some(token) = &r.token {
            let key = (r.namespace.clone(), token.clone());
            self.by_token.entry(key).or_default().insert(r.name.clone());
        }
        if let Some(uid) = &r.pod_uid {
            let key = (r.namespace.clone(), uid.clone());
            self.by_uid.entry(key).or_default().insert(r.name.clone());
        }
        self.all.insert(r.name.clone(), r);
    }

    pub fn remove(&mut self, name: &str) -> Option<Reservation> {
        let r = self.all.remove(name)?;
        self.by_port.remove(&r.port);
        let unindex = |index: &mut BTreeMap<(Option<String>, String), BTreeSet<String>>,
                       id: &Option<String>| {
            let Some(id) = id else { return };
            let key = (r.namespace.clone(), id.clone());
            if let Some(names) = index.get_mut(&key) {
                names.remove(name);
                if names.is_empty() {
                    index.remove(&key);
                }
            }
        };
        unindex(&mut self.by_token, &r.token);
        unindex(&mut self.by_uid, &r.pod_uid);
        Some(r)
    }

    pub fn all(&self) -> impl Iterator<Item = &Reservation> {
        self.all.values()
    }

    pub fn get(&self, name: &str) -> Option<&Reservation> {
        self.all.get(name)
    }

    /// The reserved ports within `range`.
    pub fn ports_in(
        &self,
        range: &std::ops::RangeInclusive<u16>,
    ) -> impl Iterator<Item = u16> + '_ {
        self.by_port.range(range.clone()).map(|(port, _)| *port)
    }

    pub fn has(&self, port: u16) -> bool {
        self.by_port.contains_key(&port)
    }

    pub fn on_port(&self, port: u16) -> Option<&Reservation> {
        self.all.get(self.by_port.get(&port)?)
    }

    /// Every reservation that may be `pod`'s: whose token it carries (in
    /// its own namespace: a token copied into another namespace counts for
    /// nothing) or made for its uid. Which of them is its own is
    /// [`binding::reservation_of`](crate::controller::reservation::binding::reservation_of)'s
    /// to say: a token can be copied onto another pod of the namespace.
    pub fn all_of_pod<'a>(&'a self, pod: &PodView) -> impl Iterator<Item = &'a Reservation> {
        let namespace = &pod.metadata.namespace;
        let find = |index: &'a BTreeMap<(Option<String>, String), BTreeSet<String>>,
                    id: Option<&str>| {
            id.and_then(|id| index.get(&(namespace.clone(), id.to_owned())))
                .into_iter()
                .flatten()
        };
        find(&self.by_token, pod_token(pod))
            .chain(find(&self.by_uid, pod.metadata.uid.as_deref()))
            .filter_map(|name| self.all.get(name))
    }
}

/// The reservation token a pod carries (written at admission).
pub fn pod_token(pod: &PodView) -> Option<&str> {
    pod.metadata
        .annotation(vocabulary::RESERVATION)
        .filter(|t| !t.is_empty())
}
