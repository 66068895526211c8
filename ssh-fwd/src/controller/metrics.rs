//! The controller's metrics, as `/metrics` shows them.

use std::sync::Arc;

use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::telemetry::{http::Endpoints, metrics};

#[derive(Clone)]
pub struct ControllerMetrics {
    /// 1 while this replica leads.
    pub leader: Gauge,
    pub services_created: Counter,
    pub services_deleted: Counter,
    /// Failed API writes and failed watches (each retried).
    pub api_errors: Counter,
    /// Time one pass took: plan and writes.
    pub pass_duration: Histogram,
    /// The admission webhook's.
    pub admission: super::webhook::AdmissionMetrics,
}

impl ControllerMetrics {
    pub fn new() -> Self {
        Self {
            leader: Gauge::default(),
            services_created: Counter::default(),
            services_deleted: Counter::default(),
            api_errors: Counter::default(),
            pass_duration: metrics::seconds_histogram(),
            admission: super::webhook::AdmissionMetrics::default(),
        }
    }

    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("ssh_fwd_controller");
        r.register("leader", "1 while this replica leads.", self.leader.clone());
        r.register(
            "services_created",
            "SSH Services created.",
            self.services_created.clone(),
        );
        r.register(
            "services_deleted",
            "SSH Services deleted.",
            self.services_deleted.clone(),
        );
        r.register(
            "api_errors",
            "Failed API writes and watches (each retried).",
            self.api_errors.clone(),
        );
        r.register(
            "pass_duration_seconds",
            "Time one reconcile pass took: plan and API writes.",
            self.pass_duration.clone(),
        );
        self.admission.register(&mut r);
        r
    }

    /// `/metrics`, `/healthz` and `/readyz`. A standby is ready too: a
    /// rolling update must be able to start the new replica while the old
    /// one still leads.
    pub fn endpoints(&self) -> Endpoints {
        let registry = Arc::new(self.registry());
        Endpoints {
            metrics: Arc::new(move || metrics::render(&registry)),
            ready: Arc::new(|| Ok(())),
        }
    }
}
