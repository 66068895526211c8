//! deploy/ as kustomize renders it: the real kustomize (kubectl's, or a
//! `kustomize` on the PATH), so what refuses to build here refuses in a
//! cluster too; and each object checked against its Kubernetes type.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use k8s_openapi::{
    api::{
        admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingAdmissionPolicy,
            ValidatingAdmissionPolicyBinding,
        },
        apps::v1::{DaemonSet, Deployment},
        batch::v1::Job,
        core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount},
        networking::v1::NetworkPolicy,
        policy::v1::PodDisruptionBudget,
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    serde::{Serialize, de::DeserializeOwned},
};
use serde_json::Value;

pub const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
pub const NAMESPACE: &str = "ssh-fwd";

/// Kinds of other projects' CRDs (cert-manager, the Prometheus operator):
/// not checked against a type here.
const FOREIGN_KINDS: [&str; 5] = [
    "Certificate",
    "Issuer",
    "PodMonitor",
    "ServiceMonitor",
    "PrometheusRule",
];

pub fn documents_of(text: &str, what: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

pub fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    documents_of(&text, &path.display().to_string())
}

/// `kustomize build dir`, with kustomize's own or kubectl's.
fn build(dir: &Path) -> Result<String, String> {
    let mut command = match ssh_fwd_tests::privilege::which("kustomize") {
        Some(kustomize) => {
            let mut c = Command::new(kustomize);
            c.arg("build");
            c
        }
        None => {
            let mut c = Command::new("kubectl");
            c.arg("kustomize");
            c
        }
    };
    let out = command.arg(dir).output().map_err(|e| {
        format!(
            "running kubectl kustomize: {e}; these tests need kubectl (1.27 or newer) or \
             kustomize 5 on the PATH"
        )
    })?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `kubectl apply -k deploy/<dir>` sends.
pub fn render(dir: &str) -> Vec<Value> {
    let path = Path::new(DEPLOY).join(dir);
    let text = build(&path).unwrap_or_else(|e| panic!("kustomize build deploy/{dir}: {e}"));
    documents_of(&text, dir)
}

/// `kustomization` (YAML) written to a directory of its own and built;
/// `DEPLOY` in it stands for deploy/ (kustomize takes only relative
/// paths).
pub fn render_kustomization(name: &str, kustomization: &str) -> Result<Vec<Value>, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("deploy-renders")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let deploy = relative_from(&dir, &Path::new(DEPLOY).canonicalize().unwrap());
    std::fs::write(
        dir.join("kustomization.yaml"),
        kustomization.replace("DEPLOY", &deploy),
    )
    .unwrap();
    let text = build(&dir)?;
    Ok(documents_of(&text, name))
}

/// `to` as a path relative to `from` (both absolute).
fn relative_from(from: &Path, to: &Path) -> String {
    let from = from.canonicalize().unwrap();
    let up = from.components().count() - 1;
    let down = to.strip_prefix("/").unwrap();
    format!("{}{}", "../".repeat(up), down.display())
}

/// Parses `doc` as `T` and fails on any field `T` does not have: whatever
/// the typed round trip drops was unknown (a typo, or a wrong level).
pub fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<T, String> {
    let parsed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    known_fields(doc, &back, "")?;
    Ok(parsed)
}

fn known_fields(original: &Value, round: &Value, at: &str) -> Result<(), String> {
    match (original, round) {
        (Value::Object(a), Value::Object(b)) => a.iter().try_for_each(|(k, v)| match b.get(k) {
            Some(w) => known_fields(v, w, &format!("{at}.{k}")),
            None => Err(format!("unknown field {at}.{k}")),
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (v, w))| known_fields(v, w, &format!("{at}[{i}]"))),
        (a, b) if a == b => Ok(()),
        // Scalars the type normalises (e.g. a port given as a string).
        (Value::String(a), b) if b.as_str().is_none() && a == &b.to_string() => Ok(()),
        (a, b) => Err(format!("{at}: {a} became {b}")),
    }
}

pub fn check_kind(doc: &Value) -> Result<(), String> {
    match doc["kind"].as_str().unwrap_or("") {
        "Namespace" => typed::<Namespace>(doc).map(drop),
        "ConfigMap" => typed::<ConfigMap>(doc).map(drop),
        "ServiceAccount" => typed::<ServiceAccount>(doc).map(drop),
        "ClusterRole" => typed::<ClusterRole>(doc).map(drop),
        "ClusterRoleBinding" => typed::<ClusterRoleBinding>(doc).map(drop),
        "Role" => typed::<Role>(doc).map(drop),
        "RoleBinding" => typed::<RoleBinding>(doc).map(drop),
        "DaemonSet" => typed::<DaemonSet>(doc).map(drop),
        "Deployment" => typed::<Deployment>(doc).map(drop),
        "PodDisruptionBudget" => typed::<PodDisruptionBudget>(doc).map(drop),
        "Pod" => typed::<Pod>(doc).map(drop),
        "Job" => typed::<Job>(doc).map(drop),
        "Service" => typed::<Service>(doc).map(drop),
        "MutatingWebhookConfiguration" => typed::<MutatingWebhookConfiguration>(doc).map(drop),
        "ValidatingAdmissionPolicy" => typed::<ValidatingAdmissionPolicy>(doc).map(drop),
        "ValidatingAdmissionPolicyBinding" => {
            typed::<ValidatingAdmissionPolicyBinding>(doc).map(drop)
        }
        "NetworkPolicy" => typed::<NetworkPolicy>(doc).map(drop),
        other if FOREIGN_KINDS.contains(&other) => Ok(()),
        other => Err(format!("no check for kind {other}")),
    }
}

pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

/// The one ConfigMap of the shared settings, whatever hash kustomize
/// gave its name.
pub fn shared_config(docs: &[Value]) -> ConfigMap {
    let mut found = docs.iter().filter(|d| {
        d["kind"] == "ConfigMap"
            && d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ssh-fwd-config-"))
    });
    let config = found.next().expect("the ConfigMap ssh-fwd-config-<hash>");
    assert!(found.next().is_none(), "one shared ConfigMap");
    typed(config).unwrap()
}
