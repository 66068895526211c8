//! The grant decides what a Service gets: only the port the controller
//! granted, only on the SSH IPs whose ingress entry lists it, only to the
//! pod it was granted to; and a granted port beats every claim without a
//! grant. Written as the API server's JSON.

use serde_json::{Value, json};

use super::super::*;
use crate::{
    k8s::grant::status_json,
    source::kubernetes::objects::{SERVICE_NAME_LABEL, WireService, WireSlice},
    vocabulary,
};

const SSH_IP: &str = "198.18.0.10";

fn policy() -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: [SSH_IP.parse().unwrap()].into(),
        ports: 8000..=16000,
        styles: Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

/// A LoadBalancer of our class in namespace `ns` listing `ports`, with
/// `status`.
fn lb(ns: &str, name: &str, created: &str, ports: &[u16], status: Value) -> Value {
    let ports: Vec<Value> = (ports.iter())
        .map(|p| json!({"name": format!("p{p}"), "port": p, "targetPort": 22, "protocol": "TCP"}))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                 "allocateLoadBalancerNodePorts": false, "ports": ports},
        "status": status
    })
}

/// An externalIPs Service, without a grant, listing `ports`.
fn external(ns: &str, name: &str, created: &str, ports: &[u16]) -> Value {
    let ports: Vec<Value> = (ports.iter())
        .map(|p| json!({"name": format!("p{p}"), "port": p, "targetPort": 22}))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"externalIPs": [SSH_IP], "ports": ports}
    })
}

/// The slice of `ns/service` with ready endpoints `(address, pod uid)`,
/// serving every port name of [`lb`] and [`external`].
fn slice(ns: &str, service: &str, endpoints: &[(&str, &str)]) -> Value {
    let endpoints: Vec<Value> = (endpoints.iter())
        .map(|(ip, uid)| {
            json!({"addresses": [ip], "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": uid, "uid": uid}})
        })
        .collect();
    let ports: Vec<Value> = (8000..=8010u16)
        .map(|p| json!({"name": format!("p{p}"), "port": 22}))
        .collect();
    json!({
        "metadata": {"name": format!("{service}-x"), "namespace": ns,
                     "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4", "ports": ports, "endpoints": endpoints
    })
}

fn run(services: Vec<Value>, slices: Vec<Value>) -> Desired {
    let services: Vec<ServiceView> = (services.into_iter())
        .map(|v| serde_json::from_value::<WireService>(v).unwrap().view())
        .collect();
    let slices: Vec<SliceView> = (slices.into_iter())
        .map(|v| serde_json::from_value::<WireSlice>(v).unwrap().view())
        .collect();
    compute(&services, &slices, &policy())
}

fn mapped(d: &Desired) -> Vec<(String, String)> {
    (d.mappings.iter())
        .map(|m| (m.frontend.to_string(), m.backend.ip().to_string()))
        .collect()
}

#[test]
fn a_service_gets_only_the_port_granted_to_it_whatever_its_spec_lists() {
    let d = run(
        vec![lb(
            "t",
            "mine",
            "2026-01-01T00:00:00Z",
            &[8001, 8002],
            status_json(&[SSH_IP], 8001, "a"),
        )],
        vec![slice("t", "mine", &[("10.244.1.5", "a")])],
    );
    assert_eq!(
        mapped(&d),
        [("198.18.0.10:8001".into(), "10.244.1.5".into())]
    );
    assert!(d.notes.contains(&Note::NotGranted {
        service: "t/mine".into(),
        port: Some(8002)
    }));
}

#[test]
fn a_load_balancer_without_a_grant_or_whose_ingress_lists_another_port_gets_nothing() {
    let ungranted = json!({"loadBalancer": {"ingress": [{"ip": SSH_IP}]}});
    let mut unlisted = status_json(&[SSH_IP], 8001, "a");
    unlisted["loadBalancer"]["ingress"][0]["ports"] = json!([{"port": 8002, "protocol": "TCP"}]);
    for status in [ungranted, unlisted] {
        let d = run(
            vec![lb(
                "t",
                "mine",
                "2026-01-01T00:00:00Z",
                &[8001],
                status.clone(),
            )],
            vec![slice("t", "mine", &[("10.244.1.5", "a")])],
        );
        assert_eq!(mapped(&d), [], "{status}");
    }
}

#[test]
fn a_granted_port_reaches_only_the_pod_it_was_granted_to() {
    // A pod that joined the Service by its labels, with a lower address.
    let d = run(
        vec![lb(
            "v",
            "job",
            "2026-01-01T00:00:00Z",
            &[8001],
            status_json(&[SSH_IP], 8001, "victim"),
        )],
        vec![slice(
            "v",
            "job",
            &[("10.244.1.5", "intruder"), ("10.244.2.5", "victim")],
        )],
    );
    assert_eq!(
        mapped(&d),
        [("198.18.0.10:8001".into(), "10.244.2.5".into())]
    );
    // Only the intruder is ready: the port stays closed.
    let d = run(
        vec![lb(
            "v",
            "job",
            "2026-01-01T00:00:00Z",
            &[8001],
            status_json(&[SSH_IP], 8001, "victim"),
        )],
        vec![slice("v", "job", &[("10.244.1.5", "intruder")])],
    );
    assert_eq!(mapped(&d), []);
}

#[test]
fn a_granted_port_beats_an_older_service_without_a_grant_that_lists_it() {
    let d = run(
        vec![
            external("t", "old", "2020-01-01T00:00:00Z", &[8000, 8001]),
            lb(
                "v",
                "job",
                "2026-01-01T00:00:00Z",
                &[8001],
                status_json(&[SSH_IP], 8001, "victim"),
            ),
        ],
        vec![
            slice("t", "old", &[("10.244.1.5", "t-pod")]),
            slice("v", "job", &[("10.244.2.5", "victim")]),
        ],
    );
    assert_eq!(
        mapped(&d),
        [
            ("198.18.0.10:8000".into(), "10.244.1.5".into()),
            ("198.18.0.10:8001".into(), "10.244.2.5".into()),
        ],
        "the ungranted port still goes to the externalIPs Service"
    );
    assert!(d.notes.contains(&Note::Conflict {
        frontend: "198.18.0.10:8001".parse().unwrap(),
        winner: "v/job".into(),
        loser: "t/old".into()
    }));
}
