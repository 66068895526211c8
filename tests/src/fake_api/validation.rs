//! What kube-apiserver's validation refuses of the objects ssh-fwd writes,
//! checked on create and answered as it answers them: 422 Invalid, the
//! message `KIND "NAME" is invalid: FIELD: ...` with each cause. Only the
//! rules a client of this fake could break are here; anything else is
//! taken as it comes.

use serde_json::Value;

use super::{Kind, status::ApiError};

/// events.k8s.io/v1: the longest `note`, in bytes.
pub const NOTE_LIMIT: usize = 1024;

/// Refuses `object` as the API server would refuse its create (its name
/// made from generateName already).
pub fn on_create(kind: Kind, object: &Value) -> Result<(), ApiError> {
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let causes = match kind {
        Kind::Event => event(object),
        Kind::Pod => [dns_subdomain(name), pod(object)].concat(),
        Kind::Lease => dns_subdomain(name),
        Kind::Service => dns_label_1035(name),
        Kind::ConfigMap => [dns_subdomain(name), config_map(object)].concat(),
        _ => Vec::new(),
    };
    if causes.is_empty() {
        return Ok(());
    }
    let causes = match causes.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("{} \"{name}\" is invalid: {causes}", shown(kind)),
    })
}

/// An update (a patch too) that changes `metadata.uid`: refused by the
/// validation of object metadata as a change of an immutable field, 422.
/// Unlike a delete's or a PUT's preconditions, this is no conflict.
pub fn uid_unchanged(kind: Kind, current: &Value, patched_uid: &Value) -> Result<(), ApiError> {
    let Some(uid) = patched_uid.as_str() else {
        return Ok(());
    };
    if Some(uid) == current["metadata"]["uid"].as_str() {
        return Ok(());
    }
    let name = current["metadata"]["name"].as_str().unwrap_or("");
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!(
            "{} \"{name}\" is invalid: metadata.uid: Invalid value: \"{uid}\": field is immutable",
            shown(kind)
        ),
    })
}

/// The kind as the API server names it in a message.
fn shown(kind: Kind) -> String {
    let name = match kind {
        Kind::Service => "Service",
        Kind::EndpointSlice => "EndpointSlice",
        Kind::Pod => "Pod",
        Kind::Lease => "Lease",
        Kind::Event => "Event",
        Kind::Secret => "Secret",
        Kind::ConfigMap => "ConfigMap",
        Kind::MutatingWebhookConfiguration => "MutatingWebhookConfiguration",
        Kind::Node => "Node",
    };
    match kind.group() {
        "" => name.to_owned(),
        group => format!("{name}.{group}"),
    }
}

fn event(event: &Value) -> Vec<String> {
    let note = event["note"].as_str().unwrap_or("");
    if note.len() > NOTE_LIMIT {
        return vec![format!(
            "note: Invalid value: \"\": can have at most {NOTE_LIMIT} characters"
        )];
    }
    Vec::new()
}

/// `metadata.name` as Pods, Leases (and most kinds) need it: a lowercase
/// RFC 1123 subdomain of at most 253 characters.
pub(super) fn dns_subdomain(name: &str) -> Vec<String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let mut causes = Vec::new();
    if name.len() > 253 {
        causes.push(format!(
            "metadata.name: Invalid value: {name:?}: must be no more than 253 characters"
        ));
    }
    if !name.split('.').all(label_ok) {
        causes.push(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ));
    }
    causes
}

/// A ConfigMap's `data` keys: each `[-._a-zA-Z0-9]+`, at most 253
/// characters (`IsConfigMapKey`).
fn config_map(object: &Value) -> Vec<String> {
    let Some(data) = object["data"].as_object() else {
        return Vec::new();
    };
    data.keys()
        .filter(|key| {
            key.is_empty()
                || key.len() > 253
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        })
        .map(|key| {
            format!(
                "data[{key}]: Invalid value: {key:?}: a valid config key must consist of \
                 alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or \
                 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
            )
        })
        .collect()
}

