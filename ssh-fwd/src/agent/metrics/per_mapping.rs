//! The packets and bytes of each mapping, each direction: a sample per
//! mapping and direction, from a read of every mapping's entries and
//! counters. At 16,384 mappings that is 65,536 samples and some 50,000 map
//! reads, far more than a scrape may take, so they are rendered off the
//! scrape's path (`telemetry::snapshot`). With them, each mapping's open
//! connections and last packet, as the agent's sweeps found them
//! ([`Board`]).

use std::{collections::BTreeMap, time::SystemTime};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};
use ssh_fwd_common::maps::MappingCounters;

use crate::{
    agent::activity::Board,
    datapath::{
        conntrack::activity::Activity,
        maps::Maps,
        pins::PinLayout,
        stats::{self, MappingStats},
    },
    telemetry::metrics,
};

/// The families as OpenMetrics text; `None` when the pinned maps cannot
/// be read now (`ssh_fwd_datapath_readable` says so), and the last
/// rendering stays.
pub fn render(layout: &PinLayout, board: &Board) -> Option<String> {
    let maps = Maps::open_pinned(layout).ok()?;
    let rows = stats::mappings(&maps).ok()?;
    let activity = board.snapshot().unwrap_or_default();
    let mut registry = Registry::with_prefix("ssh_fwd");
    registry.register_collector(Box::new(PerMapping { rows, activity }));
    Some(metrics::families(&registry))
}

#[derive(Debug)]
struct PerMapping {
    rows: Vec<MappingStats>,
    activity: BTreeMap<std::net::SocketAddr, Activity>,
}

impl Collector for PerMapping {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        family(
            &mut encoder,
            "mapping_packets",
            "Packets per mapping and direction.",
            &self.rows,
            |c| (c.packets_in, c.packets_out),
        )?;
        family(
            &mut encoder,
            "mapping_bytes",
            "Bytes per mapping and direction.",
            &self.rows,
            |c| (c.bytes_in, c.bytes_out),
        )?;
        connections(
            &mut encoder,
            "mapping_connections_opened",
            "Connections per mapping that the server confirmed on this node (new SSH sessions \
             of the job).",
            &self.rows,
            |r| r.conns.opened,
        )?;
        connections(
            &mut encoder,
            "mapping_source_limited",
            "Handshakes per mapping held back because their client held --conns-per-source \
             connections on this node.",
            &self.rows,
            |r| r.conns.source_limited,
        )?;
        connections(
            &mut encoder,
            "mapping_denied",
            "SYNs per mapping dropped (or with --deny-action reset, answered with a RST) because \
             their source is outside the mapping's allowlist (with --enforce-established, any \
             segment of such a source), counted on the node that received them.",
            &self.rows,
            |r| r.conns.denied,
        )?;
        connections(
            &mut encoder,
            "mapping_syn_limited",
            "SYNs per mapping dropped because their source was over its --syn-rate, counted \
             on the node that received them.",
            &self.rows,
            |r| r.conns.syn_limited,
        )?;
        self.activity(&mut encoder)
    }
}

impl PerMapping {
    /// Open connections and the last packet, from the sweeps: a gauge each.
    fn activity(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let of = |row: &MappingStats| self.activity.get(&row.frontend);
        let mut family = encoder.encode_descriptor(
            "mapping_open_connections",
            "Connections per mapping open on this node (the pod's), as of the agent's last \
             connection sweep; in-cluster clients the hairpin programs translate are not \
             tracked, so not counted.",
            None,
            MetricType::Gauge,
        )?;
        for row in &self.rows {
            let open = of(row).map_or(0, |a| a.open);
            ConstGauge::new(i64::try_from(open).unwrap_or(i64::MAX))
                .encode(family.encode_family(&labels(row))?)?;
        }
        let mut family = encoder.encode_descriptor(
            "mapping_last_activity_timestamp_seconds",
            "When a connection of the mapping last carried a packet on this node, to the \
             second, as of the agent's last connection sweep (Unix seconds); absent until \
             one has since the agent started.",
            None,
            MetricType::Gauge,
        )?;
        for row in &self.rows {
            let Some(last) = of(row).and_then(|a| a.last) else {
                continue;
            };
            let seconds = last
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            ConstGauge::new(i64::try_from(seconds).unwrap_or(i64::MAX))
                .encode(family.encode_family(&labels(row))?)?;
        }
        Ok(())
    }
}

/// A mapping's labels.
fn labels(row: &MappingStats) -> [(&'static str, String); 3] {
    [
        ("mapping", row.name.clone()),
        ("frontend", row.frontend.to_string()),
        ("backend", row.backend.to_string()),
    ]
}

/// One counter family with a sample per mapping.
fn connections(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[MappingStats],
    pick: impl Fn(&MappingStats) -> u64,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for row in rows {
        ConstCounter::new(pick(row)).encode(family.encode_family(&labels(row))?)?;
    }
    Ok(())
}

/// One counter family with a sample per mapping and direction; `pick`
/// chooses the (in, out) pair from the counters.
fn family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[MappingStats],
    pick: impl Fn(&MappingCounters) -> (u64, u64),
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for row in rows {
        let (inbound, outbound) = pick(&row.counters);
        for (direction, value) in [("in", inbound), ("out", outbound)] {
            let labels = [
                ("mapping", row.name.clone()),
                ("frontend", row.frontend.to_string()),
                ("backend", row.backend.to_string()),
                ("direction", direction.to_owned()),
            ];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}
