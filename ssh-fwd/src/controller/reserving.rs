//! The leader's side of port reservations: their watch, when it first saw
//! each (for the grace of reservations whose pod is not there yet), and the
//! pass that plans from the caches and them together.

use std::{sync::Arc, time::Instant};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service};
use kube::{
    Api,
    runtime::{reflector::Store, watcher},
};

use super::{
    apply::Context,
    expect::Expectations,
    metrics::ControllerMetrics,
    plan::{
        self, Action,
        reservations::{Book, Sightings, in_use, upkeep},
    },
    pod::PodView,
    reservation,
    service::Settings,
    webhook::AdmissionArgs,
};
use crate::k8s::{self, reflector::Changes};

/// The port reservations on the SSH IP, in the controller's namespace.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    ip: std::net::Ipv4Addr,
    changes: &Arc<Changes>,
    metrics: &ControllerMetrics,
) -> Store<Lease> {
    k8s::reflector::spawn_reflector(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&reservation::selector(ip)),
        k8s::reflector::drop_managed_fields,
        "Lease",
        changes,
        &metrics.api_errors,
    )
}

/// What one pass reads besides the reservations.
pub struct Caches<'a> {
    pub pods: &'a [Arc<PodView>],
    pub services: &'a [Arc<Service>],
    pub expected: &'a Expectations,
}

pub struct Reserving {
    store: Store<Lease>,
    sightings: Sightings,
    grace: std::time::Duration,
    /// The endpoint variable, when the webhook sets it.
    variable: Option<String>,
}

impl Reserving {
    pub fn new(store: Store<Lease>, args: &AdmissionArgs) -> Self {
        Self {
            store,
            sightings: Sightings::default(),
            grace: args.reservation_grace,
            variable: args.webhook_addr.map(|_| args.env_name.clone()),
        }
    }

    /// The writes of one pass at `now`: the plan, and the reservations'
    /// upkeep.
    pub fn plan(
        &mut self,
        caches: &Caches<'_>,
        ctx: &Context,
        settings: &Settings,
        rng: &mut impl rand::Rng,
        now: Instant,
    ) -> Vec<Action> {
        let book = Book::new(&self.store.state(), ctx.ssh_ip);
        let used = in_use(
            &book,
            caches.pods,
            caches.services,
            caches.expected,
            ctx.ssh_ip,
        );
        self.sightings.update(&book, &used, now);
        let input = plan::Input {
            pods: caches.pods,
            services: caches.services,
            expected: caches.expected,
            book: &book,
            sightings: &self.sightings,
            grace: self.grace,
            variable: self.variable.as_deref(),
        };
        let mut actions = plan::compute(&input, settings, &ctx.range, &ctx.host, rng);
        actions.extend(upkeep(&input, ctx.ssh_ip, &ctx.range, now));
        actions
    }

    /// How long until a reservation's grace ends (a change to act on).
    pub fn until_due(&self, now: Instant) -> Option<std::time::Duration> {
        self.sightings
            .next_due(self.grace, now)
            .map(|due| due.saturating_duration_since(now))
    }
}
