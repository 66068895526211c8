//! `ssh-fwd agent`: one pass down the layers, then one loop that joins them.
//!
//! Start-up: the source is opened and validated (a bad file or flag fails
//! before the kernel is touched), the data path is loaded and attached (or a
//! previous agent's adopted), the telemetry endpoints start. Then a single
//! task keeps the maps equal to the source: on every change, on a resync
//! timer (which also repairs drift: map entries, and deleted pins of maps
//! and links, and reads the node's addresses again), rescanning pods'
//! interfaces when links change and reading the node's addresses when they
//! change. One task owns the data path, so nothing needs a lock.

mod activity;
pub mod announce;
mod args;
pub mod audit;
mod cross_node_check;
mod cross_node_key;
mod environment;
mod iface;
mod listeners;
mod metrics;
mod node_config_map;
mod reconcile;
mod repair;
mod served;
pub mod source;
pub mod sweep;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
    time::{MissedTickBehavior, interval},
};

pub use args::{AgentArgs, AnnounceMode, CrossNode, PodIfacesMode, check_announce};
use metrics::AgentMetrics;
use reconcile::{RESYNC, Reconciler};
use repair::PinRepair;
use source::{Change, Next, Source};

use crate::{
    datapath::{
        self, Datapath,
        conntrack::Timeouts,
        events::{ConnLog, EventReader},
        netdev, object,
        pins::PinLayout,
    },
    telemetry,
};

/// How often pods' interfaces are rescanned besides on link events: catches
/// what sends no event (a qdisc or a CNI's tc program added to a veth).
const SCAN_INTERVAL: Duration = Duration::from_secs(2);

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let metrics = AgentMetrics::new();
    metrics
        .connection_table_size
        .set(i64::from(args.conn_table_size));
    metrics.hairpin_enabled.set(i64::from(
        args.hairpin != datapath::hairpin::HairpinMode::Off,
    ));
    // The range matters only where Services are granted ports from it.
    if args.kubernetes {
        listeners::check(&args.port_range, args.allow_port_overlap)?;
    }
    let mut source = Source::open(&args, &metrics).await?;
    let ifaces = iface::choose(&args, source.kube_client(), &metrics.external_ifaces).await?;
    environment::check(&args, &ifaces).await;
    let neighbour_socket = announce::prepare(&args).await?;
    let key_source = cross_node_key::source(&args, source.kube_client())?;
    // What cannot work across nodes is refused now, before the node is
    // touched, and at every reload of the mappings file.
    let keyed = !matches!(key_source, cross_node_key::KeySource::None);
    let unsealed = cross_node_check::CrossNodeCheck::new(&args, keyed, &ifaces)?;
    source.check_cross_node(unsealed).await?;
    let ipv6 = source.serves_ipv6(&args.ssh_ips);
    let layout = PinLayout::new(&args.bpffs.bpffs);
    let mut datapath = Datapath::start(&datapath::Config {
        layout: &layout,
        ifaces: &ifaces,
        cluster_ifaces: &args.cluster_ifaces,
        mode: args.attach,
        pod_ifaces: args.pod_ifaces == PodIfacesMode::Auto,
        settings: object::Settings {
            max_mappings: args.max_mappings,
            conn_table_size: args.conn_table_size,
            half_open_table_size: args.half_open_table_size,
            syn_bucket_table_size: args.guard.syn_bucket_table_size,
            confirm_timeout_ns: u64::try_from(args.conn_confirm_timeout.as_nanos())
                .unwrap_or(u64::MAX),
            conns_per_source: args.conns_per_source,
            cross_node_plain: args.cross_node == CrossNode::Plain,
            redirect: args.redirect,
            conn_log: args.audit.conn_log,
            refused_records: args.audit.conn_log_rate,
            deny_action: args.guard.deny_action,
            ipv6,
        },
        legacy_grace: args.conn_idle_timeout,
        hairpin: datapath::hairpin::Settings {
            mode: args.hairpin,
            cgroup_root: args.cgroup_root.clone(),
        },
        ssh_ips: &args.ssh_ips,
    })
    .await?;
    metrics.set_kernel(&datapath.kernel);
    let footprint = datapath::footprint::Footprint::read(&layout);
    tracing::info!(
        bytes = footprint.total(),
        ipv6,
        "kernel memory of the tables: {}; charged to this agent's memory cgroup, so its memory \
         limit must hold it (docs/kernels.md#footprint)",
        footprint.summary()
    );
    cross_node_key::apply(key_source, datapath::key::KeyMap::open_pinned(&layout)?)?;
    // Loading built the object's maps and programs in memory (freed now).
    telemetry::memory::release_freed();
    if datapath.adopted {
        let installed = datapath.maps.read_installed()?;
        tracing::info!(
            mappings = installed.frontends.len(),
            "adopted the pinned maps of a previous agent; open sessions keep flowing"
        );
    }
    let board = activity::Board::default();
    if let Some(addr) = args.metrics_addr {
        telemetry::http::serve(addr, metrics.endpoints(layout.clone(), board.clone())).await?;
    }
    let mut labels = Labels::new(args.audit.conn_log, &source);
    let closed = match args.audit.conn_log {
        ConnLog::Off => audit::ClosedSender::none(),
        level => audit::start(
            level,
            args.audit.conn_log_rate,
            EventReader::open_pinned(&layout)
                .context("opening the connection log (`--conn-log off` runs without it)")?,
            labels.subscribe(),
            metrics.audit.clone(),
        ),
    };
    let publisher = activity::publish::spawn(&args, source.kube_client(), &board);
    let ready = metrics.clone();
    let announcer = announce::spawn(
        &args,
        &ifaces,
        &layout,
        neighbour_socket,
        source.kube_client(),
        metrics.announce.clone(),
        move || ready.is_ready(),
    );
    let repair = PinRepair::new(metrics.pins_restored.clone());
    let mut reconciler = Reconciler::new(metrics, &source.describe(), closed.clone());
    let reporter = served::spawn(&args, source.kube_client(), &layout, &reconciler.served());
    let sweeps = sweep::Shared::default();
    let quota = (datapath.conns.quota().cloned())
        .context("the connection tables were loaded without their quota program")?;
    let sweeper = tokio::spawn(sweep::run(
        layout.clone(),
        quota,
        Timeouts::with_idle(args.conn_idle_timeout),
        args.conns_per_source,
        sweeps.clone(),
        closed,
        board,
    ));
    let result = follow(
        &args,
        &mut source,
        &mut datapath,
        &mut reconciler,
        repair,
        &sweeps,
        &mut labels,
    )
    .await;
    sweeper.abort();
    publisher.inspect(tokio::task::JoinHandle::abort);
    reporter.inspect(tokio::task::JoinHandle::abort);
    if let Some(announcer) = announcer {
        announcer.stop().await;
    }
    tracing::info!(
        bpffs = %layout.version_dir().display(),
        "agent exiting; the data path stays attached and keeps forwarding (`ssh-fwd teardown` removes it)"
    );
    result
}

