//! The connection log (`--conn-log`): the kernel's records of accepted and
//! refused connections, and the sweep's of ended ones, written as one line
//! each (target `ssh_fwd::connections`) with the names an operator looks
//! for (mapping, Service, pod), within `--conn-log-rate` for each class of
//! line (`budget.rs`), and counted in `/metrics`, what was dropped by kind
//! (`drops.rs`).

mod budget;
mod drops;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use ssh_fwd_common::maps::{ConnEvent, ConnStats, Ended, Endpoint, EventKind};
use tokio::sync::{mpsc, watch};

use crate::datapath::{
    conntrack::{Gone, clock_ns},
    events::{ConnLog, Event, EventReader},
    family::MapFamily,
};

use budget::{Budgets, Class};
use drops::{Dropped, KernelTotals, REPORT_EVERY, Stage, Summary};

/// What the log names a frontend's connections by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Label {
    pub mapping: Arc<str>,
    /// Kubernetes: the Service owning the frontend, `namespace/name`.
    pub service: Option<Arc<str>>,
    /// Kubernetes: the pod behind the backend address, `namespace/name`.
    pub pod: Option<Arc<str>>,
}

/// Each installed frontend's [`Label`], as the source has it now. A
/// B-tree built from the source's sorted mappings has full nodes: about
/// half the room of a hash table, which keeps up to twice its entries'
/// room (0.5 MB at 10,000 mappings), and a lookup per logged connection
/// costs nothing that matters.
pub type Directory = BTreeMap<SocketAddr, Label>;

/// What became of a connection, for a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(
    non_camel_case_types,
    reason = "the variants are the label values, written as the log's `event` field writes them"
)]
pub enum What {
    accepted,
    denied,
    syn_limited,
    closed,
}

impl What {
    pub const ALL: [Self; 4] = [
        Self::accepted,
        Self::denied,
        Self::syn_limited,
        Self::closed,
    ];

    /// The kind of a kernel record.
    fn of(kind: EventKind) -> Self {
        match kind {
            EventKind::Accepted => Self::accepted,
            EventKind::Denied => Self::denied,
            EventKind::SynLimited => Self::syn_limited,
            EventKind::Closed => Self::closed,
        }
    }

    /// Which budget its lines spend.
    fn class(self) -> Class {
        match self {
            Self::accepted | Self::closed => Class::Connection,
            Self::denied | Self::syn_limited => Class::Refused,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecordLabel {
    pub event: What,
}

/// What the log counts.
#[derive(Clone, Default)]
pub struct AuditMetrics {
    /// Every record, logged or held back by `--conn-log-rate`.
    records: Family<RecordLabel, Counter>,
    /// Records not written out (every kind's drops at the `log` stage).
    unlogged: Counter,
    /// Records dropped, by kind and stage.
    dropped: Dropped,
}

impl AuditMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "connection_records",
            "Records of the connection log (--conn-log), by event: accepted, denied, \
             syn_limited, closed; logged or held back by --conn-log-rate",
            self.records.clone(),
        );
        r.register(
            "connection_records_unlogged",
            "Records of the connection log not written out: over --conn-log-rate",
            self.unlogged.clone(),
        );
        r.register(
            "connection_records_dropped",
            "Records of the connection log dropped, by kind (accepted, denied, syn_limited, \
             closed) and stage (kernel: not written into the ring, read every 10 s; log: over \
             --conn-log-rate, each class of line its own budget)",
            self.dropped.family(),
        );
    }

    /// `n` records of `kind` not written out.
    fn unlogged(&self, kind: What, n: u64) {
        self.unlogged.inc_by(n);
        self.dropped.add(kind, Stage::log, n);
    }
}

/// One connection's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub what: What,
    /// On the kernel's clock (CLOCK_MONOTONIC_COARSE).
    pub at_ns: u64,
    pub client: SocketAddr,
    pub frontend: SocketAddr,
    pub backend: SocketAddr,
    /// A closed connection's: how it ended, when it was confirmed (kernel
    /// clock) and its traffic, if counted.
    pub ended: Option<Ended>,
    pub opened_ns: u64,
    pub stats: Option<ConnStats>,
}

