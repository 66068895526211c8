//! A ConfigMap an agent writes about its own node (`PREFIX-NODE` in the
//! agent's namespace, labelled for the controller's watch): its SSH
//! activity ([`super::activity::publish`]) and what its data path serves
//! ([`super::served`]). Written with JSON merge patches of the keys that
//! changed, created when absent, and owned by the node's Node object when
//! the agent can read its uid, so it goes with the node; an agent without
//! that permission creates it unowned and it stays until removed by hand.

use std::collections::{BTreeMap, BTreeSet};

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

use crate::vocabulary;

pub struct NodeConfigMap {
    api: Api<ConfigMap>,
    nodes: Api<Node>,
    name: String,
    node: String,
    /// The label the controller's watch selects on.
    label: &'static str,
}

impl NodeConfigMap {
    /// The ConfigMap `name` of `node`'s agent in `api`'s namespace,
    /// labelled `label` (with the value
    /// [`ACTIVITY_FROM`](vocabulary::ACTIVITY_FROM)).
    pub fn new(
        client: kube::Client,
        api: Api<ConfigMap>,
        name: String,
        node: String,
        label: &'static str,
    ) -> Self {
        Self {
            api,
            nodes: Api::all(client),
            name,
            node,
            label,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the ConfigMap's data `data`; `known`, the keys it holds if
    /// known (else it is read first, and what an earlier agent left is
    /// replaced whole).
    pub async fn replace(
        &self,
        known: Option<&BTreeSet<String>>,
        data: &BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let what = || format!("ConfigMap {}", self.name);
        let old: BTreeSet<String> = match known {
            Some(keys) => keys.clone(),
            None => match self.api.get_opt(&self.name).await.with_context(what)? {
                Some(cm) => cm.data.unwrap_or_default().into_keys().collect(),
                None if data.is_empty() => return Ok(()),
                None => return self.create(data).await,
            },
        };
        let changes = merge_patch(&old, data);
        self.patch(&changes, || data.clone()).await
    }

    /// Applies `patch` (a JSON merge patch of the data); a ConfigMap
    /// deleted behind our back is made again with `whole()`.
    pub async fn patch(
        &self,
        patch: &Value,
        whole: impl FnOnce() -> BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        let patch = Patch::Merge(patch);
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => self.create(&whole()).await,
            Err(e) => Err(e).with_context(|| format!("ConfigMap {}", self.name)),
        }
    }

    async fn create(&self, data: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(
                    [(self.label.to_owned(), vocabulary::ACTIVITY_FROM.to_owned())].into(),
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
                    config_map = self.name,
                    "cannot read this node's Node: the ConfigMap is made without an owner and \
                     stays when the node goes (grant `get` on nodes to collect it)"
                );
                None
            }
        }
    }
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

/// The JSON merge patch that sets the keys of `changes` that hold a value
/// and removes those that hold none.
pub fn changes_patch(changes: &BTreeMap<String, Option<String>>) -> Value {
    let data: Map<String, Value> = changes
        .iter()
        .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
        .collect();
    json!({ "data": data })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_changes_patch_sets_and_removes_only_what_it_names() {
        let changes = [
            ("a".to_owned(), None),
            ("b".to_owned(), Some("2".to_owned())),
        ]
        .into();
        assert_eq!(
            changes_patch(&changes),
            json!({"data": {"a": null, "b": "2"}})
        );
    }
}
