//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{path::PathBuf, time::Instant};

use tokio::time::{Interval, MissedTickBehavior, interval};

use super::{args::AgentArgs, metrics::AgentMetrics};
use crate::{
    k8s,
    mapping::MappingSet,
    source::{
        file,
        kubernetes::{
            desired::{Note, Policy},
            watch::KubeSource,
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
            Some(path) => Ok(Self::File(FileSource::open(path.clone(), args, metrics)?)),
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
            Self::Kubernetes(k) => k.current(),
        }
    }

    /// SIGHUP: the file is read again at once. Returns a change if it
    /// differs from what was applied.
    pub fn reload(&mut self) -> Option<Change> {
        match self {
            Self::File(f) => f.reload("SIGHUP"),
            Self::Kubernetes(k) => k.current().map(|desired| Change {
                desired,
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
    /// Counts rejected files as failed reconciles.
    metrics: AgentMetrics,
}

impl FileSource {
    fn open(path: PathBuf, args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
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
            metrics: metrics.clone(),
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
                self.metrics.reconcile_errors.inc();
                tracing::error!(
                    error = %e,
                    "mappings file rejected; the running mappings stay as they are until it is fixed"
                );
                None
            }
        }
    }
}

/// The Kubernetes watches and the desired state they keep.
pub struct KubeFollower {
    source: KubeSource,
    selector: String,
    /// A change was returned already (the first is the complete lists).
    started: bool,
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
        })
    }

    /// The next change: no delay on a quiet system; whatever arrived while
    /// the last change was being written comes as one.
    async fn next(&mut self) -> anyhow::Result<Change> {
        // The watchers retry API errors themselves; this fails only if they
        // stopped.
        let since = self.source.changed().await?;
        report(&self.source.take_notes());
        let why = if self.started {
            "cluster changed"
        } else {
            "first complete list"
        };
        self.started = true;
        Ok(Change {
            desired: self.source.mappings().clone(),
            why,
            since,
        })
    }

    /// The current desired state, checked against a full recompute.
    fn current(&mut self) -> Option<MappingSet> {
        if !self.source.is_ready() {
            return None;
        }
        if let Err(drift) = self.source.check() {
            tracing::error!(
                differing = drift.differing,
                "the incremental desired state differed from a full recompute; rebuilt it (please report this bug)"
            );
        }
        report(&self.source.take_notes());
        Some(self.source.mappings().clone())
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
            other => tracing::debug!(note = ?other, "Service ignored"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rejected_mappings_file_counts_as_a_failed_reconcile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mappings.yaml");
        std::fs::write(
            &path,
            "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n",
        )
        .unwrap();
        let args =
            super::super::args::parse(["--iface", "eth0", "--mappings", path.to_str().unwrap()])
                .unwrap();
        let metrics = AgentMetrics::new();
        let mut file = FileSource::open(path.clone(), &args, &metrics).unwrap();
        assert_eq!(metrics.reconcile_errors.get(), 0);
        std::fs::write(&path, "mappings:\n  - frontend: nonsense\n").unwrap();
        assert!(file.reload("SIGHUP").is_none(), "rejected whole");
        assert_eq!(metrics.reconcile_errors.get(), 1);
        assert_eq!(file.applied.len(), 1, "the accepted file stays applied");
    }
}
