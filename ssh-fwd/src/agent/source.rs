//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{
    collections::BTreeSet,
    net::{Ipv4Addr, SocketAddrV4},
    path::PathBuf,
    time::{Duration, Instant},
};

use ssh_fwd_common::maps::MAX_MAPPINGS;
use tokio::time::{Interval, MissedTickBehavior, interval};

use super::{args::AgentArgs, metrics::AgentMetrics};
use crate::{
    datapath::netdev::{self, Netlink},
    k8s,
    mapping::{MappingSet, printable},
    source::{
        file,
        kubernetes::{
            desired::{Note, Policy},
            watch::KubeSource,
        },
        validate::Rules,
    },
};

/// What the source asks of the reconciler.
pub enum Next {
    Apply(Change),
    /// The source was rejected whole (a bad file): counted as a reconcile
    /// error; the running mappings stay.
    Rejected(String),
}

/// A new desired state to apply: the source's [`Source::desired`] now.
pub struct Change {
    pub why: &'static str,
    /// When the source changed, for the change-to-map delay.
    pub since: Instant,
    /// The frontends whose mapping changed since the previous change, when
    /// the source knows (`None`: any may have), so that the reconciler
    /// plans only those.
    pub touched: Option<BTreeSet<SocketAddrV4>>,
}

impl Change {
    /// A change that may touch any mapping.
    pub fn whole(why: &'static str, since: Instant) -> Self {
        Self {
            why,
            since,
            touched: None,
        }
    }
}

pub enum Source {
    File(FileSource),
    Kubernetes(Box<KubeFollower>),
}

impl Source {
    /// Validates the source before anything touches the kernel: a bad file
    /// or flag at start-up is an error, and whatever a previous agent
    /// installed keeps forwarding.
    pub async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        match &args.mappings {
            Some(path) => Ok(Self::File(FileSource::open(path.clone(), args).await?)),
            None => Ok(Self::Kubernetes(Box::new(
                KubeFollower::open(args, metrics).await?,
            ))),
        }
    }

    /// A line for logs and `ssh-fwd status`.
    pub fn describe(&self) -> String {
        match self {
            Self::File(f) => format!("file {}", f.path.display()),
            Self::Kubernetes(k) => format!("kubernetes, selector {}", k.selector),
        }
    }

    /// The desired state to apply at start-up, if it is known already.
    pub fn initial(&mut self) -> Option<Change> {
        match self {
            Self::File(_) => Some(Change::whole("start-up", Instant::now())),
            Self::Kubernetes(_) => None,
        }
    }

    /// The desired mappings as the source has them now (the last accepted
    /// file).
    pub fn desired(&self) -> &MappingSet {
        match self {
            Self::File(f) => &f.applied,
            Self::Kubernetes(k) => k.source.mappings(),
        }
    }

    /// Waits for the next change. Cancel-safe: a change noticed but not
    /// returned is returned by the next call. Fails only if the watchers
    /// are gone, which ends the agent.
    pub async fn next(&mut self) -> anyhow::Result<Next> {
        match self {
            Self::File(f) => Ok(f.next().await),
            Self::Kubernetes(k) => k.next().await.map(Next::Apply),
        }
    }

    /// The current desired state, for a resync or a SIGHUP; `None` while
    /// it is not known (the first Kubernetes lists are not complete).
    pub fn current(&mut self) -> Option<&MappingSet> {
        match self {
            Self::File(f) => Some(&f.applied),
            Self::Kubernetes(k) => k.current(),
        }
    }

    /// SIGHUP: the file is read again at once; in Kubernetes mode, the
    /// caches are recomputed once they are complete.
    pub async fn reload(&mut self) -> Option<Next> {
        match self {
            Self::File(f) => {
                f.pending = None;
                f.last_text = std::fs::read(&f.path).ok();
                Some(f.reload("SIGHUP", Instant::now()).await)
            }
            Self::Kubernetes(k) => k
                .current()
                .map(|_| Next::Apply(Change::whole("SIGHUP", Instant::now()))),
        }
    }
}

/// The mappings file.
pub struct FileSource {
    path: PathBuf,
    /// `--ssh-ip`: when empty, frontends are checked against the node's
    /// own addresses instead, read again at every load.
    ssh_ips: BTreeSet<Ipv4Addr>,
    /// The last accepted content: even if applying it fails, the resync
    /// retries this, not an older file.
    applied: MappingSet,
    /// The content last loaded (accepted or rejected).
    last_text: Option<Vec<u8>>,
    /// A change seen and when, waiting to stay the same for `settle`.
    pending: Option<(Option<Vec<u8>>, Instant)>,
    settle: Duration,
    poll: Interval,
}

impl FileSource {
    async fn open(path: PathBuf, args: &AgentArgs) -> anyhow::Result<Self> {
        let mut source = Self {
            path,
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            applied: MappingSet::default(),
            last_text: None,
            pending: None,
            settle: args.settle_interval,
            poll: interval(args.watch_interval),
        };
        source
            .poll
            .set_missed_tick_behavior(MissedTickBehavior::Skip);
        source.last_text = std::fs::read(&source.path).ok();
        source.applied = source.load().await?;
        tracing::info!(file = %source.path.display(), mappings = source.applied.len(), "watching the mappings file");
        Ok(source)
    }

