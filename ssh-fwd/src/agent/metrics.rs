//! The agent's metrics: the figures it records as it reconciles, and the data
//! path's own counters, read from the pinned maps at each scrape; those of
//! each mapping off the scrape's path ([`per_mapping`]).

mod per_mapping;

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _},
    metrics::{
        MetricType,
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::{ConstGauge, Gauge},
        histogram::Histogram,
    },
    registry::Registry,
};

use ssh_fwd_common::outcome::{Class, Outcome, live_connections};

use super::{activity::Board, announce::AnnounceMetrics, audit::AuditMetrics, iface::IfaceLabels};
use crate::{
    datapath::{footprint::Footprint, hairpin, maps::Maps, pins::PinLayout, status::StatusMap},
    telemetry::{http::Endpoints, metrics, snapshot::Snapshot},
};

/// `ssh_fwd_kernel_feature`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct FeatureLabels {
    pub feature: String,
}

/// `ssh_fwd_tc_attach_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct MechanismLabels {
    pub mechanism: String,
}

/// What the reconcile loop records.
#[derive(Clone)]
pub struct AgentMetrics {
    pub mappings: Gauge,
    pub reconciles: Counter,
    pub reconcile_errors: Counter,
    pub reconcile_duration: Histogram,
    /// From a change of the source (a watch event, the file seen changed) to
    /// the maps holding it.
    pub change_to_map: Histogram,
    /// Kubernetes list/watch failures (each retried).
    pub api_errors: Counter,
    /// Services skipped because they would break or hijack the node.
    pub invalid_services: Gauge,
    /// Desired mappings left out because a node holds no more.
    pub mappings_left_out: Gauge,
    /// Pins deleted behind the agent's back and put back.
    pub pins_restored: Counter,
    /// `--conn-table-size`: what `ssh_fwd_connections` is a share of.
    pub connection_table_size: Gauge,
    /// 1 unless `--hairpin off`.
    pub hairpin_enabled: Gauge,
    /// 1 for each external interface, by the rule that chose it.
    pub external_ifaces: Family<IfaceLabels, Gauge>,
    /// Each kernel feature the agent probed at start: 1 present, 0 missing.
    pub kernel_features: Family<FeatureLabels, Gauge>,
    /// 1 for the mechanism the tc programs are attached with.
    pub tc_mechanism: Family<MechanismLabels, Gauge>,
    /// The connection log's records.
    pub audit: AuditMetrics,
    /// `--announce`.
    pub announce: AnnounceMetrics,
    ready: Arc<AtomicBool>,
    ready_gauge: Gauge,
}

impl AgentMetrics {
    pub fn new() -> Self {
        Self {
            mappings: Gauge::default(),
            reconciles: Counter::default(),
            reconcile_errors: Counter::default(),
            reconcile_duration: metrics::seconds_histogram(),
            change_to_map: metrics::seconds_histogram(),
            api_errors: Counter::default(),
            invalid_services: Gauge::default(),
            mappings_left_out: Gauge::default(),
            pins_restored: Counter::default(),
            connection_table_size: Gauge::default(),
            hairpin_enabled: Gauge::default(),
            external_ifaces: Family::default(),
            kernel_features: Family::default(),
            tc_mechanism: Family::default(),
            audit: AuditMetrics::default(),
            announce: AnnounceMetrics::default(),
            ready: Arc::default(),
            ready_gauge: Gauge::default(),
        }
    }

    /// What the kernel has, as probed at start.
    pub fn set_kernel(&self, kernel: &crate::datapath::Kernel) {
        for (feature, present) in kernel.probed.iter() {
            self.kernel_features
                .get_or_create(&FeatureLabels {
                    feature: feature.name().into(),
                })
                .set(i64::from(present));
        }
        self.tc_mechanism
            .get_or_create(&MechanismLabels {
                mechanism: kernel.plan.tc.name().into(),
            })
            .set(1);
        if !kernel.plan.hairpin {
            self.hairpin_enabled.set(0);
        }
    }

    /// The first complete reconcile is done.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
        self.ready_gauge.set(1);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The registry: these figures plus the data path's counters from the
    /// maps pinned under `layout`.
    pub fn registry(&self, layout: PinLayout) -> Registry {
        let mut r = Registry::with_prefix("ssh_fwd");
        self.announce.register(&mut r);
        r.register(
            "mappings",
            "Mappings installed by the last reconcile",
            self.mappings.clone(),
        );
        r.register(
            "reconciles",
            "Completed reconciles",
            self.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconciles that failed to apply (retried)",
            self.reconcile_errors.clone(),
        );
        r.register(
            "invalid_services",
            "Services skipped because a mapping of theirs would break or hijack the node (Kubernetes mode)",
            self.invalid_services.clone(),
        );
        r.register(
            "mappings_left_out",
            "Desired mappings not installed because a node holds no more (the newest Services')",
            self.mappings_left_out.clone(),
        );
        r.register(
            "pins_restored",
            "Pins of maps and links deleted behind the agent's back and put back (maps pinned again, links attached again)",
            self.pins_restored.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time one reconcile took: plan and map writes",
            self.reconcile_duration.clone(),
        );
        r.register(
            "change_to_map_seconds",
            "Delay from a change of the source (a watch event, a changed file) to the maps holding it",
            self.change_to_map.clone(),
        );
        r.register(
            "api_errors",
            "Kubernetes list/watch failures (each retried with backoff)",
            self.api_errors.clone(),
        );
        r.register(
            "ready",
            "1 once the first complete reconcile is done",
            self.ready_gauge.clone(),
        );
        r.register(
            "connection_table_size",
            "Entries the connection table holds at most (--conn-table-size); \
             ssh_fwd_connections over this is how full it is",
            self.connection_table_size.clone(),
        );
        r.register(
            "hairpin_enabled",
            "1 unless --hairpin off: the hairpin programs should be attached to a cgroup",
            self.hairpin_enabled.clone(),
        );
        r.register(
            "external_interface_info",
            "1 for each external interface the agent attached to, by the rule that chose it \
             (chosen_by: name, pattern, default-route, route-to; rule: as written; source: flag \
             or node-annotation)",
            self.external_ifaces.clone(),
        );
        r.register(
            "kernel_feature",
            "Each kernel feature the agent probed at start: 1 present, 0 missing (and its \
             fallback taken; docs/kernels.md)",
            self.kernel_features.clone(),
        );
        r.register(
            "tc_attach_info",
            "1 for the mechanism the tc programs are attached with: tcx, or clsact where the \
             kernel has no tcx",
            self.tc_mechanism.clone(),
        );
        self.audit.register(&mut r);
        r.register_collector(Box::new(DatapathCollector { layout }));
        r
    }

