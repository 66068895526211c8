//! What changed since the last pass, as the watches report it: the keys of
//! the objects to look at again, or "everything" after a relist. The
//! reflectors note each change here after their store has applied it, so
//! a pass that reads the stores for these keys sees at least that change.

use std::{
    collections::BTreeSet,
    sync::{Mutex, PoisonError},
};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::{
    reflector::{ObjectRef, Store},
    watcher,
};

use super::{Touched, World, key_of_pod, key_of_service};
use crate::{
    controller::{pod::PodView, reservation::LeaseView},
    source::kubernetes::desired::Policy,
};

/// The objects changed since the last pass.
#[derive(Debug, Default)]
pub struct Dirty {
    /// A watch (re)listed: the world is rebuilt from the stores.
    pub everything: bool,
    pub pods: BTreeSet<(String, String)>,
    pub services: BTreeSet<String>,
    pub leases: BTreeSet<String>,
}

impl Dirty {
    /// How many objects changed.
    pub fn len(&self) -> usize {
        self.pods.len() + self.services.len() + self.leases.len()
    }
}

/// [`Dirty`], shared by the reflectors and the leader's loop.
#[derive(Debug, Default)]
pub struct DirtyLog(Mutex<Dirty>);

impl DirtyLog {
    fn with(&self, f: impl FnOnce(&mut Dirty)) {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// What the next pass must look at again; clears it.
    pub fn take(&self) -> Dirty {
        std::mem::take(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn pod(&self, event: &watcher::Event<PodView>) {
        self.note(event, |d, p| {
            d.pods.insert(key_of_pod(p));
        });
    }

    pub fn service(&self, event: &watcher::Event<Service>) {
        self.note(event, |d, s| {
            d.services.insert(key_of_service(s));
        });
    }

    pub fn lease(&self, event: &watcher::Event<LeaseView>) {
        self.note(event, |d, l| {
            d.leases.insert(l.name.clone().unwrap_or_default());
        });
    }

    fn note<K>(&self, event: &watcher::Event<K>, key: impl FnOnce(&mut Dirty, &K)) {
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                self.with(|d| key(d, object));
            }
            watcher::Event::InitDone => self.with(|d| d.everything = true),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

/// The leader's watches' stores, which hold every object as it is now.
pub struct Stores {
    pub pods: Store<PodView>,
    /// Ours, and the others the agents honour: one watch when ours match
    /// the agents' selector (then `others` is `None`), else two.
    pub ours: Store<Service>,
    pub others: Option<Store<Service>>,
    pub leases: Store<LeaseView>,
    /// Where the reservations live.
    pub lease_namespace: String,
}

impl Stores {
    /// The world as the stores hold it, built whole.
    pub fn world(&self, policy: &Policy, ip: std::net::IpAddr) -> World {
        let mut services = self.ours.state();
        services.extend(self.others.iter().flat_map(Store::state));
        World::of(
            policy.clone(),
            ip,
            &self.pods.state(),
            &services,
            &self.leases.state(),
        )
    }

    /// Brings the `dirty` objects of `world` up to date; what that
    /// touched.
    pub fn refresh(&self, world: &mut World, dirty: &Dirty) -> Touched {
        let mut touched = Touched::default();
        for key in &dirty.pods {
            let now = self.pods.get(&ObjectRef::new(&key.1).within(&key.0));
            world.set_pod(key, now, &mut touched);
        }
        for key in &dirty.services {
            let (namespace, name) = key.split_once('/').unwrap_or(("", key));
            let at = ObjectRef::new(name).within(namespace);
            let now = (self.ours.get(&at)).or_else(|| self.others.as_ref()?.get(&at));
            world.set_service(key, now, &mut touched);
        }
        for name in &dirty.leases {
            let at = ObjectRef::new(name).within(&self.lease_namespace);
            let now = self.leases.get(&at);
            world.set_lease(name, now.as_deref(), &mut touched);
        }
        touched
    }
}