    /// Reads and checks the file against the rules of this moment.
    async fn load(&self) -> anyhow::Result<MappingSet> {
        let mut rules = Rules {
            ssh_ips: self.ssh_ips.clone(),
            ..Rules::default()
        };
        if rules.ssh_ips.is_empty() {
            let netlink = Netlink::open()?;
            let (links, addrs) = (netlink.links().await?, netlink.addresses().await?);
            rules.node_addrs = netdev::own_addresses(&links, &addrs);
        }
        Ok(file::load_file(&self.path, &rules)?)
    }

    /// The next change, once it has stayed the same across the settle
    /// interval: a file rewritten in place is read only when its writer
    /// paused, never half-written. Cancel-safe: the change seen is kept.
    async fn next(&mut self) -> Next {
        loop {
            let Some((seen, since)) = self.pending.clone() else {
                self.poll.tick().await;
                let text = std::fs::read(&self.path).ok();
                if text != self.last_text {
                    self.pending = Some((text, Instant::now()));
                }
                continue;
            };
            tokio::time::sleep_until((since + self.settle).into()).await;
            let text = std::fs::read(&self.path).ok();
            if text == self.last_text {
                self.pending = None;
            } else if text != seen {
                // Still being written: wait for it to stay put.
                self.pending = Some((text, Instant::now()));
            } else {
                let next = self.reload("file changed", since).await;
                self.pending = None;
                self.last_text = text;
                return next;
            }
        }
    }

    /// Loads the file now (at a change, or on SIGHUP, which is read at once:
    /// the operator says it is complete).
    async fn reload(&mut self, why: &'static str, since: Instant) -> Next {
        match self.load().await {
            Ok(desired) => {
                if desired.is_empty() {
                    tracing::warn!(
                        "the mappings file lists no mappings: every frontend port closes"
                    );
                }
                self.applied = desired;
                Next::Apply(Change::whole(why, since))
            }
            Err(e) => Next::Rejected(format!(
                "{e:#}; the running mappings stay as they are until it is fixed"
            )),
        }
    }
}

/// The Kubernetes watches and the desired state they keep.
pub struct KubeFollower {
    source: KubeSource,
    selector: String,
    /// A change was returned already (the first is the complete lists).
    started: bool,
    metrics: AgentMetrics,
}

impl KubeFollower {
    async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
        k8s::selector::check(&client, &args.selector).await?;
        let policy = Policy {
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            ports: args.port_range.clone(),
            styles: args.styles(),
        };
        let source = KubeSource::start(client, &args.selector, policy, &metrics.api_errors);
        tracing::info!(
            selector = args.selector,
            "waiting for complete lists of Services and EndpointSlices; until then the maps stay as they are"
        );
        Ok(Self {
            source,
            selector: args.selector.clone(),
            started: false,
            metrics: metrics.clone(),
        })
    }

    /// The next change: no delay on a quiet system; whatever arrived while
    /// the last change was being written comes as one.
    async fn next(&mut self) -> anyhow::Result<Change> {
        // The watchers retry API errors themselves; this fails only if they
        // stopped.
        let (since, touched) = self.source.changed().await?;
        self.report();
        let why = if self.started {
            "cluster changed"
        } else {
            "first complete list"
        };
        self.started = true;
        Ok(Change {
            why,
            since,
            touched,
        })
    }

    /// The current desired state, checked against a full recompute.
    fn current(&mut self) -> Option<&MappingSet> {
        if !self.source.is_ready() {
            return None;
        }
        if let Err(drift) = self.source.check() {
            tracing::error!(
                differing = drift.differing,
                "the incremental desired state differed from a full recompute; rebuilt it (please report this bug)"
            );
        }
        self.report();
        Some(self.source.mappings())
    }

    /// Logs the notes raised and sets the gauges of Services skipped and
    /// mappings left out.
    fn report(&mut self) {
        report(&self.source.take_notes());
        let invalid = i64::try_from(self.source.invalid_services()).unwrap_or(i64::MAX);
        let left_out = i64::try_from(self.source.left_out()).unwrap_or(i64::MAX);
        self.metrics.invalid_services.set(invalid);
        self.metrics.mappings_left_out.set(left_out);
    }
}

