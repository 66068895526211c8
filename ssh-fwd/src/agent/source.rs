//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{
    collections::BTreeSet,
    net::Ipv4Addr,
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
            watch::{self, KubeSource},
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

/// A new desired state to apply.
pub struct Change {
    pub desired: MappingSet,
    pub why: &'static str,
    /// When the source changed, for the change-to-map delay.
    pub since: Instant,
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
            Self::File(f) => Some(Change {
                desired: f.applied.clone(),
                why: "start-up",
                since: Instant::now(),
            }),
            Self::Kubernetes(_) => None,
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
    pub fn current(&mut self) -> Option<MappingSet> {
        match self {
            Self::File(f) => Some(f.applied.clone()),
            Self::Kubernetes(k) => k.ready.then(|| k.desired()),
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
            Self::Kubernetes(k) => k.ready.then(|| {
                Next::Apply(Change {
                    desired: k.desired(),
                    why: "SIGHUP",
                    since: Instant::now(),
                })
            }),
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
                self.applied = desired.clone();
                Next::Apply(Change {
                    desired,
                    why,
                    since,
                })
            }
            Err(e) => Next::Rejected(format!(
                "{e:#}; the running mappings stay as they are until it is fixed"
            )),
        }
    }
}

/// The Kubernetes caches.
pub struct KubeFollower {
    source: KubeSource,
    policy: Policy,
    selector: String,
    ready: bool,
    /// A change was noticed and not returned yet.
    pending: bool,
    /// Notes already logged, so a lasting one is logged once.
    seen_notes: BTreeSet<String>,
    metrics: AgentMetrics,
}

impl KubeFollower {
    async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
        watch::check_selector(&client, &args.selector).await?;
        let source = KubeSource::start(client, &args.selector, &metrics.api_errors);
        tracing::info!(
            selector = args.selector,
            "waiting for complete lists of Services and EndpointSlices; until then the maps stay as they are"
        );
        Ok(Self {
            source,
            policy: Policy {
                ssh_ips: args.ssh_ips.iter().copied().collect(),
                ports: args.port_range.clone(),
            },
            selector: args.selector.clone(),
            ready: false,
            pending: false,
            seen_notes: BTreeSet::new(),
            metrics: metrics.clone(),
        })
    }

    async fn next(&mut self) -> anyhow::Result<Change> {
        if !self.ready {
            // The watchers retry API errors themselves; this fails only if
            // they stopped.
            self.source.wait_until_ready().await?;
            self.ready = true;
            let since = self
                .source
                .changes
                .take_since()
                .unwrap_or_else(Instant::now);
            return Ok(Change {
                desired: self.desired(),
                why: "first complete list",
                since,
            });
        }
        if !self.pending {
            self.source.changes.changed().await;
            self.pending = true;
        }
        // Coalesce a burst of events into one reconcile.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.pending = false;
        let since = self
            .source
            .changes
            .take_since()
            .unwrap_or_else(Instant::now);
        Ok(Change {
            desired: self.desired(),
            why: "cluster changed",
            since,
        })
    }

    fn desired(&mut self) -> MappingSet {
        let desired = self.source.desired(&self.policy);
        report(&desired.notes, &mut self.seen_notes);
        let (mut invalid, mut left_out) = (0, 0);
        for note in &desired.notes {
            match note {
                Note::Invalid { .. } => invalid += 1,
                Note::OverCapacity { excess, .. } => left_out += *excess,
                _ => {}
            }
        }
        self.metrics.invalid_services.set(invalid);
        self.metrics.mappings_left_out.set(left_out as i64);
        desired.mappings
    }
}

/// Logs each note once while it holds: conflicts and ambiguities as warnings,
/// ignored Services at debug level.
fn report(notes: &[Note], seen: &mut BTreeSet<String>) {
    let mut now = BTreeSet::new();
    for note in notes {
        let key = format!("{note:?}");
        if !seen.contains(&key) {
            match note {
                Note::Conflict {
                    frontend,
                    winner,
                    loser,
                } => {
                    tracing::warn!(%frontend, winner, loser, "two Services claim one frontend; the older one wins")
                }
                Note::ManyReadyEndpoints {
                    service,
                    chosen,
                    ready,
                } => {
                    tracing::warn!(service, %chosen, ready, "Service has several ready endpoints; an SSH Service should select one pod")
                }
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
                Note::NoReadyEndpoint { service } => tracing::info!(
                    service,
                    "no ready endpoint; its port stays closed until one is ready"
                ),
                other => tracing::debug!(note = ?other, "Service ignored"),
            }
        }
        now.insert(key);
    }
    *seen = now;
}
