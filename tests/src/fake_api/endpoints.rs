//! What kube-controller-manager's EndpointSlice controller would write: for
//! each Service with a selector, one slice listing the selected Pods that
//! have an IP, with their conditions (ready, serving, terminating; see
//! [`conditions`]), labelled as the
//! controller labels them: the Service's own labels (all but the reserved
//! ones), `kubernetes.io/service-name`, `endpointslice.kubernetes.io/
//! managed-by`, and `service.kubernetes.io/headless` for a headless Service.
//! The labels follow the Service's when those change.

use serde_json::{Map, Value, json};

const SERVICE_NAME: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const HEADLESS: &str = "service.kubernetes.io/headless";
const EMULATED: &str = "fake-api.ssh-fwd.test";

pub fn same_content(a: &Value, b: &Value) -> bool {
    a["endpoints"] == b["endpoints"]
        && a["ports"] == b["ports"]
        && a["metadata"]["labels"] == b["metadata"]["labels"]
}

/// The slice's labels for `service`.
fn labels(service: &Value, name: &str) -> Value {
    let mut labels: Map<String, Value> = service["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| ![SERVICE_NAME, MANAGED_BY, HEADLESS].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(SERVICE_NAME.into(), json!(name));
    labels.insert(MANAGED_BY.into(), json!(EMULATED));
    if service["spec"]["clusterIP"] == "None" {
        labels.insert(HEADLESS.into(), json!(""));
    }
    Value::Object(labels)
}

/// An address family, as `spec.ipFamilies` and a slice's `addressType`
/// name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpFamily {
    #[default]
    Ipv4,
    Ipv6,
}

impl IpFamily {
    pub const ALL: [IpFamily; 2] = [IpFamily::Ipv4, IpFamily::Ipv6];

    pub fn name(self) -> &'static str {
        match self {
            IpFamily::Ipv4 => "IPv4",
            IpFamily::Ipv6 => "IPv6",
        }
    }

    fn holds(self, address: &str) -> bool {
        address.contains(':') == (self == IpFamily::Ipv6)
    }

    /// The suffix of the slice emulated for this family.
    fn suffix(self) -> &'static str {
        match self {
            IpFamily::Ipv4 => "emulated",
            IpFamily::Ipv6 => "emulated-ipv6",
        }
    }
}

/// The `namespace/name` of the slice of `family` emulated for a Service.
pub fn slice_key(service_key: &str, family: IpFamily) -> String {
    format!("{service_key}-{}", family.suffix())
}

/// Whether `service` has slices of `family`: one for each of its
/// `ipFamilies` (IPv4 when it has none).
fn has_family(service: &Value, family: IpFamily) -> bool {
    match service["spec"]["ipFamilies"].as_array() {
        Some(families) => families.iter().any(|f| f == family.name()),
        None => family == IpFamily::Ipv4,
    }
}

/// The pod's address of `family`: from `status.podIPs`, or `status.podIP`.
fn pod_address(pod: &Value, family: IpFamily) -> Option<Value> {
    let listed = pod["status"]["podIPs"].as_array().into_iter().flatten();
    listed
        .map(|ip| &ip["ip"])
        .chain([&pod["status"]["podIP"]])
        .filter_map(Value::as_str)
        .find(|ip| family.holds(ip))
        .map(|ip| json!(ip))
}

