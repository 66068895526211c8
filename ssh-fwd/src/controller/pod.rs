//! A pod as the controller keeps it: its identity, the labels and
//! annotations the plan reads, whether it is being deleted, its phase,
//! addresses and readiness.
//!
//! The watch decodes [`PodWire`] (metadata and that much status: k8s-openapi's
//! `Pod` holds room for a whole spec and status inline even when they are
//! empty, about 4.8 KB a pod), and the cache keeps the [`PodView`] made of
//! it: a pod's label and annotation maps alone were 1.8 KB, and a real
//! pod's annotations can hold a copy of the whole object.

use std::borrow::Cow;

use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use serde::{Deserialize, Serialize};

use crate::{k8s::kept::Kept, vocabulary};

/// The pod labels anything in the controller reads.
const LABELS: &[&str] = &[vocabulary::SSH, vocabulary::SERVICE];
/// The pod annotations anything in the controller reads.
const ANNOTATIONS: &[&str] = &[
    vocabulary::ENDPOINT,
    vocabulary::ANNOUNCED,
    vocabulary::TARGET_PORT,
    vocabulary::RESERVATION,
    vocabulary::ADMISSION,
    vocabulary::KEYS_SECRET,
    vocabulary::HOST_KEY_SECRET,
    vocabulary::HOST_CERTIFICATE,
    vocabulary::LAST_ACTIVITY,
    vocabulary::SSH_CONNECTIONS,
];

/// What the controller keeps of a pod. It is read and written as a pod's
/// JSON (through [`PodWire`]), so what the watch gives and what a test
/// writes are cut down alike.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(from = "PodWire", into = "PodWire")]
pub struct PodView {
    pub metadata: PodMeta,
    pub status: Option<PodPhase>,
    /// `spec.activeDeadlineSeconds`: how long the pod may run; its host
    /// certificate ends with it (the pod's creator sets it, so it only
    /// shortens what `--host-cert-validity` allows).
    pub active_deadline_seconds: Option<i64>,
}

/// Of a pod's metadata, what the controller reads.
#[derive(Clone, Debug, Default)]
pub struct PodMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// The API server's: of the pods carrying one reservation token, the
    /// oldest is the one it was made for (`reservation::binding`).
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    labels: Kept,
    annotations: Kept,
}

impl PodMeta {
    /// The label `key`, one of those kept ([`LABELS`]).
    pub fn label(&self, key: &str) -> Option<&str> {
        debug_assert!(LABELS.contains(&key), "pod label {key} is not kept");
        self.labels.get(key)
    }

    /// The annotation `key`, one of those kept ([`ANNOTATIONS`]).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        debug_assert!(
            ANNOTATIONS.contains(&key),
            "pod annotation {key} is not kept"
        );
        self.annotations.get(key)
    }
}

/// What the watch decodes of a pod: its metadata, its deadline and phase.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodWire {
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodDeadline>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodPhase>,
}

/// Of a pod's spec, its deadline (the rest is dropped as it is decoded).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDeadline {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
}

/// A pod's `activeDeadlineSeconds`, and its creation it counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    pub created: Option<std::time::SystemTime>,
    pub after: std::time::Duration,
}

impl Deadline {
    /// When the pod is expected to end: its creation (else `now`), the
    /// allowance for starting, and the deadline.
    pub fn end(self, now: std::time::SystemTime) -> std::time::SystemTime {
        self.created.unwrap_or(now) + START_ALLOWANCE + self.after
    }
}

/// How long after its creation a pod with a deadline may still be
/// starting (scheduled, images pulled) before the deadline's clock, which
/// starts when the kubelet takes it, runs.
pub const START_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(600);

/// Of a pod's status, its phase, its addresses, and its Ready condition
/// (the others are dropped as the watch decodes them).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPhase {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "ready_only"
    )]
    pub conditions: Vec<PodCondition>,
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, rename = "podIPs", skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<PodIp>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodIp {
    pub ip: String,
}

fn ready_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PodCondition>, D::Error> {
    let all = Option::<Vec<PodCondition>>::deserialize(d)?.unwrap_or_default();
    Ok(all.into_iter().filter(|c| c.type_ == "Ready").collect())
}

impl PodView {
    /// Since when the kubelet has reported the pod Ready; `None`: not
    /// Ready. A condition without its time counts from the pod's creation
    /// (`Some(None)`: neither is known).
    pub fn ready_since(&self) -> Option<Option<std::time::SystemTime>> {
        let ready = (self.status.iter())
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == "Ready" && c.status == "True")?;
        let at =
            (ready.last_transition_time.as_ref()).or(self.metadata.creation_timestamp.as_ref());
        Some(at.map(|t| std::time::SystemTime::from(t.0)))
    }

    /// The pod's deadline, `None` without one.
    pub fn deadline(&self) -> Option<Deadline> {
        let seconds = u64::try_from(self.active_deadline_seconds?).ok()?;
        Some(Deadline {
            created: (self.metadata.creation_timestamp.as_ref())
                .map(|t| std::time::SystemTime::from(t.0)),
            after: std::time::Duration::from_secs(seconds),
        })
    }

    /// The pod's addresses, of both families.
    pub fn ips(&self) -> Vec<std::net::IpAddr> {
        let Some(status) = &self.status else {
            return Vec::new();
        };
        let listed = status.pod_ips.iter().map(|p| p.ip.as_str());
        let mut ips: Vec<std::net::IpAddr> = (status.pod_ip.as_deref().into_iter())
            .chain(listed)
            .filter_map(|ip| ip.parse().ok())
            .collect();
        ips.sort_unstable();
        ips.dedup();
        ips
    }
}