/// Logs notes as they are raised (each once while it holds): conflicts,
/// ambiguities and refusals as warnings, ignored Services at debug level.
fn report(notes: &[Note]) {
    for note in notes {
        match note {
            Note::Conflict {
                frontend,
                winner,
                loser,
            } => {
                tracing::warn!(%frontend, winner, loser, "two Services claim one frontend; the older one owns it, ready or not")
            }
            Note::ManyReadyEndpoints {
                service,
                chosen,
                ready,
            } => {
                tracing::warn!(service, %chosen, ready, "Service has several ready endpoints; an SSH Service should select one pod")
            }
            Note::NoReadyEndpoint { service } => tracing::info!(
                service,
                "no ready endpoint; its port stays closed until one is ready"
            ),
            Note::NodePortsAllocated { service } => tracing::warn!(
                service,
                "LoadBalancer Service of class ssh-fwd.io/ssh ignored: it lets Kubernetes open NodePorts on every node; set spec.allocateLoadBalancerNodePorts: false"
            ),
            Note::StyleNotHonoured { service, style } => tracing::warn!(
                service,
                style,
                "Service ignored: --service-styles does not honour this shape; add it to --service-styles or change the Service"
            ),
            Note::Invalid { service, problem } => tracing::warn!(
                service = printable(service),
                problem,
                "Service skipped: it would break or hijack the node; the others apply"
            ),
            Note::OverCapacity { excess, left_out } => tracing::warn!(
                excess,
                left_out = printable(&left_out.join(", ")),
                "more mappings than a node holds ({MAX_MAPPINGS}); the newest Services' are left out, the rest apply"
            ),
            other => tracing::debug!(note = ?other, "Service ignored"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_rejected_mappings_file_is_handed_to_the_reconciler_as_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mappings.yaml");
        std::fs::write(
            &path,
            "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n",
        )
        .unwrap();
        let args = super::super::args::parse([
            "--iface",
            "eth0",
            "--ssh-ip",
            "198.18.0.10",
            "--mappings",
            path.to_str().unwrap(),
        ])
        .unwrap();
        let mut file = FileSource::open(path.clone(), &args).await.unwrap();
        std::fs::write(&path, "mappings:\n  - frontend: nonsense\n").unwrap();
        // The reconciler counts it (`Reconciler::rejected`), once.
        let next = file.reload("SIGHUP", Instant::now()).await;
        assert!(matches!(next, Next::Rejected(_)), "rejected whole");
        assert_eq!(file.applied.len(), 1, "the accepted file stays applied");
    }

    #[tokio::test]
    async fn a_stalled_api_server_stops_start_up_with_a_message_naming_it() {
        let api = ssh_fwd_tests::fake_api::FakeApi::start_on_loopback().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
        api.stall();
        let args = super::super::args::parse([
            "--iface",
            "eth0",
            "--kubernetes",
            "--ssh-ip",
            "198.18.0.10",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ])
        .unwrap();
        let opened = tokio::time::timeout(
            Duration::from_secs(60),
            KubeFollower::open(&args, &AgentMetrics::new()),
        )
        .await
        .expect("start-up hangs on a stalled API server");
        let e = format!("{:#}", opened.err().expect("start-up must fail"));
        assert!(
            e.contains(&format!("http://{}", api.addr())) && e.contains("did not answer"),
            "{e}"
        );
    }

    /// A FIFO at `path` whose `n`-th open for reading gets `texts[n]` (the
    /// last one from then on), as a file a writer changes between two
    /// reads. Ends when `stop` is set.
    fn serve_reads(
        path: &std::path::Path,
        texts: Vec<String>,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<usize> {
        use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _, sync::atomic::Ordering};
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let path = path.to_owned();
        std::thread::spawn(move || {
            let mut served = 0;
            while !stop.load(Ordering::Relaxed) {
                // Fails with ENXIO until a reader opens the FIFO.
                let Ok(mut w) = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path)
                else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                let text = &texts[served.min(texts.len() - 1)];
                w.write_all(text.as_bytes()).unwrap();
                drop(w);
                served += 1;
                // The reader sees its end of file before the next writer.
                std::thread::sleep(Duration::from_millis(30));
            }
            served
        })
    }

    #[tokio::test]
    async fn the_text_applied_is_the_text_that_stayed_the_same_across_the_settle_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mappings.yaml");
        let entry = |port: u16| {
            format!("  - frontend: 198.18.0.10:{port}\n    backend: 10.244.1.5:22\n")
        };
        std::fs::write(&path, format!("mappings:\n{}", entry(8022))).unwrap();
        let args = super::super::args::parse([
            "--iface",
            "eth0",
            "--ssh-ip",
            "198.18.0.10",
            "--mappings",
            path.to_str().unwrap(),
            "--watch-interval",
            "10ms",
            "--settle-interval",
            "100ms",
        ])
        .unwrap();
        let mut file = FileSource::open(path.clone(), &args).await.unwrap();
        // Two entries at the poll and after the settle interval; then a
        // writer truncates it and is half way through again.
        let whole = format!("mappings:\n{}{}", entry(8023), entry(8024));
        let half = format!("mappings:\n{}", entry(8023));
        std::fs::remove_file(&path).unwrap();
        let stop = std::sync::Arc::default();
        let writer = serve_reads(&path, vec![whole.clone(), whole.clone(), half], Arc::clone(&stop));
        let next = tokio::time::timeout(Duration::from_secs(10), file.next())
            .await
            .expect("a change");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(matches!(next, Next::Apply(_)));
        assert_eq!(
            file.applied.len(),
            2,
            "the bytes applied must be those compared: {:?}",
            file.applied
        );
        assert_eq!(file.last_text.as_deref(), Some(whole.as_bytes()));
    }
}