impl Record {
    /// A kernel record of either family.
    pub fn from_record(e: &Event) -> Option<Self> {
        match e {
            Event::V4(e) => Self::from_event(e),
            Event::V6(e) => Self::from_event(e),
        }
    }

    /// A kernel record; `None` for a kind this build does not know (a
    /// newer program's).
    pub fn from_event<A: MapFamily>(e: &ConnEvent<Endpoint<A>>) -> Option<Self> {
        let what = What::of(e.kind()?);
        Some(Self {
            what,
            at_ns: e.time_ns,
            client: A::socket(&e.client),
            frontend: A::socket(&e.frontend),
            backend: A::socket(&e.backend),
            ended: e.ended(),
            opened_ns: e.created_ns,
            stats: (what == What::closed).then_some(e.stats),
        })
    }

    /// A connection the agent removed at `now_ns` (kernel clock).
    pub fn from_gone(g: &Gone, now_ns: u64) -> Self {
        Self {
            what: What::closed,
            at_ns: now_ns,
            client: g.client,
            frontend: g.frontend,
            backend: g.backend,
            ended: Some(g.why),
            opened_ns: g.created_ns,
            stats: g.stats,
        }
    }

    /// How long it lived, for a closed one.
    pub fn duration(&self) -> Option<Duration> {
        (self.what == What::closed && self.opened_ns != 0)
            .then(|| Duration::from_nanos(self.at_ns.saturating_sub(self.opened_ns)))
    }
}

/// The agent's side: connections its sweep or its reconcile removed, sent
/// to the log without waiting (a full channel drops them, counted as
/// unlogged).
#[derive(Clone)]
pub struct ClosedSender {
    tx: Option<mpsc::Sender<Vec<Gone>>>,
    metrics: AuditMetrics,
}

impl ClosedSender {
    /// A sender that logs nothing: `--conn-log` is not `all`.
    pub fn none() -> Self {
        Self {
            tx: None,
            metrics: AuditMetrics::default(),
        }
    }

    pub fn send(&self, gone: Vec<Gone>) {
        let Some(tx) = &self.tx else { return };
        if gone.is_empty() {
            return;
        }
        let n = gone.len() as u64;
        if tx.try_send(gone).is_err() {
            self.metrics.unlogged(What::closed, n);
        }
    }
}

/// Starts the log: reads the ring of `reader`, and what the returned sender
/// is given. Labels come from `directory`.
pub fn start(
    level: ConnLog,
    rate: u32,
    reader: EventReader,
    directory: watch::Receiver<Arc<Directory>>,
    metrics: AuditMetrics,
) -> ClosedSender {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(run(level, rate, reader, rx, directory, metrics.clone()));
    ClosedSender {
        tx: (level == ConnLog::All).then_some(tx),
        metrics,
    }
}

async fn run(
    level: ConnLog,
    rate: u32,
    mut reader: EventReader,
    mut closed: mpsc::Receiver<Vec<Gone>>,
    directory: watch::Receiver<Arc<Directory>>,
    metrics: AuditMetrics,
) {
    let mut log = Log {
        level,
        budgets: Budgets::new(rate, Instant::now()),
        current: directory.borrow().clone(),
        retired: Directory::new(),
        metrics,
    };
    let mut directory = directory;
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut summary = Summary::default();
    let mut kernel = KernelTotals::default();
    let mut events = Vec::new();
    loop {
        tokio::select! {
            read = reader.read(&mut events, 1024) => {
                if let Err(e) = read {
                    tracing::warn!(error = format!("{e:#}"), "the connection log stops: cannot read its ring buffer");
                    return;
                }
                for e in events.drain(..) {
                    if let Some(r) = Record::from_record(&e) {
                        log.write(&r);
                    }
                }
            }
            Some(gone) = closed.recv() => {
                let now = clock_ns();
                for g in &gone {
                    log.write(&Record::from_gone(g, now));
                }
            }
            Ok(()) = directory.changed() => {
                let next = directory.borrow_and_update().clone();
                log.relabel(next);
            }
            _ = report.tick() => {
                match reader.dropped() {
                    Ok(totals) => kernel.update(
                        totals.map(|(kind, n)| (What::of(kind), n)),
                        &log.metrics.dropped,
                    ),
                    Err(e) => tracing::debug!(
                        error = format!("{e:#}"),
                        "cannot read what the programs dropped of the connection log"
                    ),
                }
                summary.tell(&log.metrics.dropped, rate);
            }
        }
    }
}

