//! The controller's metrics, as `/metrics` shows them.

use std::sync::Arc;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::{
    telemetry::{http::Endpoints, metrics},
    vocabulary,
};

/// The `reason` of a Warning event (`vocabulary::reason`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

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
    /// Ports of `--port-range`.
    pub port_range_size: Gauge,
    /// Ports of `--port-range` held by a Service or a reservation, as of
    /// the leader's last pass.
    pub ports_used: Gauge,
    /// Pods whose ssh command waits to be published (`--publish-when`),
    /// as of the leader's last pass.
    pub pods_awaiting: Gauge,
    /// Failed attempts to renew the leader's Lease.
    pub lease_renewal_errors: Counter,
    /// Reservations made at admission released because no pod came for
    /// them within the grace (the leader's; `plan::upkeep`).
    pub reservations_lapsed: Counter,
    /// Warning events sent to pods, by reason.
    pub warnings: Family<ReasonLabel, Counter>,
    /// The admission webhook's.
    pub admission: super::webhook::AdmissionMetrics,
}

impl ControllerMetrics {
    pub fn new() -> Self {
        let warnings = Family::<ReasonLabel, Counter>::default();
        // At zero from the start: a counter first seen at 1 shows
        // Prometheus no increase, and its alert would miss it.
        for reason in [
            vocabulary::reason::NO_FREE_PORT,
            vocabulary::reason::INVALID_TARGET_PORT,
            vocabulary::reason::SERVICE_NAME_TAKEN,
            vocabulary::reason::SSH_ENV_MISSING,
            vocabulary::reason::SSH_UNCONFIRMED,
            vocabulary::reason::PORT_QUARANTINE_CUT,
        ] {
            drop(warnings.get_or_create(&ReasonLabel { reason }));
        }
        Self {
            leader: Gauge::default(),
            services_created: Counter::default(),
            services_deleted: Counter::default(),
            api_errors: Counter::default(),
            pass_duration: metrics::seconds_histogram(),
            port_range_size: Gauge::default(),
            ports_used: Gauge::default(),
            pods_awaiting: Gauge::default(),
            lease_renewal_errors: Counter::default(),
            reservations_lapsed: Counter::default(),
            warnings,
            admission: super::webhook::AdmissionMetrics::default(),
        }
    }

    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("ssh_fwd_controller");
        r.register("leader", "1 while this replica leads", self.leader.clone());
        r.register(
            "services_created",
            "SSH Services created",
            self.services_created.clone(),
        );
        r.register(
            "services_deleted",
            "SSH Services deleted",
            self.services_deleted.clone(),
        );
        r.register(
            "api_errors",
            "Failed API writes and watches (each retried)",
            self.api_errors.clone(),
        );
        r.register(
            "pass_duration_seconds",
            "Time one reconcile pass took: plan and API writes",
            self.pass_duration.clone(),
        );
        r.register(
            "port_range_size",
            "Ports in --port-range",
            self.port_range_size.clone(),
        );
        r.register(
            "ports_used",
            "Ports of --port-range held by a Service or a reservation, as of the leader's last \
             pass (0 on a standby that never led); a quarantined port (--port-reuse-after) is \
             not counted",
            self.ports_used.clone(),
        );
        r.register(
            "pods_awaiting_publication",
            "Pods whose ssh command waits to be published (--publish-when): not Ready, or not yet \
             reported in the data path of the nodes receiving the SSH IP",
            self.pods_awaiting.clone(),
        );
        r.register(
            "lease_renewal_errors",
            "Failed attempts to renew the leader's Lease (each retried until the term ends)",
            self.lease_renewal_errors.clone(),
        );
        r.register(
            "reservations_lapsed",
            "Ports reserved at admission and released because no pod carrying their token \
             came within --reservation-grace (a pod refused by a later admission step, or a \
             forged review); counted by the leader",
            self.reservations_lapsed.clone(),
        );
        r.register(
            "warnings",
            "Warning events sent to pods, by reason (NoFreePort, SSHEnvMissing, PortQuarantineCut...)",
            self.warnings.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter that first appears at 1 shows no increase to Prometheus,
    /// so the first warning or failed admission after a start would go
    /// unalerted: every label value an alert reads is there from the start.
    #[test]
    fn warning_reasons_and_admission_outcomes_are_exported_at_zero_before_any_happens() {
        let text = metrics::render(&ControllerMetrics::new().registry());
        for reason in [
            vocabulary::reason::NO_FREE_PORT,
            vocabulary::reason::SSH_ENV_MISSING,
            vocabulary::reason::INVALID_TARGET_PORT,
            vocabulary::reason::SERVICE_NAME_TAKEN,
        ] {
            let sample = format!("ssh_fwd_controller_warnings_total{{reason=\"{reason}\"}} 0\n");
            assert!(text.contains(&sample), "{sample} missing from:\n{text}");
        }
        for outcome in [
            "Reserved",
            "NoPort",
            "Capped",
            "DryRun",
            "Skipped",
            "Malformed",
        ] {
            let sample =
                format!("ssh_fwd_controller_admissions_total{{outcome=\"{outcome}\"}} 0\n");
            assert!(text.contains(&sample), "{sample} missing from:\n{text}");
        }
    }
}
