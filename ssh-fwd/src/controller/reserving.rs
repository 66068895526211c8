//! The leader's side of port reservations: their watch, when it first saw
//! each (for the grace of reservations whose pod is not there yet), and the
//! pass that plans from the world and them together.

use std::{sync::Arc, time::Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    runtime::{reflector::Store, watcher},
};

use super::{
    apply::Context,
    expect::Expectations,
    metrics::ControllerMetrics,
    plan::{
        self, Action, Pass,
        reservations::{Sightings, upkeep},
        scope::Scope,
    },
    reservation,
    webhook::AdmissionArgs,
    world::{World, dirty::DirtyLog},
};
use crate::k8s::{self, reflector::Changes};

/// The port reservations on the SSH IP, in the controller's namespace.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    ip: std::net::Ipv4Addr,
    changes: &Arc<Changes>,
    dirty: &Arc<DirtyLog>,
    metrics: &ControllerMetrics,
) -> Store<Lease> {
    let dirty = dirty.clone();
    k8s::reflector::spawn_reflector(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&reservation::selector(ip)),
        k8s::reflector::drop_managed_fields,
        "Lease",
        changes,
        &metrics.api_errors,
        move |event| dirty.lease(event),
    )
}

/// What the leader remembers of the reservations from pass to pass.
pub struct Reserving {
    sightings: Sightings,
    grace: std::time::Duration,
    /// The endpoint variable, when the webhook sets it.
    variable: Option<String>,
}

impl Reserving {
    pub fn new(args: &AdmissionArgs) -> Self {
        Self {
            sightings: Sightings::default(),
            grace: args.reservation_grace,
            variable: args.webhook_addr.map(|_| args.env_name.clone()),
        }
    }

    /// The writes of one pass at `now` over `scope`: the plan, and the
    /// reservations' upkeep.
    pub fn plan(
        &mut self,
        world: &World,
        scope: &Scope,
        expected: &Expectations,
        ctx: &Context,
        rng: &mut impl rand::Rng,
        now: Instant,
    ) -> Vec<Action> {
        self.sightings.update(world, scope, expected, now);
        let pass = Pass {
            world,
            scope,
            expected,
            sightings: &self.sightings,
            grace: self.grace,
            variable: self.variable.as_deref(),
        };
        let mut actions = plan::compute(&pass, &ctx.settings(), &ctx.range, &ctx.host, rng);
        actions.extend(upkeep(&pass, &ctx.range, now));
        actions
    }

    /// How long until a reservation's grace ends (a change to act on).
    pub fn until_due(&self, now: Instant) -> Option<std::time::Duration> {
        self.sightings
            .next_due(self.grace, now)
            .map(|due| due.saturating_duration_since(now))
    }
}
