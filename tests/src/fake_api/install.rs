//! `kubectl apply -f` of a rendered install on a fresh cluster, played
//! against the fake API server: each object created in the file's order,
//! with the checks kube-apiserver makes of any object. Its kind must be
//! served (built in, or from a CRD installed first: kubectl's "no matches
//! for kind"); a namespaced object's Namespace must exist already (the
//! NamespaceLifecycle admission plugin), so a file that creates a
//! Namespace after its objects fails here as on a cluster; the name must
//! be a DNS subdomain and not taken. Kinds the server models (ConfigMaps,
//! Services, webhooks) go through its own validation; RBAC objects and
//! admission policies are also taken into a [`Cluster`], where a policy
//! whose CEL does not compile is refused. Objects of other kinds are kept
//! as sent, without their schema checked (ssh-fwd/tests/deploy checks
//! each against its type).

use serde_json::Value;

use super::{Cluster, FakeApi, Kind, store::key_of, validation::dns_subdomain};

/// A kind the API server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKind {
    pub api_version: String,
    pub kind: String,
    pub namespaced: bool,
}

impl ApiKind {
    pub fn new(api_version: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespaced,
        }
    }
}

/// The built-in kinds an install of ssh-fwd may hold: (apiVersion, kind,
/// namespaced).
const BUILT_IN: [(&str, &str, bool); 20] = [
    ("v1", "Namespace", false),
    ("v1", "ServiceAccount", true),
    ("v1", "ConfigMap", true),
    ("v1", "Secret", true),
    ("v1", "Service", true),
    ("rbac.authorization.k8s.io/v1", "Role", true),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", true),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", false),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", false),
    ("apps/v1", "DaemonSet", true),
    ("apps/v1", "Deployment", true),
    ("batch/v1", "Job", true),
    ("policy/v1", "PodDisruptionBudget", true),
    ("networking.k8s.io/v1", "NetworkPolicy", true),
    ("coordination.k8s.io/v1", "Lease", true),
    (
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        false,
    ),
    ("discovery.k8s.io/v1", "EndpointSlice", true),
];

/// The kind this server stores and validates itself, if it does.
fn modelled(api_version: &str, kind: &str) -> Option<Kind> {
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    Kind::ALL
        .into_iter()
        .find(|k| k.group() == group && format!("{k:?}") == kind)
}

/// What an install left on the cluster.
#[derive(Debug)]
pub struct Installed {
    /// How many objects were created.
    pub created: usize,
    /// Kubernetes' bootstrap roles with the install's RBAC and admission
    /// policies, for [`FakeApi::enforce`].
    pub cluster: Cluster,
}

impl FakeApi {
    /// Creates `objects` in order, as `kubectl apply` does on a cluster
    /// that has none of them and serves the kinds of `crds` besides the
    /// built-in ones. The first refusal ends it, with the object it names
    /// and the API server's reason.
    pub fn install(&self, objects: &[Value], crds: &[ApiKind]) -> Result<Installed, String> {
        let mut cluster = Cluster::bootstrap()?;
        for (at, object) in objects.iter().enumerate() {
            let what = format!(
                "object {at} ({} {})",
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["name"]
            );
            self.install_one(object.clone(), crds, &mut cluster)
                .map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(Installed {
            created: objects.len(),
            cluster,
        })
    }

    fn install_one(
        &self,
        mut object: Value,
        crds: &[ApiKind],
        cluster: &mut Cluster,
    ) -> Result<(), String> {
        let api_version = object["apiVersion"].as_str().unwrap_or("").to_owned();
        let kind = object["kind"].as_str().unwrap_or("").to_owned();
        let namespaced = BUILT_IN
            .iter()
            .find(|(v, k, _)| *v == api_version && *k == kind)
            .map(|(.., namespaced)| *namespaced)
            .or_else(|| {
                (crds.iter())
                    .find(|c| c.api_version == api_version && c.kind == kind)
                    .map(|c| c.namespaced)
            })
            .ok_or_else(|| {
                format!(
                    "no matches for kind \"{kind}\" in version \"{api_version}\"; ensure CRDs \
                     are installed first"
                )
            })?;
        let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Some(cause) = dns_subdomain(&name).into_iter().next() {
            return Err(format!("422 Invalid: {cause}"));
        }
        let mut store = self.shared.store();
        if namespaced {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let exists = namespace == "default"
                || store.others.contains_key(&(
                    "v1".to_owned(),
                    "Namespace".to_owned(),
                    format!("/{namespace}"),
                ));
            if !exists {
                return Err(format!(
                    "404 NotFound: namespaces \"{namespace}\" not found"
                ));
            }
            object["metadata"]["namespace"] = namespace.into();
        } else if let Some(metadata) = object["metadata"].as_object_mut() {
            // kubectl and the API server drop it on a cluster-scoped kind.
            metadata.remove("namespace");
        }
        cluster.add(&object)?;
        if let Some(modelled) = modelled(&api_version, &kind) {
            let (_, changes) = store
                .create(modelled, object)
                .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))?;
            self.shared.publish(&store, changes);
            return Ok(());
        }
        let key = (api_version, kind.clone(), key_of(&object));
        if store.others.contains_key(&key) {
            return Err(format!(
                "409 AlreadyExists: {kind} \"{}\" already exists",
                key.2
            ));
        }
        store.others.insert(key, object);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn namespace(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    }

    fn account(namespace: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "agent", "namespace": namespace}})
    }

    #[test]
    fn a_namespaced_object_before_its_namespace_is_refused() {
        let api = FakeApi::start_on_loopback().unwrap();
        let error = api
            .install(&[account("ssh-fwd"), namespace("ssh-fwd")], &[])
            .unwrap_err();
        assert!(
            error.contains("namespaces \"ssh-fwd\" not found"),
            "{error}"
        );
        let api = FakeApi::start_on_loopback().unwrap();
        let installed = api
            .install(&[namespace("ssh-fwd"), account("ssh-fwd")], &[])
            .unwrap();
        assert_eq!(installed.created, 2);
    }

    #[test]
    fn a_kind_without_its_crd_a_bad_name_or_a_second_copy_is_refused() {
        let api = FakeApi::start_on_loopback().unwrap();
        let monitor = json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
                             "metadata": {"name": "agent", "namespace": "default"}});
        let error = api
            .install(std::slice::from_ref(&monitor), &[])
            .unwrap_err();
        assert!(error.contains("ensure CRDs are installed first"), "{error}");
        let crd = ApiKind::new("monitoring.coreos.com/v1", "PodMonitor", true);
        let crds = std::slice::from_ref(&crd);
        assert!(api.install(std::slice::from_ref(&monitor), crds).is_ok());
        let error = api.install(&[monitor], crds).unwrap_err();
        assert!(error.contains("409 AlreadyExists"), "{error}");
        let error = api.install(&[namespace("Not_A_Name")], &[]).unwrap_err();
        assert!(error.contains("422 Invalid"), "{error}");
    }

    #[test]
    fn a_modelled_kind_is_validated_and_served() {
        let api = FakeApi::start_on_loopback().unwrap();
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "settings", "namespace": "ssh-fwd"},
                            "data": {"bad key!": "x"}});
        let error = api
            .install(&[namespace("ssh-fwd"), config.clone()], &[])
            .unwrap_err();
        assert!(error.contains("422"), "{error}");
        let mut good = config;
        good["data"] = json!({"SSH_IP": "192.0.2.10"});
        api.install(&[good], &[]).unwrap();
        assert!(api.get(Kind::ConfigMap, "ssh-fwd", "settings").is_some());
    }
}