/// The loop: until SIGTERM or SIGINT, apply every change of the source,
/// resync on a timer, and keep pods' interfaces attached.
async fn follow(
    args: &AgentArgs,
    source: &mut Source,
    datapath: &mut Datapath,
    reconciler: &mut Reconciler,
    mut repair: PinRepair,
    sweeps: &sweep::Shared,
    labels: &mut Labels,
) -> anyhow::Result<()> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut resync = interval(args.resync_interval);
    resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
    resync.tick().await; // the first tick is immediate
    let mut scan = interval(SCAN_INTERVAL);
    scan.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let (link_events, mut links_changed) = mpsc::channel(1);
    if let Err(e) = netdev::watch_links(link_events) {
        tracing::warn!(
            error = format!("{e:#}"),
            "no link events; pods' interfaces are found by the periodic rescan only"
        );
    }
    let (addr_events, mut addrs_changed) = mpsc::channel(1);
    if let Err(e) = netdev::watch_addresses(addr_events) {
        tracing::warn!(
            error = format!("{e:#}"),
            "no address events; the node's addresses are read again at each resync only"
        );
    }
    // Pods first: a failure only costs speed, never correctness.
    let mut scans = PodScans::default();
    scans.run(datapath, &repair).await?;
    if let Some(change) = source.initial() {
        apply(reconciler, datapath, source, &change);
        labels.changed(source);
    }
    loop {
        tokio::select! {
            _ = terminate.recv() => { tracing::info!("SIGTERM received"); return Ok(()) }
            _ = interrupt.recv() => { tracing::info!("SIGINT received"); return Ok(()) }
            _ = hangup.recv() => {
                if let Some(next) = source.reload().await {
                    handle(reconciler, datapath, source, next);
                    labels.changed(source);
                }
            }
            next = source.next() => {
                handle(reconciler, datapath, source, next?);
                labels.changed(source);
            }
            _ = resync.tick() => {
                repair.run(datapath)?;
                source.refresh_node_addrs().await;
                if let Some(desired) = source.current() {
                    reconciler.reconcile(datapath, desired, &Change::whole(RESYNC, Instant::now()));
                }
            }
            _ = scan.tick() => {
                scans.run(datapath, &repair).await?;
                labels.catch_up(source);
                let report = *sweeps.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                reconciler.heartbeat(&mut datapath.status, Some(&report));
            }
            Some(()) = links_changed.recv() => scans.run(datapath, &repair).await?,
            Some(()) = addrs_changed.recv() => {
                source.refresh_node_addrs().await;
                // A pod's address: who owns it.
                scans.run(datapath, &repair).await?;
            }
        }
    }
}

