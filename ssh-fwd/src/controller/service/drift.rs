//! Our Service as someone else changed it. The spec of a Service is its
//! namespace's to write (`edit` grants it), so a tenant may change the
//! ports, the selector or the shape of the Service the controller made for
//! its job. The agents honour only the granted port and pod whatever the
//! spec says; this puts the spec back as the controller made it, so what
//! `kubectl` shows is what forwards.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use serde_json::{Map, Value, json};

use crate::vocabulary;

/// What differs, and the merge patch that puts it back.
#[derive(Clone, Debug, PartialEq)]
pub struct Drift {
    /// The fields that differ, for people: `ports`, `selector`, `type`,
    /// `externalIPs`, `labels`.
    pub fields: Vec<&'static str>,
    pub patch: Value,
}

/// The labels the agents and the controller select and recognise ours by.
const KEPT_LABELS: [&str; 3] = [
    vocabulary::PROXY_NAME_LABEL,
    vocabulary::MANAGED_BY_LABEL,
    vocabulary::POD_UID,
];

/// How `current` differs from `expected` (what [`super::build`] makes) in
/// what the controller owns: the ports, the selector, the shape (type,
/// load-balancer class, node ports, externalIPs) and its labels. Fields
/// the API server fills in (cluster IPs, families, defaults) and the
/// source ranges (a tenant's to narrow) are not compared.
pub fn drift(current: &Service, expected: &Service) -> Option<Drift> {
    let (cur, exp) = (
        current.spec.clone().unwrap_or_default(),
        expected.spec.clone().unwrap_or_default(),
    );
    let mut fields = Vec::new();
    let mut spec = Map::new();
    let ports = |s: &Option<Vec<ServicePort>>| -> Vec<Value> {
        (s.iter().flatten()).map(normal_port).collect()
    };
    if ports(&cur.ports) != ports(&exp.ports) {
        fields.push("ports");
        spec.insert("ports".into(), json!(exp.ports));
    }
    if cur.selector != exp.selector {
        fields.push("selector");
        spec.insert("selector".into(), replacing(&cur.selector, &exp.selector));
    }
    let shape = |s: &k8s_openapi::api::core::v1::ServiceSpec| {
        (
            s.type_.clone().unwrap_or_else(|| "ClusterIP".into()),
            s.load_balancer_class.clone(),
            s.allocate_load_balancer_node_ports,
        )
    };
    if shape(&cur) != shape(&exp) {
        fields.push("type");
        spec.insert("type".into(), json!(exp.type_));
        spec.insert("loadBalancerClass".into(), json!(exp.load_balancer_class));
        spec.insert(
            "allocateLoadBalancerNodePorts".into(),
            json!(exp.allocate_load_balancer_node_ports),
        );
    }
    let external = |s: &k8s_openapi::api::core::v1::ServiceSpec| {
        let mut ips = s.external_ips.clone().unwrap_or_default();
        ips.sort();
        ips
    };
    if external(&cur) != external(&exp) {
        fields.push("externalIPs");
        spec.insert("externalIPs".into(), json!(exp.external_ips));
    }
    let mut labels = Map::new();
    let label = |svc: &Service, key: &str| super::label(svc, key).map(str::to_owned);
    for key in KEPT_LABELS {
        if label(current, key) != label(expected, key) {
            labels.insert(key.into(), json!(label(expected, key)));
        }
    }
    if !labels.is_empty() {
        fields.push("labels");
    }
    if fields.is_empty() {
        return None;
    }
    // The uid makes the patch fail on a namesake made since.
    let mut metadata = json!({"uid": current.metadata.uid});
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    Some(Drift {
        fields,
        patch: json!({"metadata": metadata, "spec": spec}),
    })
}

/// A port as compared: what forwards (name, protocol, port, target) and a
/// node port, which a tenant could ask for to open the pod on every node.
fn normal_port(p: &ServicePort) -> Value {
    json!({
        "name": p.name.clone().unwrap_or_default(),
        "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into()),
        "port": p.port,
        "targetPort": p.target_port.clone().map_or(json!(p.port), |t| json!(t)),
        "nodePort": p.node_port,
    })
}

