//! The node's activity, published for the controller in Kubernetes mode:
//! the ConfigMap `ssh-fwd-activity-NODE` of the agent's namespace
//! ([`crate::k8s::activity`]), written when what it would hold changed and
//! at most once per `--activity-interval`, created if absent. It is owned
//! by the node's Node object when the agent can read its uid, so it goes
//! with the node; an agent without that permission creates it unowned and
//! it stays until removed by hand.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use anyhow::Context as _;
use k8s_openapi::{
    api::core::v1::{ConfigMap, Node},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::{Map, Value, json};

use super::Board;
use crate::{
    datapath::conntrack::activity::Activity,
    k8s::activity::{Report, config_map_name, data_key},
    vocabulary,
};

/// The ConfigMap's data for `activity`: a key for each frontend, of either
/// family, that carried a packet or holds a connection.
pub fn data(activity: &BTreeMap<SocketAddr, Activity>) -> BTreeMap<String, String> {
    activity
        .iter()
        .filter(|(_, a)| a.last.is_some() || a.open > 0)
        .map(|(frontend, a)| {
            let report = serde_json::to_string(&Report::new(a.last, a.open)).unwrap_or_default();
            (data_key(frontend.ip(), frontend.port()), report)
        })
        .collect()
}

/// The JSON merge patch that turns a ConfigMap whose data has the keys
/// `old` into one whose data is `new`: a key gone is set to null, which
/// removes it (RFC 7386).
pub fn merge_patch(old: &BTreeSet<String>, new: &BTreeMap<String, String>) -> Value {
    let mut data: Map<String, Value> = old
        .iter()
        .filter(|k| !new.contains_key(*k))
        .map(|k| (k.clone(), Value::Null))
        .collect();
    data.extend(new.iter().map(|(k, v)| (k.clone(), json!(v))));
    json!({ "data": data })
}

/// Starts publishing in Kubernetes mode with `--node-name`; `None` (and
/// why, told) otherwise.
pub fn spawn(
    args: &crate::agent::AgentArgs,
    client: Option<kube::Client>,
    board: &Board,
) -> Option<tokio::task::JoinHandle<()>> {
    let client = client?;
    let Some(node) = args.node_name.clone() else {
        tracing::info!(
            "no --node-name (NODE_NAME): this node's SSH activity is in /metrics only, and the \
             controller cannot mirror it onto pods"
        );
        return None;
    };
    Some(tokio::spawn(run(
        client,
        node,
        args.activity_interval,
        board.clone(),
    )))
}

/// Publishes `board` for ever; a failed write is told once and tried
/// again at the next interval.
pub async fn run(client: kube::Client, node: String, every: Duration, board: Board) {
    let target = Target {
        api: Api::default_namespaced(client.clone()),
        nodes: Api::all(client),
        name: config_map_name(&node),
        node,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the ConfigMap holds, as far as this agent knows.
    let mut written: Option<BTreeMap<String, String>> = None;
    let mut failing = false;
    loop {
        tick.tick().await;
        // Before the first sweep nothing is known: writing would say that
        // nothing is open.
        let Some(activity) = board.snapshot() else {
            continue;
        };
        let data = data(&activity);
        if written.as_ref() == Some(&data) {
            continue;
        }
        match target.write(written.as_ref(), &data).await {
            Ok(()) => {
                written = Some(data);
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        config_map = target.name,
                        "cannot publish this node's SSH activity; the controller keeps the \
                         pods' last-activity annotations as they are until it works (retrying)"
                    );
                }
                failing = true;
                written = None;
            }
        }
    }
}

struct Target {
    api: Api<ConfigMap>,
    nodes: Api<Node>,
    name: String,
    node: String,
}

impl Target {
    /// Makes the ConfigMap's data `data`; `written`, what it holds if
    /// known (else it is read first).
    async fn write(
        &self,
        written: Option<&BTreeMap<String, String>>,
        data: &BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let what = || format!("ConfigMap {}", self.name);
        let old: BTreeSet<String> = match written {
            Some(w) => w.keys().cloned().collect(),
            // What an earlier agent left is replaced whole: its open
            // connections may have closed since.
            None => match self.api.get_opt(&self.name).await.with_context(what)? {
                Some(cm) => cm.data.unwrap_or_default().into_keys().collect(),
                None if data.is_empty() => return Ok(()),
                None => return self.create(data).await,
            },
        };
        let patch = Patch::Merge(merge_patch(&old, data));
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(()),
            // Deleted behind our back.
            Err(kube::Error::Api(e)) if e.code == 404 => self.create(data).await,
            Err(e) => Err(e).with_context(what),
        }
    }

    async fn create(&self, data: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(
                    [(
                        vocabulary::ACTIVITY.to_owned(),
                        vocabulary::ACTIVITY_FROM.to_owned(),
                    )]
                    .into(),
                ),
                owner_references: self.owner().await.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            data: Some(data.clone()),
            ..ConfigMap::default()
        };
        self.api
            .create(&PostParams::default(), &cm)
            .await
            .with_context(|| format!("creating ConfigMap {}", self.name))?;
        Ok(())
    }

    /// The node's Node as the ConfigMap's owner; `None` (told) when it
    /// cannot be read.
    async fn owner(&self) -> Option<OwnerReference> {
        match self.nodes.get(&self.node).await {
            Ok(node) => Some(OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.node.clone(),
                uid: node.metadata.uid?,
                ..OwnerReference::default()
            }),
            Err(e) => {
                tracing::info!(
                    error = %e,
                    node = self.node,
                    "cannot read this node's Node: its activity ConfigMap is made without an \
                     owner and stays when the node goes (grant `get` on nodes to collect it)"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{net::Ipv4Addr, time::SystemTime};

    use super::*;

    #[test]
    fn data_holds_frontends_with_a_packet_or_a_connection() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let ip = Ipv4Addr::new(203, 0, 113, 10);
        let activity = [
            (
                SocketAddr::from((ip, 2222)),
                Activity {
                    open: 1,
                    last: Some(at),
                },
            ),
            (
                SocketAddr::from((ip, 2223)),
                Activity {
                    open: 0,
                    last: None,
                },
            ),
        ]
        .into();
        let data = data(&activity);
        assert_eq!(
            data,
            [(
                "203.0.113.10_2222".to_owned(),
                r#"{"lastActivity":"2026-01-02T03:04:05Z","openConnections":1}"#.to_owned()
            )]
            .into()
        );
    }

    #[test]
    fn an_ipv6_frontend_is_reported_beside_an_ipv4_one() {
        let ip6 = std::net::Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10);
        let activity = [
            (
                SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), 2222)),
                Activity {
                    open: 1,
                    last: None,
                },
            ),
            (
                SocketAddr::from((ip6, 2222)),
                Activity {
                    open: 2,
                    last: None,
                },
            ),
        ]
        .into();
        let data = data(&activity);
        assert_eq!(
            data,
            [
                (
                    "203.0.113.10_2222".to_owned(),
                    r#"{"openConnections":1}"#.to_owned()
                ),
                (
                    "fd00-198--10_2222".to_owned(),
                    r#"{"openConnections":2}"#.to_owned()
                ),
            ]
            .into()
        );
    }

    #[test]
    fn a_merge_patch_removes_the_keys_gone_and_sets_the_others() {
        let old = ["a".to_owned(), "b".to_owned()].into();
        let new = [
            ("b".to_owned(), "2".to_owned()),
            ("c".to_owned(), "3".to_owned()),
        ]
        .into();
        assert_eq!(
            merge_patch(&old, &new),
            json!({"data": {"a": null, "b": "2", "c": "3"}})
        );
    }
}