/// `metadata.name` as a Service needs it: an RFC 1035 label (a letter
/// first), at most 63 characters.
fn dns_label_1035(name: &str) -> Vec<String> {
    let mut causes = Vec::new();
    if name.len() > 63 {
        causes.push(format!(
            "metadata.name: Invalid value: {name:?}: must be no more than 63 characters"
        ));
    }
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-');
    if !ok {
        causes.push(format!(
            "metadata.name: Invalid value: {name:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ));
    }
    causes
}

/// The container lists of a pod spec with their field names.
const LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// What the pod validation refuses that a mutating webhook can get wrong:
/// container names used twice (in any of the lists: an init container is
/// reported when a regular one has its name), volume names used twice, a
/// mount of a volume the pod does not have, two mounts on one path in a
/// container, and a container `restartPolicy` other than `Always`,
/// `OnFailure` or `Never`. A regular container may set one since
/// Kubernetes 1.35 (ContainerRestartRules, beta, on by default), so only
/// its value is checked.
fn pod(pod: &Value) -> Vec<String> {
    let spec = &pod["spec"];
    let items = |field: &str| spec[field].as_array().cloned().unwrap_or_default();
    let mut causes = Vec::new();
    let declared = items("volumes");
    let mut volumes = std::collections::BTreeSet::new();
    for (i, volume) in declared.iter().enumerate() {
        let name = volume["name"].as_str().unwrap_or("");
        if !volumes.insert(name) {
            causes.push(format!("spec.volumes[{i}].name: Duplicate value: {name:?}"));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    // The API server checks regular containers first, then the others
    // against them.
    let order = [LISTS[0], LISTS[1], LISTS[2]];
    for list in order {
        for (i, c) in items(list).iter().enumerate() {
            let at = format!("spec.{list}[{i}]");
            let name = c["name"].as_str().unwrap_or("");
            if !names.insert(name.to_owned()) {
                causes.push(format!("{at}.name: Duplicate value: {name:?}"));
            }
            if let Some(policy) = c["restartPolicy"].as_str()
                && !["Always", "OnFailure", "Never"].contains(&policy)
            {
                causes.push(format!(
                    "{at}.restartPolicy: Unsupported value: {policy:?}: supported values: \"Always\", \"Never\", \"OnFailure\""
                ));
            }
            causes.extend(mounts(c, &at, &volumes));
        }
    }
    causes
}

fn mounts(container: &Value, at: &str, volumes: &std::collections::BTreeSet<&str>) -> Vec<String> {
    let mut causes = Vec::new();
    let mut paths = std::collections::BTreeSet::new();
    let mounts = container["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, mount) in mounts.iter().enumerate() {
        let name = mount["name"].as_str().unwrap_or("");
        if !volumes.contains(name) {
            causes.push(format!("{at}.volumeMounts[{i}].name: Not found: {name:?}"));
        }
        let path = mount["mountPath"].as_str().unwrap_or("");
        if !paths.insert(path) {
            causes.push(format!(
                "{at}.volumeMounts[{i}].mountPath: Invalid value: {path:?}: must be unique"
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(kind: Kind, object: &Value) -> String {
        let error = on_create(kind, object).expect_err("refused");
        assert_eq!((error.code, error.reason), (422, "Invalid"));
        error.message
    }

    /// A pod an admission webhook like ours leaves: containers, an init
    /// container, a sidecar, volumes and their mounts.
    fn pod() -> Value {
        json!({"metadata": {"name": "job-1", "namespace": "jobs"},
               "spec": {
                   "volumes": [{"name": "data", "emptyDir": {}}, {"name": "keys", "emptyDir": {}}],
                   "initContainers": [
                       {"name": "install", "image": "i",
                        "volumeMounts": [{"name": "keys", "mountPath": "/k"}]},
                       {"name": "watch", "image": "i", "restartPolicy": "Always",
                        "volumeMounts": [{"name": "keys", "mountPath": "/k"}]}],
                   "containers": [
                       {"name": "main", "image": "m",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                         {"name": "keys", "mountPath": "/etc/k", "subPath": "k"}]},
                       {"name": "sshd", "image": "s"}]}})
    }

    #[test]
    fn a_valid_pod_is_taken() {
        assert!(on_create(Kind::Pod, &pod()).is_ok());
    }

    #[test]
    fn a_container_name_used_twice_is_refused_across_containers_and_init_containers() {
        let mut twice = pod();
        twice["spec"]["containers"][1]["name"] = json!("main");
        assert_eq!(
            refused(Kind::Pod, &twice),
            "Pod \"job-1\" is invalid: spec.containers[1].name: Duplicate value: \"main\""
        );
        let mut across = pod();
        across["spec"]["initContainers"][0]["name"] = json!("sshd");
        assert!(
            refused(Kind::Pod, &across)
                .ends_with("spec.initContainers[0].name: Duplicate value: \"sshd\"")
        );
    }

    #[test]
    fn a_volume_name_used_twice_is_refused() {
        let mut twice = pod();
        twice["spec"]["volumes"][1]["name"] = json!("data");
        let message = refused(Kind::Pod, &twice);
        assert!(
            message.contains("spec.volumes[1].name: Duplicate value: \"data\""),
            "{message}"
        );
    }

    #[test]
    fn a_mount_of_a_volume_the_pod_lacks_is_refused() {
        let mut missing = pod();
        missing["spec"]["containers"][1]["volumeMounts"] =
            json!([{"name": "nowhere", "mountPath": "/n"}]);
        assert!(
            refused(Kind::Pod, &missing)
                .ends_with("spec.containers[1].volumeMounts[0].name: Not found: \"nowhere\"")
        );
    }

    #[test]
    fn two_mounts_on_one_path_in_a_container_are_refused() {
        let mut twice = pod();
        twice["spec"]["containers"][0]["volumeMounts"][1]["mountPath"] = json!("/data");
        assert!(refused(Kind::Pod, &twice).ends_with(
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/data\": must be unique"
        ));
        // The same path in two containers is fine.
        let mut apart = pod();
        apart["spec"]["containers"][1]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        assert!(on_create(Kind::Pod, &apart).is_ok());
    }

    #[test]
    fn a_restart_policy_is_refused_only_for_a_value_kubernetes_does_not_know() {
        // Kubernetes 1.35+ (ContainerRestartRules) takes one on a regular
        // container too.
        let mut regular = pod();
        regular["spec"]["containers"][0]["restartPolicy"] = json!("Never");
        assert!(on_create(Kind::Pod, &regular).is_ok());
        regular["spec"]["containers"][0]["restartPolicy"] = json!("Sometimes");
        assert!(refused(Kind::Pod, &regular).ends_with(
            "spec.containers[0].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\""
        ));
    }

    #[test]
    fn lease_and_pod_names_must_be_dns_subdomains_and_service_names_dns_1035_labels() {
        let named = |name: &str| json!({"metadata": {"name": name, "namespace": "ns"}});
        assert!(on_create(Kind::Lease, &named("ssh-port-198.18.0.10-9000")).is_ok());
        for bad in ["Upper", "under_score", "-dash", "dot.", &"a".repeat(254)] {
            assert!(on_create(Kind::Lease, &named(bad)).is_err(), "{bad}");
        }
        assert!(
            refused(Kind::Lease, &named("A")).starts_with(
                "Lease.coordination.k8s.io \"A\" is invalid: metadata.name: Invalid value: \"A\": a lowercase RFC 1123 subdomain"
            )
        );
        assert!(on_create(Kind::Service, &named("ssh-job-1")).is_ok());
        for bad in ["1abc", "a.b", "dash-", &"a".repeat(64)] {
            assert!(on_create(Kind::Service, &named(bad)).is_err(), "{bad}");
        }
        let mut bad_pod = pod();
        bad_pod["metadata"]["name"] = json!("Job_1");
        assert!(refused(Kind::Pod, &bad_pod).contains("RFC 1123 subdomain"));
    }
}