fn apply(reconciler: &mut Reconciler, datapath: &mut Datapath, source: &Source, change: &Change) {
    reconciler.reconcile(datapath, source.desired(), change);
    // A whole reload (the first complete lists, a relist, a new file) is
    // the peak: its decoding buffers are free now.
    if change.touched.is_none() {
        telemetry::memory::release_freed();
    }
}

fn handle(reconciler: &mut Reconciler, datapath: &mut Datapath, source: &Source, next: Next) {
    match next {
        Next::Apply(change) => apply(reconciler, datapath, source, &change),
        Next::Rejected(error) => reconciler.rejected(&mut datapath.status, &error),
    }
}

/// The names the connection log gives each frontend's connections, kept
/// up with the source: rebuilt at most once a second (a whole set of
/// Services changes in bursts), the last change caught up on the next scan
/// tick. Nothing when `--conn-log off`.
struct Labels {
    tx: Option<watch::Sender<Arc<audit::Directory>>>,
    /// When the names were last rebuilt after a change.
    built: Option<Instant>,
    stale: bool,
}

impl Labels {
    const EVERY: Duration = Duration::from_secs(1);

    fn new(level: ConnLog, source: &Source) -> Self {
        let tx = (level != ConnLog::Off).then(|| watch::Sender::new(Arc::new(source.directory())));
        Self {
            tx,
            built: None,
            stale: false,
        }
    }

    fn subscribe(&self) -> watch::Receiver<Arc<audit::Directory>> {
        match &self.tx {
            Some(tx) => tx.subscribe(),
            None => watch::channel(Arc::default()).1,
        }
    }

    /// The source changed.
    fn changed(&mut self, source: &Source) {
        self.stale = true;
        if self.built.is_none_or(|at| at.elapsed() >= Self::EVERY) {
            self.catch_up(source);
        }
    }

    /// Rebuilds the names if the source changed since they were built.
    fn catch_up(&mut self, source: &Source) {
        let Some(tx) = &self.tx else { return };
        if self.stale {
            tx.send_replace(Arc::new(source.directory()));
            self.built = Some(Instant::now());
            self.stale = false;
        }
    }
}

/// Rescans of pods' interfaces; a failure is logged once until a scan works.
#[derive(Default)]
struct PodScans {
    failing: bool,
}

impl PodScans {
    /// Fails only when another agent holds the `--bpffs` directory now
    /// ([`datapath::lock::Lost`]): this one must stop at once, not at the
    /// next resync.
    async fn run(&mut self, datapath: &mut Datapath, repair: &PinRepair) -> anyhow::Result<()> {
        match datapath.scan_pods().await {
            Ok(restored) => {
                repair.record(&restored);
                if self.failing {
                    tracing::info!("pod interfaces scanned again");
                    self.failing = false;
                }
            }
            Err(e) if e.is::<datapath::lock::Lost>() => return Err(e),
            Err(e) if !self.failing => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot scan pod interfaces; replies take the egress path until a rescan works"
                );
                self.failing = true;
            }
            Err(_) => {}
        }
        Ok(())
    }
}
