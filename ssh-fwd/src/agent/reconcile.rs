//! One reconcile: plan the desired set against what the maps hold, apply.

use std::{net::SocketAddrV4, time::Instant};

use crate::{
    dataplane::{Dataplane, show},
    mappings::MappingSet,
    plan::{self, Installed},
};

/// The `why` of the timer-driven reconcile, which re-reads the maps.
pub const RESYNC: &str = "periodic resync";

pub struct Reconciler {
    dataplane: Dataplane,
    /// Reconcile figures for /metrics and /readyz.
    health: std::sync::Arc<super::health::Health>,
    /// What the maps hold after our last successful apply. Reading 2 x N
    /// entries back from the kernel on every change would make each change
    /// cost O(N) syscalls; the maps are re-read at start-up, after a failed
    /// apply and on each periodic resync, which is what catches drift.
    cache: Option<Installed>,
}

impl Reconciler {
    pub fn new(dataplane: Dataplane, health: std::sync::Arc<super::health::Health>) -> Self {
        Self {
            dataplane,
            health,
            cache: None,
        }
    }

    pub fn installed(&self) -> anyhow::Result<Installed> {
        self.dataplane.read_installed()
    }

    /// Makes the maps hold exactly `desired`.
    pub fn reconcile(&mut self, desired: &MappingSet, why: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        if why == RESYNC {
            self.cache = None;
        }
        let installed = match self.cache.take() {
            Some(cached) => cached,
            None => self.dataplane.read_installed()?,
        };
        let (plan, after) = plan::plan_with_tables(&installed, desired)?;
        if plan.is_empty() {
            tracing::debug!(why, mappings = desired.len(), "maps already match");
            self.done(started, desired.len(), after);
            return Ok(());
        }
        for (frontend, target) in &plan.frontend_upserts {
            let name = desired
                .get(&SocketAddrV4::new(frontend.ip(), frontend.port()))
                .map_or("", |m| m.name.as_str());
            match installed.frontends.get(frontend) {
                None => tracing::info!(
                    name,
                    frontend = show(frontend),
                    backend = show(&target.endpoint),
                    "mapping added"
                ),
                Some(old) => tracing::info!(
                    name,
                    frontend = show(frontend),
                    backend = show(&target.endpoint),
                    old_backend = show(&old.endpoint),
                    "mapping changed"
                ),
            }
        }
        for frontend in &plan.frontend_deletes {
            tracing::info!(frontend = show(frontend), "mapping removed");
        }
        // On error the cache stays empty, so the next reconcile re-reads.
        let applied = self.dataplane.apply(&plan)?;
        self.done(started, desired.len(), after);
        tracing::info!(
            why,
            mappings = desired.len(),
            added_or_changed = applied.added_or_changed,
            removed = applied.removed,
            stale_connections_dropped = applied.stale_conns,
            took_ms = started.elapsed().as_secs_f64() * 1000.0,
            "maps reconciled"
        );
        Ok(())
    }

    fn done(&mut self, started: Instant, mappings: usize, after: Installed) {
        if !self.health.ready.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::info!("agent ready: the maps hold the desired mappings");
        }
        self.cache = Some(after);
        self.health
            .record_reconcile(started.elapsed().as_micros() as u64, mappings);
    }
}
