//! What kube-controller-manager's EndpointSlice controller would write: for
//! each Service with a selector, one slice listing the selected Pods that
//! have an IP, ready when the Pod's Ready condition is True.

use serde_json::{Value, json};

const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const EMULATED: &str = "fake-api.ssh-fwd.test";

pub fn same_content(a: &Value, b: &Value) -> bool {
    a["endpoints"] == b["endpoints"] && a["ports"] == b["ports"]
}

/// The `namespace/name` of the slice emulated for a Service.
pub fn slice_key(service_key: &str) -> String {
    format!("{service_key}-emulated")
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

/// The slice for `service` given the pods of its namespace; `None` for a
/// Service without a selector (its slices are someone else's business).
pub fn slice_for<'a>(service: &Value, pods: impl Iterator<Item = &'a Value>) -> Option<Value> {
    service["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())?;
    let namespace = &service["metadata"]["namespace"];
    let selected: Vec<&Value> = pods
        .filter(|p| selects(service, p) && p["status"]["podIP"].is_string())
        .collect();
    let endpoints: Vec<Value> = selected
        .iter()
        .map(|p| {
            json!({
                "addresses": [p["status"]["podIP"]],
                "conditions": {"ready": is_ready(p)},
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
                   "port": target_port(port, selected.first().copied())})
        })
        .collect();
    let name = service["metadata"]["name"].as_str().unwrap_or("");
    Some(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": namespace,
            "name": format!("{name}-emulated"),
            "labels": {"kubernetes.io/service-name": name, MANAGED_BY: EMULATED},
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    }))
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
