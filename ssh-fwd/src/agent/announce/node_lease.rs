//! This node's own announcement Lease, `ssh-fwd-announce-node-NODE`: held
//! by it, never renewed, with the MACs of its external interfaces
//! ([`vocabulary::ANNOUNCE_MACS`]). It tells every other agent which MACs
//! are this node's before this node ever takes an SSH IP, so a holder cut
//! off from the API server, or whose agent died, still knows whom it may
//! give way to when this node takes the SSH IP over ([`super::macs`]).
//! Owned by the Node when its uid can be read, so it goes with the node.
//!
//! Written in the background, one write at a time and at most one every
//! [`RETRY`]: the Lease loop's renewals never wait for it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::Node,
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{Api, api::PostParams};
use tokio::task::JoinHandle;

use crate::vocabulary;

/// The shortest time between two writes.
const RETRY: Duration = Duration::from_secs(5);
/// The longest a write is waited for.
const WITHIN: Duration = Duration::from_secs(5);
const PREFIX: &str = "ssh-fwd-announce-node-";

/// The Lease of node `node`; `None` for a name too long for one (a
/// Lease's name holds at most 253 characters).
pub fn name(node: &str) -> Option<String> {
    let name = format!("{PREFIX}{node}");
    (name.len() <= 253).then_some(name)
}

/// Pure: what this node's Lease should be, from `current` (as the watch
/// shows it) and this node's `macs`; `None` when it already is.
fn wanted(current: Option<&Lease>, name: &str, me: &str, macs: &str) -> Option<Lease> {
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [(
                    vocabulary::ANNOUNCE.to_owned(),
                    vocabulary::ANNOUNCE_NODE.to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    let same = spec.holder_identity.as_deref() == Some(me)
        && annotations
            .get(vocabulary::ANNOUNCE_MACS)
            .map(String::as_str)
            == Some(macs);
    if current.is_some() && same {
        return None;
    }
    spec.holder_identity = Some(me.to_owned());
    annotations.insert(vocabulary::ANNOUNCE_MACS.to_owned(), macs.to_owned());
    Some(lease)
}

/// Keeps this node's Lease.
pub struct NodeLease {
    name: Option<String>,
    me: String,
    api: Api<Lease>,
    nodes: Api<Node>,
    writing: Option<JoinHandle<()>>,
    tried: Option<Instant>,
    /// A failed write was logged; the next success says so.
    failing: Arc<AtomicBool>,
}

impl NodeLease {
    pub fn new(me: &str, api: Api<Lease>, nodes: Api<Node>) -> Self {
        let name = name(me);
        if name.is_none() {
            tracing::warn!(
                node = me,
                "the node's name is too long for a Lease name: its MACs are not published, and \
                 a holder cut off from the API server will not give way to this node"
            );
        }
        Self {
            name,
            me: me.to_owned(),
            api,
            nodes,
            writing: None,
            tried: None,
            failing: Arc::default(),
        }
    }

    /// This node's Lease's name, if it has one.
    pub fn lease_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Publishes `macs` unless `current` (the Lease as the watch shows it)
    /// holds them already.
    pub fn keep(&mut self, current: Option<&Lease>, macs: &str, now: Instant) {
        let busy = self.writing.as_ref().is_some_and(|w| !w.is_finished());
        if busy || self.tried.is_some_and(|at| now < at + RETRY) {
            return;
        }
        let Some(name) = self.name.clone() else {
            return;
        };
        let Some(lease) = wanted(current, &name, &self.me, macs) else {
            return;
        };
        self.tried = Some(now);
        let (api, nodes, me) = (self.api.clone(), self.nodes.clone(), self.me.clone());
        let failing = self.failing.clone();
        self.writing = Some(tokio::spawn(async move {
            let write = write(&api, &nodes, &me, &name, lease);
            let result = tokio::time::timeout(WITHIN, write)
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {WITHIN:?}"))
                .and_then(|written| written.with_context(|| format!("Lease {name}")));
            match result {
                Ok(()) => {
                    if failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("this node's MACs are published again");
                    }
                }
                Err(e) => {
                    if !failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "cannot publish this node's MACs on its Lease; retrying (until they \
                             are, a holder cut off from the API server will not give way to \
                             this node)"
                        );
                    }
                }
            }
        }));
    }
}

/// Creates or replaces the Lease; a new one owned by the Node when its uid
/// can be read.
async fn write(
    api: &Api<Lease>,
    nodes: &Api<Node>,
    me: &str,
    name: &str,
    mut lease: Lease,
) -> anyhow::Result<()> {
    let params = PostParams::default();
    if lease.metadata.resource_version.is_some() {
        return api
            .replace(name, &params, &lease)
            .await
            .map(drop)
            .map_err(Into::into);
    }
    if let Ok(node) = nodes.get(me).await
        && let Some(uid) = node.metadata.uid
    {
        lease.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: me.to_owned(),
            uid,
            ..OwnerReference::default()
        }]);
    }
    api.create(&params, &lease)
        .await
        .map(drop)
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MACS: &str = "02:00:00:00:00:0a";

    #[test]
    fn a_missing_lease_is_made_held_by_this_node_with_its_macs_and_a_current_one_left_alone() {
        let name = name("node-a").unwrap();
        assert_eq!(name, "ssh-fwd-announce-node-node-a");
        let fresh = wanted(None, &name, "node-a", MACS).unwrap();
        assert_eq!(fresh.metadata.name.as_deref(), Some(name.as_str()));
        let labels = fresh.metadata.labels.clone().unwrap();
        assert_eq!(labels[vocabulary::ANNOUNCE], vocabulary::ANNOUNCE_NODE);
        let spec = fresh.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
        assert_eq!(spec.lease_duration_seconds, None, "never expires");
        let mut current = fresh;
        current.metadata.resource_version = Some("7".into());
        assert!(wanted(Some(&current), &name, "node-a", MACS).is_none());
        let changed = wanted(Some(&current), &name, "node-a", "02:00:00:00:00:0b").unwrap();
        assert_eq!(changed.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            changed.metadata.annotations.unwrap()[vocabulary::ANNOUNCE_MACS],
            "02:00:00:00:00:0b"
        );
    }

    #[test]
    fn a_name_too_long_for_a_lease_has_none() {
        assert!(name(&"n".repeat(231)).is_some());
        assert!(name(&"n".repeat(232)).is_none());
    }
}