    /// `/metrics`, `/healthz` and `/readyz` for this agent; each mapping's
    /// activity from `board`.
    pub fn endpoints(&self, layout: PinLayout, board: Board) -> Endpoints {
        let registry = Arc::new(self.registry(layout.clone()));
        let per_mapping = Snapshot::new(move || per_mapping::render(&layout, &board));
        let ready = self.ready.clone();
        Endpoints {
            metrics: Arc::new(move || metrics::render_with(&registry, &per_mapping.text())),
            ready: Arc::new(move || {
                if ready.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("waiting for the first complete reconcile".into())
                }
            }),
        }
    }
}

/// The data path's counters, read from the pinned maps when scraped.
#[derive(Debug)]
struct DatapathCollector {
    layout: PinLayout,
}

impl Collector for DatapathCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let maps = match Maps::open_pinned(&self.layout) {
            Ok(maps) => maps,
            Err(e) => {
                tracing::debug!(
                    error = format!("{e:#}"),
                    "pinned maps unreadable for /metrics"
                );
                let up = ConstGauge::new(0i64);
                let m = encoder.encode_descriptor(
                    "datapath_readable",
                    "1 if the pinned maps could be read for this scrape.",
                    None,
                    up.metric_type(),
                )?;
                return up.encode(m);
            }
        };
        let up = ConstGauge::new(1i64);
        up.encode(encoder.encode_descriptor(
            "datapath_readable",
            "1 if the pinned maps could be read for this scrape.",
            None,
            up.metric_type(),
        )?)?;
        let attached = ConstGauge::new(i64::from(!hairpin::attached(&self.layout).is_empty()));
        attached.encode(encoder.encode_descriptor(
            "hairpin_attached",
            "1 if hairpin links are pinned on a cgroup as of this scrape.",
            None,
            attached.metric_type(),
        )?)?;
        let mut family = encoder.encode_descriptor(
            "table_memory_bytes",
            "Kernel memory each pinned table takes in bytes, as the kernel counts it (charged \
             to the agent's memory cgroup).",
            None,
            MetricType::Gauge,
        )?;
        for (table, bytes) in Footprint::read(&self.layout).tables {
            ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX))
                .encode(family.encode_family(&[("table", table)])?)?;
        }
        if let Ok(outcomes) = maps.outcome_counters() {
            let mut family = encoder.encode_descriptor(
                "packets",
                "Packets seen by the data path, by outcome; class says how to read it: \
                 forwarded (ssh-fwd's work), passed (not ssh-fwd's, normal), problem.",
                None,
                MetricType::Counter,
            )?;
            for (outcome, n) in outcomes
                .iter()
                .filter(|(o, _)| o.class() != Class::Tracking)
            {
                let labels = [
                    ("outcome", outcome.name()),
                    ("class", outcome.class().name()),
                ];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
            let mut family = encoder.encode_descriptor(
                "connection_events",
                "Connection tracking events: half-opened, established, reset, closed, \
                 expired, purged...",
                None,
                MetricType::Counter,
            )?;
            for (outcome, n) in outcomes
                .iter()
                .filter(|(o, _)| o.class() == Class::Tracking)
            {
                let labels = [("event", outcome.name())];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
            let count = |o: Outcome| {
                outcomes
                    .iter()
                    .find(|(k, _)| *k == o)
                    .map_or(0, |(_, n)| *n)
            };
            let live = ConstGauge::new(i64::try_from(live_connections(count)).unwrap_or(i64::MAX));
            live.encode(encoder.encode_descriptor(
                "connections",
                "Established connections tracked now (exact, from the counters).",
                None,
                live.metric_type(),
            )?)?;
        }
        if let Ok(status) = StatusMap::open_pinned(&self.layout).and_then(|s| s.read()) {
            let half =
                ConstGauge::new(i64::try_from(status.half_open_at_sweep).unwrap_or(i64::MAX));
            half.encode(encoder.encode_descriptor(
                "half_open_connections",
                "Handshakes in progress, as of the last sweep.",
                None,
                half.metric_type(),
            )?)?;
            let churned = ConstCounter::new(status.half_open_churned);
            churned.encode(encoder.encode_descriptor(
                "half_open_churned",
                "SYNs through a frontend that no client completed since the agent started (a SYN flood shows here; so does every SYN of a node whose pods live on other nodes).",
                None,
                churned.metric_type(),
            )?)?;
        }
        Ok(())
    }
}
