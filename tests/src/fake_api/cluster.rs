//! What a cluster enforces on the fake API once a test turns enforcement
//! on ([`super::FakeApi::enforce`]): the RBAC objects and the validating
//! admission policies, from Kubernetes' bootstrap roles, deploy/base as
//! kustomize renders it (namespace `ssh-fwd` on its namespaced objects),
//! and what a test adds (a tenant's RoleBinding).

use std::path::Path;

use serde_json::{Value, json};

use super::{admission::Policies, rbac::Rbac};

/// deploy/, from this crate.
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
/// The namespace deploy/base's kustomization puts its objects in.
pub const DEPLOY_NAMESPACE: &str = "ssh-fwd";
const BOOTSTRAP_ROLES: &str = include_str!("bootstrap-roles.yaml");

/// Kinds with no namespace, as kustomize knows them.
const CLUSTER_SCOPED: [&str; 7] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// RBAC and admission policies of one cluster.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub rbac: Rbac,
    pub policies: Policies,
}

fn documents(text: &str, what: &str) -> Result<Vec<Value>, String> {
    serde_saphyr::from_multiple::<Value>(text)
        .map(|docs| docs.into_iter().filter(|d| !d.is_null()).collect())
        .map_err(|e| format!("{what}: {e}"))
}

impl Cluster {
    /// Kubernetes' bootstrap ClusterRoles (cluster-admin, admin, edit,
    /// view) and nothing else.
    pub fn bootstrap() -> Result<Self, String> {
        let mut cluster = Self::default();
        for doc in documents(BOOTSTRAP_ROLES, "bootstrap-roles.yaml")? {
            cluster.add(&doc)?;
        }
        Ok(cluster)
    }

    /// The bootstrap roles and deploy/base's RBAC and policies.
    pub fn deploy() -> Result<Self, String> {
        let mut cluster = Self::bootstrap()?;
        for doc in deploy_base()? {
            cluster.add(&doc)?;
        }
        Ok(cluster)
    }

    /// Takes in an RBAC object or an admission policy (others are not
    /// this module's business and are left out).
    pub fn add(&mut self, doc: &Value) -> Result<(), String> {
        if !self.rbac.add(doc)? {
            self.policies.add(doc)?;
        }
        Ok(())
    }

    /// Binds `user` to ClusterRole `role` in `namespace`, as a platform
    /// gives a tenant its namespace.
    pub fn bind_in(&mut self, namespace: &str, user: &str, role: &str) -> Result<(), String> {
        self.add(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{role}-{user}"), "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
    }
}

/// deploy/base's objects as `kubectl apply -k` sends them: every file its
/// kustomization lists, and the ConfigMaps of its configMapGenerator
/// (`envs` files; named without the hash kustomize appends), namespaced
/// kinds in its namespace.
pub fn deploy_base() -> Result<Vec<Value>, String> {
    let dir = Path::new(DEPLOY).join("base");
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let kustomization = documents(&read("kustomization.yaml")?, "kustomization.yaml")?;
    let kustomization = kustomization.first().cloned().unwrap_or(Value::Null);
    let namespace = kustomization["namespace"].as_str().unwrap_or("default");
    let mut docs = Vec::new();
    for file in kustomization["resources"].as_array().into_iter().flatten() {
        let file = file.as_str().unwrap_or("");
        for mut doc in documents(&read(file)?, file)? {
            let kind = doc["kind"].as_str().unwrap_or("");
            if !CLUSTER_SCOPED.contains(&kind) {
                doc["metadata"]["namespace"] = json!(namespace);
            }
            docs.push(doc);
        }
    }
    for generator in kustomization["configMapGenerator"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut data = serde_json::Map::new();
        for file in generator["envs"].as_array().into_iter().flatten() {
            let file = file.as_str().unwrap_or("");
            for line in read(file)?.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (key, value) = line
                    .split_once('=')
                    .ok_or_else(|| format!("{file}: `{line}` is not KEY=VALUE"))?;
                data.insert(key.to_owned(), json!(value));
            }
        }
        docs.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": generator["name"], "namespace": namespace},
            "data": data,
        }));
    }
    Ok(docs)
}