/// A merge patch turning map `current` into `expected`: its keys, and a
/// null for each key only `current` has (a merge patch merges maps).
fn replacing(
    current: &Option<BTreeMap<String, String>>,
    expected: &Option<BTreeMap<String, String>>,
) -> Value {
    let mut out: Map<String, Value> = (current.iter().flatten())
        .map(|(k, _)| (k.clone(), Value::Null))
        .collect();
    for (k, v) in expected.iter().flatten() {
        out.insert(k.clone(), json!(v));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::args::ServiceStyle;
    use crate::controller::{
        pod::PodView,
        service::{Settings, build},
        ssh_ips::SshIps,
    };

    fn made(style: ServiceStyle) -> Service {
        let settings = Settings {
            ssh_ips: SshIps::single("198.18.0.10".parse().unwrap()),
            style,
        };
        let pod: PodView = serde_json::from_value(json!({
            "metadata": {"name": "job-1", "namespace": "jobs", "uid": "u-1"},
        }))
        .unwrap();
        let mut svc = build(&pod, 8123, IntOrString::Int(22), &settings);
        svc.metadata.uid = Some("svc-uid".into());
        svc
    }

    fn changed(svc: &Service, patch: Value) -> Service {
        let mut value = serde_json::to_value(svc).unwrap();
        json_patch::merge(&mut value, &patch);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_untouched_service_has_no_drift_even_with_the_api_servers_defaults() {
        let svc = made(ServiceStyle::Loadbalancer);
        let defaulted = changed(
            &svc,
            json!({"spec": {"clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.7"],
                            "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "loadBalancerSourceRanges": ["192.0.2.0/24"]}}),
        );
        assert_eq!(drift(&defaulted, &svc), None);
    }

    #[test]
    fn an_added_port_is_taken_out_again() {
        let svc = made(ServiceStyle::Loadbalancer);
        let stolen = json!({"name": "x", "protocol": "TCP", "port": 9000, "targetPort": 22});
        let mut ports = serde_json::to_value(&svc.spec.as_ref().unwrap().ports).unwrap();
        ports.as_array_mut().unwrap().push(stolen);
        let tampered = changed(&svc, json!({"spec": {"ports": ports}}));
        let drift = drift(&tampered, &svc).unwrap();
        assert_eq!(drift.fields, ["ports"]);
        let restored = changed(&tampered, drift.patch.clone());
        assert_eq!(super::drift(&restored, &svc), None);
        assert_eq!(drift.patch["metadata"]["uid"], "svc-uid");
    }

    #[test]
    fn a_node_port_a_widened_selector_and_a_changed_shape_are_put_back() {
        let svc = made(ServiceStyle::Loadbalancer);
        let tampered = changed(
            &svc,
            json!({
                "metadata": {"labels": {vocabulary::PROXY_NAME_LABEL: null}},
                "spec": {
                    "ports": [{"name": "ssh", "protocol": "TCP", "port": 8123,
                               "targetPort": 22, "nodePort": 30022}],
                    "selector": {vocabulary::SERVICE: null, "app": "anything"},
                    "type": "ClusterIP", "loadBalancerClass": null,
                    "externalIPs": ["198.18.0.10"],
                }
            }),
        );
        let drift = drift(&tampered, &svc).unwrap();
        assert_eq!(
            drift.fields,
            ["ports", "selector", "type", "externalIPs", "labels"]
        );
        assert_eq!(drift.patch["spec"]["selector"]["app"], Value::Null);
        let restored = changed(&tampered, drift.patch);
        assert_eq!(super::drift(&restored, &svc), None);
    }

    #[test]
    fn an_external_ips_service_keeps_exactly_the_ssh_ips() {
        let svc = made(ServiceStyle::Externalips);
        let tampered = changed(
            &svc,
            json!({"spec": {"externalIPs": ["198.18.0.10", "203.0.113.9"]}}),
        );
        let drift = drift(&tampered, &svc).unwrap();
        assert_eq!(drift.fields, ["externalIPs"]);
        assert_eq!(drift.patch["spec"]["externalIPs"], json!(["198.18.0.10"]));
    }
}
