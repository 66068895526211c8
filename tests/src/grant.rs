//! What a test that plays the ssh-fwd controller writes: the grant of a
//! port on a Service's status, and an endpoint naming its pod as the
//! EndpointSlice controller does. The format is ssh-fwd's (`k8s::grant`);
//! a unit test there reads what [`status`] writes, so the two cannot part.

use serde_json::{Value, json};

/// The condition type and reason the controller writes.
const GRANTED: &str = "ssh-fwd.io/Granted";
const REASON: &str = "PortGranted";

/// A Service's `status` granting `port` to the pod with `pod_uid`, with an
/// ingress entry for each of `ips` listing the port (a LoadBalancer's; an
/// externalIPs Service takes the condition alone).
pub fn status(ips: &[&str], port: u16, pod_uid: &str) -> Value {
    let ingress: Vec<Value> = (ips.iter())
        .map(|ip| json!({"ip": ip, "ports": [{"port": port, "protocol": "TCP"}]}))
        .collect();
    json!({
        "loadBalancer": {"ingress": ingress},
        "conditions": [{
            "type": GRANTED, "status": "True", "reason": REASON,
            "message": format!("port {port} granted to pod jobs/job (uid {pod_uid})"),
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]
    })
}

/// A ready endpoint at `ip` of the pod `namespace/name` with `uid`.
pub fn endpoint(ip: &str, namespace: &str, name: &str, uid: &str) -> Value {
    json!({
        "addresses": [ip], "conditions": {"ready": true},
        "targetRef": {"kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
    })
}