struct Log {
    level: ConnLog,
    budgets: Budgets,
    /// The names as the source has them now.
    current: Arc<Directory>,
    /// Names of frontends the source no longer has: the records of the
    /// connections their removal ended come after it.
    retired: Directory,
    metrics: AuditMetrics,
}

/// The most retired names kept; past it they are forgotten all at once.
const MAX_RETIRED: usize = 65_536;

impl Log {
    fn relabel(&mut self, next: Arc<Directory>) {
        for (frontend, label) in self.current.iter() {
            if !next.contains_key(frontend) {
                self.retired.insert(*frontend, label.clone());
            }
        }
        self.retired
            .retain(|frontend, _| !next.contains_key(frontend));
        if self.retired.len() > MAX_RETIRED {
            self.retired.clear();
        }
        self.current = next;
    }

    fn label(&self, frontend: &SocketAddr) -> Label {
        (self.current.get(frontend))
            .or_else(|| self.retired.get(frontend))
            .cloned()
            .unwrap_or_default()
    }

    fn write(&mut self, r: &Record) {
        let wanted = match r.what {
            What::accepted => self.level >= ConnLog::Accepted,
            _ => self.level >= ConnLog::All,
        };
        if !wanted {
            return;
        }
        self.metrics
            .records
            .get_or_create(&RecordLabel { event: r.what })
            .inc();
        if !self.budgets.allow(r.what.class(), Instant::now()) {
            self.metrics.unlogged(r.what, 1);
            return;
        }
        line(r, &self.label(&r.frontend), wall_time(r.at_ns));
    }
}

/// The wall-clock time of `at_ns` on the kernel's clock.
fn wall_time(at_ns: u64) -> SystemTime {
    let ago = Duration::from_nanos(clock_ns().saturating_sub(at_ns));
    SystemTime::now() - ago
}

/// Writes one record as a log line.
fn line(r: &Record, label: &Label, at: SystemTime) {
    let at = humantime::format_rfc3339_millis(at).to_string();
    let mapping = (!label.mapping.is_empty()).then_some(&*label.mapping);
    let (service, pod) = (label.service.as_deref(), label.pod.as_deref());
    let (client, frontend, backend) = (r.client, r.frontend, r.backend);
    match r.what {
        What::accepted => tracing::info!(
            target: "ssh_fwd::connections",
            event = "accepted", at, %client, %frontend, %backend, mapping, service, pod,
            "connection accepted"
        ),
        What::denied | What::syn_limited => tracing::info!(
            target: "ssh_fwd::connections",
            event = if r.what == What::denied { "denied" } else { "syn_limited" },
            at, %client, %frontend, %backend, mapping, service, pod,
            "connection refused"
        ),
        What::closed => {
            let stats = r.stats.unwrap_or_default();
            tracing::info!(
                target: "ssh_fwd::connections",
                event = "closed", at, %client, %frontend, %backend, mapping, service, pod,
                ended = r.ended.map_or("unknown", Ended::name),
                duration_s = r.duration().map(|d| d.as_secs_f64()),
                packets_in = stats.packets_in, bytes_in = stats.bytes_in,
                packets_out = stats.packets_out, bytes_out = stats.bytes_out,
                "connection closed"
            );
        }
    }
}

#[cfg(test)]
mod tests;
