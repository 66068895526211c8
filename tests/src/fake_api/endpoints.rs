//! What kube-controller-manager's EndpointSlice controller would write: for
//! each Service with a selector, one slice listing the selected Pods that
//! have an IP, ready when the Pod's Ready condition is True.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Kind;

const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const EMULATED: &str = "fake-api.ssh-fwd.test";

pub fn is_emulated(slice: &Value) -> bool {
    slice["metadata"]["labels"][MANAGED_BY] == EMULATED
}

pub fn same_content(a: &Value, b: &Value) -> bool {
    a["endpoints"] == b["endpoints"] && a["ports"] == b["ports"]
}

/// The slices the objects call for, by `namespace/name`.
pub fn desired_slices(objects: &BTreeMap<(Kind, String), Value>) -> BTreeMap<String, Value> {
    let pods: Vec<&Value> = objects
        .iter()
        .filter(|((k, _), _)| *k == Kind::Pod)
        .map(|(_, v)| v)
        .collect();
    let mut slices = BTreeMap::new();
    for ((kind, _), service) in objects {
        let Some(selector) = service["spec"]["selector"]
            .as_object()
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if *kind != Kind::Service {
            continue;
        }
        let namespace = &service["metadata"]["namespace"];
        let selected: Vec<&Value> = pods
            .iter()
            .copied()
            .filter(|p| {
                &p["metadata"]["namespace"] == namespace
                    && selector
                        .iter()
                        .all(|(k, v)| &p["metadata"]["labels"][k] == v)
                    && p["status"]["podIP"].is_string()
            })
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
        let slice = json!({
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
        });
        slices.insert(super::store::key_of(&slice), slice);
    }
    slices
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
