//! What the agent reports about itself: readiness and reconcile figures,
//! shared between the reconcile loop and the metrics endpoint.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

#[derive(Default)]
pub struct Health {
    /// The first reconcile from a complete source is done.
    pub ready: AtomicBool,
    pub reconciles: AtomicU64,
    pub reconcile_micros_total: AtomicU64,
    pub last_reconcile_micros: AtomicU64,
    pub mappings: AtomicU64,
    pub reconcile_errors: AtomicU64,
    /// API failures of the Kubernetes watchers, when that is the source.
    pub api_errors: std::sync::OnceLock<Arc<AtomicU64>>,
}

impl Health {
    pub fn record_reconcile(&self, micros: u64, mappings: usize) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        self.reconcile_micros_total
            .fetch_add(micros, Ordering::Relaxed);
        self.last_reconcile_micros.store(micros, Ordering::Relaxed);
        self.mappings.store(mappings as u64, Ordering::Relaxed);
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn api_errors(&self) -> u64 {
        self.api_errors
            .get()
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }
}
