//! One reconcile: read the maps, plan against the desired set, apply.

use std::time::Instant;

use crate::{
    dataplane::{Dataplane, show},
    mappings::MappingSet,
    plan::{self, Installed},
};

pub struct Reconciler {
    dataplane: Dataplane,
    /// Reconcile figures for /metrics and /readyz.
    health: std::sync::Arc<super::health::Health>,
}

impl Reconciler {
    /// Logs "agent ready" after the first successful reconcile.
    fn mark_ready(&self) {
        if !self.health.ready.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::info!("agent ready: the maps hold the desired mappings");
        }
    }

    pub fn new(dataplane: Dataplane, health: std::sync::Arc<super::health::Health>) -> Self {
        Self { dataplane, health }
    }

    pub fn installed(&self) -> anyhow::Result<Installed> {
        self.dataplane.read_installed()
    }

    /// Makes the maps hold exactly `desired`. Reads the maps every time, so
    /// drift (an entry deleted by hand) is repaired too.
    pub fn reconcile(&mut self, desired: &MappingSet, why: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        let installed = self.dataplane.read_installed()?;
        let plan = plan::plan(&installed, desired)?;
        if plan.is_empty() {
            tracing::debug!(why, mappings = desired.len(), "maps already match");
            self.mark_ready();
            self.health
                .record_reconcile(started.elapsed().as_micros() as u64, desired.len());
            return Ok(());
        }
        for (frontend, target) in &plan.frontend_upserts {
            let name = desired
                .iter()
                .find(|m| m.frontend.port() == frontend.port() && *m.frontend.ip() == frontend.ip())
                .map(|m| m.name.as_str())
                .unwrap_or("");
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
        let applied = self.dataplane.apply(&plan)?;
        self.mark_ready();
        self.health
            .record_reconcile(started.elapsed().as_micros() as u64, desired.len());
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
}
