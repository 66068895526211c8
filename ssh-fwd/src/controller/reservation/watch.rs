//! The controller's side of port reservations: their watch (which also
//! notes when this process first saw each, [`FirstSeen`]), and the
//! leader's pass that plans from the world and them together.

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
    reservation::{self, FirstSeen, LeaseView},
    webhook::AdmissionArgs,
    world::{World, dirty::DirtyLog},
};
use crate::k8s::{self, reflector::Changes};

/// The port reservations on the SSH IP, in the controller's namespace;
/// each event is also noted in `first_seen`.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    ip: std::net::Ipv4Addr,
    changes: &Arc<Changes>,
    dirty: &Arc<DirtyLog>,
    first_seen: &Arc<FirstSeen>,
    metrics: &ControllerMetrics,
) -> Store<LeaseView> {
    let dirty = dirty.clone();
    let first_seen = first_seen.clone();
    k8s::reflector::spawn_reflector(
        Api::<Lease>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&reservation::selector(ip)),
        LeaseView::from,
        "Lease",
        changes,
        &metrics.api_errors,
        move |event| {
            first_seen.note(event);
            dirty.lease(event);
        },
    )
}

/// What the leader remembers of the reservations from pass to pass.
pub struct Reserving {
    sightings: Sightings,
    grace: std::time::Duration,
    /// The endpoint variable, when the webhook sets it.
    variable: Option<String>,
    /// When the last pass over everything planned: a grace that ends after
    /// it, even during a later pass that did not look at that
    /// reservation, is one to wake up for.
    last_full: Option<Instant>,
}

impl Reserving {
    pub fn new(args: &AdmissionArgs, first_seen: Arc<FirstSeen>) -> Self {
        Self {
            sightings: Sightings::with(first_seen),
            grace: args.reservation_grace,
            variable: args.webhook_addr.map(|_| args.env_name.clone()),
            last_full: None,
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
        if *scope == Scope::All {
            self.last_full = Some(now);
        }
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

    /// How long until a reservation's grace ends (a change to act on): at
    /// once for one that ended since the last pass over everything looked
    /// (a long pass may have ended past it).
    pub fn until_due(&self, now: Instant) -> Option<std::time::Duration> {
        self.sightings
            .next_due(self.grace, self.last_full.unwrap_or(now))
            .map(|due| due.saturating_duration_since(now))
    }
}
