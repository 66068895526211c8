//! The mappings file, polled for changes (which also catches ConfigMap
//! symlink swaps that inotify misses).

use std::{
    collections::BTreeSet,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use tokio::time::{Interval, MissedTickBehavior, interval};

use super::{
    super::{args::AgentArgs, cross_node_check::CrossNodeCheck},
    Change, Next, node_rules,
};
use crate::{
    mapping::{Family, MappingSet, guard::Defaults},
    source::file,
};

/// The mappings file.
pub struct FileSource {
    pub(super) path: PathBuf,
    /// `--ssh-ip`: when empty, frontends are checked against the node's
    /// own addresses instead, read again at every load.
    pub(super) ssh_ips: BTreeSet<IpAddr>,
    /// `--max-mappings`: a file listing more is refused.
    pub(super) capacity: usize,
    /// `--allow`, `--syn-rate`...: what entries that say nothing get.
    pub(super) guard: Defaults,
    /// The last accepted content: even if applying it fails, the resync
    /// retries this, not an older file.
    pub(super) applied: MappingSet,
    /// The content last loaded (accepted or rejected).
    pub(super) last_text: Snapshot,
    /// Backends whose node would ignore the frontend option, refused at
    /// each load once the external interfaces are known.
    pub(super) cross_node: Option<CrossNodeCheck>,
    /// Whether the data path was made to serve IPv6 ([`Source::serves_ipv6`]);
    /// without it, an IPv6 mapping is refused at each load.
    pub(super) ipv6: bool,
    /// A change seen and when, waiting to stay the same for `settle`.
    pub(super) pending: Option<(Snapshot, Instant)>,
    pub(super) settle: Duration,
    pub(super) poll: Interval,
}

/// One read of the mappings file: its bytes, or why it could not be read.
/// What is parsed is always a snapshot compared before, never a read of
/// its own (the file may have changed in between).
#[derive(Debug)]
pub(super) struct Snapshot(std::io::Result<Vec<u8>>);

impl Snapshot {
    pub(super) fn read(path: &std::path::Path) -> Self {
        Self(std::fs::read(path))
    }

    #[cfg(test)]
    pub(super) fn bytes(&self) -> Option<&[u8]> {
        self.0.as_deref().ok()
    }
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a.kind() == b.kind(),
            _ => false,
        }
    }
}

impl FileSource {
    pub(super) async fn open(path: PathBuf, args: &AgentArgs) -> anyhow::Result<Self> {
        let last_text = Snapshot::read(&path);
        let mut source = Self {
            path,
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            capacity: args.max_mappings as usize,
            guard: args.guard.defaults(),
            applied: MappingSet::default(),
            last_text,
            cross_node: None,
            ipv6: true,
            pending: None,
            settle: args.settle_interval,
            poll: interval(args.watch_interval),
        };
        source
            .poll
            .set_missed_tick_behavior(MissedTickBehavior::Skip);
        source.applied = source.load(&source.last_text).await?;
        tracing::info!(file = %source.path.display(), mappings = source.applied.len(), "watching the mappings file");
        Ok(source)
    }

    /// Checks `text`, as read from the file, against the rules of this
    /// moment.
    pub(super) async fn load(&self, text: &Snapshot) -> anyhow::Result<MappingSet> {
        let rules = node_rules(&self.ssh_ips, &self.guard).await?;
        let read = text.0.as_deref().map_err(file::clone_io);
        let set = file::parse_read(read, &self.path, &rules, self.capacity)?;
        if !self.ipv6
            && let Some(m) = set.iter().find(|m| m.family() == Family::V6)
        {
            bail!(
                "{}: mapping {} has the IPv6 frontend {}, but this agent started without IPv6                  (no IPv6 --ssh-ip, and no IPv6 mapping in the file at start), so its IPv6                  tables hold nothing; restart the agent to make them (open sessions are kept),                  or give it an IPv6 --ssh-ip",
                self.path.display(),
                m.name,
                m.frontend
            );
        }
        if let Some(check) = &self.cross_node {
            check
                .check(&set)
                .await
                .with_context(|| format!("{}", self.path.display()))?;
        }
        Ok(set)
    }

    /// The next change, once it has stayed the same across the settle
    /// interval: a file rewritten in place is read only when its writer
    /// paused, never half-written, and what is applied is the very text
    /// that stayed the same. Cancel-safe: the change seen is kept.
    pub(super) async fn next(&mut self) -> Next {
        loop {
            let Some(since) = self.pending.as_ref().map(|(_, since)| *since) else {
                self.poll.tick().await;
                let text = Snapshot::read(&self.path);
                if text != self.last_text {
                    self.pending = Some((text, Instant::now()));
                }
                continue;
            };
            tokio::time::sleep_until((since + self.settle).into()).await;
            let text = Snapshot::read(&self.path);
            if text == self.last_text {
                self.pending = None;
            } else if self.pending.as_ref().is_none_or(|(seen, _)| text != *seen) {
                // Still being written: wait for it to stay put.
                self.pending = Some((text, Instant::now()));
            } else {
                let next = self.reload("file changed", since, &text).await;
                self.pending = None;
                self.last_text = text;
                return next;
            }
        }
    }

    /// Loads `text` (read at a change, or on SIGHUP, which is read at once:
    /// the operator says it is complete).
    pub(super) async fn reload(
        &mut self,
        why: &'static str,
        since: Instant,
        text: &Snapshot,
    ) -> Next {
        match self.load(text).await {
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
