//! The webhook's metrics, registered with the controller's.

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

use crate::telemetry::metrics;

/// How an admission ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    /// A port was reserved and written into the pod.
    Reserved,
    /// Admitted without a port (deadline, full range, API failures).
    NoPort,
    /// Admitted without a port: too many pods admitted with one do not
    /// exist yet, in the review's namespace or in all (`budget`).
    Capped,
    /// A dry run: mutated, nothing reserved.
    DryRun,
    /// Not ours to change (not a labelled pod being created).
    Skipped,
    /// Not a readable AdmissionReview, or not a Pod.
    Malformed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: Outcome,
}

/// How a re-read of `--webhook-cert-dir` that found other files ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reload {
    /// The new pair is served.
    Reloaded,
    /// Not a usable pair (half written, or a key that does not fit): the
    /// last good one is served.
    Unusable,
    /// The files could not be read: the last good pair is served.
    Unreadable,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabel {
    pub outcome: Reload,
}

#[derive(Clone)]
pub struct AdmissionMetrics {
    pub admissions: Family<OutcomeLabel, Counter>,
    /// From the request read to the answer, the port reservation included.
    pub duration: Histogram,
    /// TLS handshakes given up (`tls::Handshakes`).
    pub handshake_timeouts: Counter,
    /// Re-reads of the certificate files, by outcome (`tls::CertDir`).
    pub certificate_reloads: Family<ReloadLabel, Counter>,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        let admissions = Family::<OutcomeLabel, Counter>::default();
        // At zero from the start: a counter first seen at 1 shows
        // Prometheus no increase, and its alert would miss it.
        for outcome in [
            Outcome::Reserved,
            Outcome::NoPort,
            Outcome::Capped,
            Outcome::DryRun,
            Outcome::Skipped,
            Outcome::Malformed,
        ] {
            drop(admissions.get_or_create(&OutcomeLabel { outcome }));
        }
        let certificate_reloads = Family::<ReloadLabel, Counter>::default();
        for outcome in [Reload::Reloaded, Reload::Unusable, Reload::Unreadable] {
            drop(certificate_reloads.get_or_create(&ReloadLabel { outcome }));
        }
        Self {
            admissions,
            duration: metrics::seconds_histogram(),
            handshake_timeouts: Counter::default(),
            certificate_reloads,
        }
    }
}

impl AdmissionMetrics {
    pub fn observe(&self, outcome: Outcome, took: std::time::Duration) {
        self.admissions
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "admissions",
            "Pod admissions answered by the webhook, by outcome",
            self.admissions.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to answer one admission, the port reservation included",
            self.duration.clone(),
        );
        registry.register(
            "webhook_handshake_timeouts",
            "TLS handshakes with the webhook given up: no turn within 30 s, or not done 10 s after getting one (more new connections at once than the CPU takes)",
            self.handshake_timeouts.clone(),
        );
        registry.register(
            "webhook_certificate_reloads",
            "Re-reads of --webhook-cert-dir that found the files changed or unreadable, by outcome: reloaded, unusable or unreadable (the last good pair is served)",
            self.certificate_reloads.clone(),
        );
    }
}