/// Whether a Service with a selector selects `pod`.
pub fn selects(service: &Value, pod: &Value) -> bool {
    let Some(selector) = service["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())
    else {
        return false;
    };
    service["metadata"]["namespace"] == pod["metadata"]["namespace"]
        && selector
            .iter()
            .all(|(k, v)| &pod["metadata"]["labels"][k] == v)
}

/// The slice of `family` for `service` given the pods of its namespace;
/// `None` for a Service without a selector (its slices are someone else's
/// business) or without that family.
pub fn slice_for<'a>(
    service: &Value,
    pods: impl Iterator<Item = &'a Value>,
    family: IpFamily,
) -> Option<Value> {
    service["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())?;
    if !has_family(service, family) {
        return None;
    }
    let namespace = &service["metadata"]["namespace"];
    let selected: Vec<(&Value, Value)> = pods
        .filter(|p| selects(service, p))
        .filter_map(|p| Some((p, pod_address(p, family)?)))
        .collect();
    let endpoints: Vec<Value> = selected
        .iter()
        .map(|(p, address)| {
            json!({
                "addresses": [address],
                "conditions": conditions(service, p),
                "targetRef": {"kind": "Pod", "namespace": namespace,
                              "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]},
            })
        })
        .collect();
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|port| {
            json!({"name": port["name"].as_str().unwrap_or(""),
                   "protocol": port["protocol"].as_str().unwrap_or("TCP"),
                   "port": target_port(port, selected.first().map(|(p, _)| *p))})
        })
        .collect();
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    Some(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": namespace,
            "name": format!("{name}-{}", family.suffix()),
            "labels": labels(service, name),
        },
        "addressType": family.name(),
        "endpoints": endpoints,
        "ports": ports,
    }))
}

/// An endpoint's conditions as the EndpointSlice controller sets them
/// (`podToEndpoint` in k8s.io/endpointslice): serving while the Pod is
/// Ready, terminating once it has a deletionTimestamp, ready when serving
/// and not terminating, or always under `publishNotReadyAddresses`.
fn conditions(service: &Value, pod: &Value) -> Value {
    let serving = is_ready(pod);
    let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
    let ready =
        service["spec"]["publishNotReadyAddresses"] == json!(true) || (serving && !terminating);
    json!({"ready": ready, "serving": serving, "terminating": terminating})
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// A numeric targetPort as is; a named one from the Pod's container ports.
fn target_port(port: &Value, pod: Option<&Value>) -> Value {
    match &port["targetPort"] {
        Value::Number(n) => json!(n),
        Value::String(name) => pod
            .and_then(|p| p["spec"]["containers"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|c| c["ports"].as_array())
            .flatten()
            .find(|p| p["name"] == name.as_str())
            .map_or(Value::Null, |p| p["containerPort"].clone()),
        _ => port["port"].clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_being_deleted_is_serving_and_terminating_but_not_ready() {
        let service = json!({
            "metadata": {"name": "ssh-a", "namespace": "jobs"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 8022, "targetPort": 22}]}
        });
        let pod = |deleting: bool, ready: &str| {
            let mut pod = json!({
                "metadata": {"name": "a", "namespace": "jobs", "uid": "u1", "labels": {"app": "a"}},
                "status": {"podIP": "10.244.1.5",
                           "conditions": [{"type": "Ready", "status": ready}]}
            });
            if deleting {
                pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            pod
        };
        let conditions = |pod: Value| {
            slice_for(&service, [pod].iter(), IpFamily::Ipv4).expect("slice")["endpoints"][0]
                ["conditions"]
                .clone()
        };
        assert_eq!(
            conditions(pod(false, "True")),
            json!({"ready": true, "serving": true, "terminating": false})
        );
        assert_eq!(
            conditions(pod(true, "True")),
            json!({"ready": false, "serving": true, "terminating": true})
        );
        assert_eq!(
            conditions(pod(true, "False")),
            json!({"ready": false, "serving": false, "terminating": true})
        );
        let mut published = service.clone();
        published["spec"]["publishNotReadyAddresses"] = json!(true);
        let slice =
            slice_for(&published, [pod(true, "False")].iter(), IpFamily::Ipv4).expect("slice");
        assert_eq!(slice["endpoints"][0]["conditions"]["ready"], json!(true));
    }

    #[test]
    fn slices_carry_the_service_labels_but_not_reserved_ones() {
        let service = json!({
            "metadata": {"name": "ssh-a", "namespace": "jobs",
                         "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd",
                                    SERVICE_NAME: "spoofed", MANAGED_BY: "someone"}},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 8022}], "clusterIP": "None"}
        });
        let slice = slice_for(&service, std::iter::empty(), IpFamily::Ipv4).expect("slice");
        assert_eq!(
            slice["metadata"]["labels"],
            json!({"service.kubernetes.io/service-proxy-name": "ssh-fwd",
                   SERVICE_NAME: "ssh-a", MANAGED_BY: EMULATED, HEADLESS: ""})
        );
    }
}