impl From<PodWire> for PodView {
    fn from(pod: PodWire) -> Self {
        let meta = pod.metadata;
        Self {
            metadata: PodMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                creation_timestamp: meta.creation_timestamp,
                deletion_timestamp: meta.deletion_timestamp,
                labels: Kept::pick(meta.labels, LABELS),
                annotations: Kept::pick(meta.annotations, ANNOTATIONS),
            },
            status: pod.status,
            active_deadline_seconds: pod.spec.and_then(|s| s.active_deadline_seconds),
        }
    }
}

impl From<PodView> for PodWire {
    fn from(pod: PodView) -> Self {
        let meta = pod.metadata;
        Self {
            metadata: ObjectMeta {
                labels: meta.labels.to_map(),
                annotations: meta.annotations.to_map(),
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                creation_timestamp: meta.creation_timestamp,
                deletion_timestamp: meta.deletion_timestamp,
                ..ObjectMeta::default()
            },
            spec: (pod.active_deadline_seconds).map(|d| PodDeadline {
                active_deadline_seconds: Some(d),
            }),
            status: pod.status,
        }
    }
}

impl kube::Resource for PodWire {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

crate::k8s::kept::lookup_as!(PodView, PodWire, .metadata);

/// A pod, by what the API needs to address it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// How the API addresses `pod`.
    pub fn of(pod: &PodView) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// Labelled, not terminating, not finished.
pub fn asks_for_ssh(pod: &PodView) -> bool {
    let labelled = pod.metadata.label(vocabulary::SSH) == Some(vocabulary::SSH_ENABLED);
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    labelled && !finished && pod.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_what_the_controller_reads_and_drops_the_rest() {
        let pod: PodView = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "jobs", "uid": "u", "resourceVersion": "7",
                         "creationTimestamp": "2026-11-24T00:00:00Z",
                         "deletionTimestamp": "2026-11-25T00:00:00Z",
                         "labels": {vocabulary::SSH: "enabled", "app": "job"},
                         "annotations": {vocabulary::ENDPOINT: "h:8000",
                                         "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2026-11-24T00:00:05Z"}]}}))
        .unwrap();
        assert_eq!(pod.metadata.label(vocabulary::SSH), Some("enabled"));
        assert_eq!(
            pod.metadata.annotation(vocabulary::ENDPOINT),
            Some("h:8000")
        );
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            json!({"metadata": {"name": "p", "namespace": "jobs", "uid": "u", "resourceVersion": "7",
                                "creationTimestamp": "2026-11-24T00:00:00Z",
                                "deletionTimestamp": "2026-11-25T00:00:00Z",
                                "labels": {vocabulary::SSH: "enabled"},
                                "annotations": {vocabulary::ENDPOINT: "h:8000"}},
                   "status": {"phase": "Running", "podIP": "10.0.0.1",
                              "conditions": [{"type": "Ready", "status": "True",
                                              "lastTransitionTime": "2026-11-24T00:00:05Z"}]}})
        );
        assert_eq!(
            pod.ips(),
            vec!["10.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(
            pod.ready_since(),
            Some(crate::k8s::activity::parse_rfc3339("2026-11-24T00:00:05Z"))
        );
    }

    #[test]
    fn a_pods_deadline_is_kept_and_gives_its_expected_end() {
        let pod: PodView = serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-11-24T00:00:00Z"},
            "spec": {"activeDeadlineSeconds": 3600, "containers": [{"name": "c"}]}}))
        .unwrap();
        let created = crate::k8s::activity::parse_rfc3339("2026-11-24T00:00:00Z").unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let end = pod
            .deadline()
            .map(|d| d.end(std::time::SystemTime::UNIX_EPOCH));
        assert_eq!(end, Some(created + START_ALLOWANCE + hour));
        assert_eq!(
            serde_json::to_value(&pod).unwrap()["spec"],
            json!({"activeDeadlineSeconds": 3600}),
            "the deadline alone"
        );
        assert_eq!(PodView::default().deadline(), None);
    }

    #[test]
    fn the_cache_files_a_kept_pod_as_a_pod_by_its_identity() {
        use kube::runtime::reflector::Lookup;
        assert_eq!(
            (
                PodView::kind(&()),
                PodView::group(&()),
                PodView::plural(&())
            ),
            ("Pod".into(), "".into(), "pods".into())
        );
        let pod: PodView = serde_json::from_value(json!({"metadata": {
            "name": "p", "namespace": "jobs", "uid": "u", "resourceVersion": "7"}}))
        .unwrap();
        assert_eq!(
            (
                pod.name(),
                pod.namespace(),
                pod.uid(),
                pod.resource_version()
            ),
            (
                Some("p".into()),
                Some("jobs".into()),
                Some("u".into()),
                Some("7".into())
            )
        );
    }

    #[test]
    #[should_panic(expected = "pod annotation app is not kept")]
    fn reading_a_key_that_is_not_kept_is_a_bug_caught_in_tests() {
        PodView::default().metadata.annotation("app");
    }
}
