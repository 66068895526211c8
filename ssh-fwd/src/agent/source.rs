//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{collections::BTreeSet, path::PathBuf, time::Instant};

use tokio::time::{Interval, MissedTickBehavior, interval};

use super::{args::AgentArgs, metrics::AgentMetrics};
use crate::{
    k8s,
    mapping::MappingSet,
    source::{
        file,
        kubernetes::{
            desired::{Note, Policy},
            watch::{self, KubeSource},
        },
    },
};

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
            Some(path) => Ok(Self::File(FileSource::open(path.clone(), args)?)),
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
    pub async fn next(&mut self) -> anyhow::Result<Change> {
        match self {
            Self::File(f) => Ok(f.next().await),
            Self::Kubernetes(k) => k.next().await,
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

    /// SIGHUP: the file is read again at once. Returns a change if it
    /// differs from what was applied.
    pub fn reload(&mut self) -> Option<Change> {
        match self {
            Self::File(f) => f.reload("SIGHUP"),
            Self::Kubernetes(k) => k.ready.then(|| Change {
                desired: k.desired(),
                why: "SIGHUP",
                since: Instant::now(),
            }),
        }
    }
}

/// The mappings file.
pub struct FileSource {
    path: PathBuf,
    /// The last accepted content: even if applying it fails, the resync
    /// retries this, not an older file.
    applied: MappingSet,
    last_text: Option<Vec<u8>>,
    poll: Interval,
}

impl FileSource {
    fn open(path: PathBuf, args: &AgentArgs) -> anyhow::Result<Self> {
        let last_text = std::fs::read(&path).ok();
        let applied = file::load_file(&path)?;
        let mut poll = interval(args.watch_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Skip);
        tracing::info!(file = %path.display(), mappings = applied.len(), "watching the mappings file");
        Ok(Self {
            path,
            applied,
            last_text,
            poll,
        })
    }

    async fn next(&mut self) -> Change {
        loop {
            self.poll.tick().await;
            let text = std::fs::read(&self.path).ok();
            if text == self.last_text {
                continue;
            }
            self.last_text = text;
            if let Some(change) = self.reload("file changed") {
                return change;
            }
        }
    }

    fn reload(&mut self, why: &'static str) -> Option<Change> {
        let since = Instant::now();
        match file::load_file(&self.path) {
            Ok(desired) => {
                if desired.is_empty() {
                    tracing::warn!(
                        "the mappings file lists no mappings: every frontend port closes"
                    );
                }
                self.applied = desired.clone();
                Some(Change {
                    desired,
                    why,
                    since,
                })
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "mappings file rejected; the running mappings stay as they are until it is fixed"
                );
                None
            }
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
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
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
