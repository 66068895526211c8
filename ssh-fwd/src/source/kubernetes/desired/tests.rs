//! Services and EndpointSlices are written as the API server's JSON.

use serde_json::{Value, json};

use super::*;
use crate::{
    source::kubernetes::objects::{SERVICE_NAME_LABEL, WireService, WireSlice},
    vocabulary,
};

const SSH_IP: &str = "198.18.0.10";
const PROXY_LABEL: &str = vocabulary::PROXY_NAME_LABEL;

fn policy() -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: [SSH_IP.parse().unwrap()].into(),
        ports: 8000..=16000,
        styles: Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

fn legacy(name: &str, port: i32, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": created, "labels": {PROXY_LABEL: "ssh-fwd"}},
        "spec": {"externalIPs": [SSH_IP], "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}], "selector": {"job": name}}
    })
}

/// The uid of the pod every ready endpoint of these tests names, and the
/// LoadBalancers' grants are for.
const POD_UID: &str = "uid-job";

/// A LoadBalancer of our class granted `port` for the pod [`POD_UID`].
fn lb(name: &str, port: i32, target: Value) -> Value {
    let status = crate::k8s::grant::status_json(&[SSH_IP], u16::try_from(port).unwrap(), POD_UID);
    json!({
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {PROXY_LABEL: "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS, "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": port, "targetPort": target}]},
        "status": status
    })
}

fn slice(service: &str, port_name: &str, port: i32, endpoints: Value) -> Value {
    json!({
        "metadata": {"name": format!("{service}-abc"), "namespace": "jobs", "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

fn ready(ip: &str) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": true},
           "targetRef": {"kind": "Pod", "namespace": "jobs", "name": "job", "uid": POD_UID}})
}

/// The objects as the watches read them.
pub fn views(services: Vec<Value>, slices: Vec<Value>) -> (Vec<ServiceView>, Vec<SliceView>) {
    let services = services
        .into_iter()
        .map(|v| serde_json::from_value::<WireService>(v).unwrap().view())
        .collect();
    let slices = slices
        .into_iter()
        .map(|v| serde_json::from_value::<WireSlice>(v).unwrap().view())
        .collect();
    (services, slices)
}

fn run_with(services: Vec<Value>, slices: Vec<Value>, policy: &Policy) -> Desired {
    let (services, slices) = views(services, slices);
    compute(&services, &slices, policy)
}

fn run(services: Vec<Value>, slices: Vec<Value>) -> Desired {
    run_with(services, slices, &policy())
}

fn pairs(d: &Desired) -> Vec<(String, String, String)> {
    d.mappings
        .iter()
        .map(|m| {
            (
                m.name.to_string(),
                m.frontend.to_string(),
                m.backend.to_string(),
            )
        })
        .collect()
}

#[test]
fn legacy_external_ips_service_maps_to_its_ready_endpoint() {
    let d = run(
        vec![legacy("job-1", 8123, "2026-01-01T00:00:00Z")],
        vec![slice("job-1", "", 22, json!([ready("10.244.1.5")]))],
    );
    assert_eq!(
        pairs(&d),
        [(
            "jobs/job-1".into(),
            "198.18.0.10:8123".into(),
            "10.244.1.5:22".into()
        )]
    );
}

#[test]
fn loadbalancer_class_service_maps_from_its_status_ingress_with_named_target_port() {
    // targetPort "ssh" is resolved per pod; the slice carries the number.
    let d = run(
        vec![lb("job-2", 9000, json!("ssh"))],
        vec![slice("job-2", "ssh", 2222, json!([ready("10.244.2.7")]))],
    );
    assert_eq!(
        pairs(&d),
        [(
            "jobs/job-2".into(),
            "198.18.0.10:9000".into(),
            "10.244.2.7:2222".into()
        )]
    );
}

#[test]
fn loadbalancer_of_another_class_or_without_status_is_ignored() {
    let mut other = lb("other", 9000, json!(22));
    other["spec"]["loadBalancerClass"] = json!("metallb.io/any");
    let mut pending = lb("pending", 9001, json!(22));
    pending["status"] = json!({});
    let d = run(
        vec![other, pending],
        vec![
            slice("other", "ssh", 22, json!([ready("10.244.1.5")])),
            slice("pending", "ssh", 22, json!([ready("10.244.1.6")])),
        ],
    );
    assert!(d.mappings.is_empty());
    assert!(d.notes.contains(&Note::NoSshIp {
        service: "jobs/other".into()
    }));
    assert!(d.notes.contains(&Note::NoSshIp {
        service: "jobs/pending".into()
    }));
}

#[test]
fn services_outside_policy_are_ignored_with_a_reason() {
    let mut foreign_ip = legacy("foreign", 8124, "2026-01-01T00:00:00Z");
    foreign_ip["spec"]["externalIPs"] = json!(["203.0.113.9"]);
    let low_port = legacy("low", 22, "2026-01-01T00:00:00Z");
    let mut udp = legacy("udp", 8125, "2026-01-01T00:00:00Z");
    udp["spec"]["ports"][0]["protocol"] = json!("UDP");
    let eps = |s| slice(s, "", 22, json!([ready("10.244.1.5")]));
    let d = run(
        vec![foreign_ip, low_port, udp],
        vec![eps("foreign"), eps("low"), eps("udp")],
    );
    assert!(d.mappings.is_empty());
    assert_eq!(
        d.notes,
        [
            Note::NoSshIp {
                service: "jobs/foreign".into()
            },
            Note::PortOutsideRange {
                service: "jobs/low".into(),
                port: 22
            },
            Note::NotTcp {
                service: "jobs/udp".into(),
                port: 8125
            },
        ]
    );
}

#[test]
fn service_without_ready_endpoints_is_absent_from_maps() {
    let d = run(
        vec![
            legacy("job-1", 8123, "2026-01-01T00:00:00Z"),
            legacy("job-2", 8124, "2026-01-01T00:00:00Z"),
        ],
        vec![slice(
            "job-1",
            "",
            22,
            json!([{"addresses": ["10.244.1.5"], "conditions": {"ready": false}}]),
        )],
    );
    assert!(d.mappings.is_empty());
    assert!(d.notes.contains(&Note::NoReadyEndpoint {
        service: "jobs/job-1".into()
    }));
    assert!(d.notes.contains(&Note::NoReadyEndpoint {
        service: "jobs/job-2".into()
    }));
}

/// A pod being deleted: its endpoint is no longer ready but, until its
/// server stops, still serving (the EndpointSlice controller's
/// `serving`/`terminating`, as kube-proxy reads them).
fn terminating(ip: &str, serving: bool) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": false, "serving": serving, "terminating": true}})
}

#[test]
fn a_terminating_endpoint_that_still_serves_keeps_its_mapping_draining_until_it_stops() {
    let with = |endpoints: Value| {
        run(
            vec![legacy("job-1", 8123, "2026-01-01T00:00:00Z")],
            vec![slice("job-1", "", 22, endpoints)],
        )
    };
    let draining = |d: &Desired| d.mappings.iter().next().is_some_and(|m| m.guard.draining);
    let d = with(json!([terminating("10.244.1.5", true)]));
    assert_eq!(
        pairs(&d),
        [(
            "jobs/job-1".into(),
            "198.18.0.10:8123".into(),
            "10.244.1.5:22".into()
        )],
        "a pod in its grace period keeps its mapping"
    );
    assert!(
        draining(&d),
        "draining: its sessions go on, new logins are refused"
    );
    // An absent `serving` is true (the API's rule, as kube-proxy reads it).
    let d = with(json!([{"addresses": ["10.244.1.5"],
                         "conditions": {"ready": false, "terminating": true}}]));
    assert!(draining(&d), "serving unset counts as serving");
    let d = with(json!([
        terminating("10.244.1.5", true),
        ready("10.244.1.9")
    ]));
    assert_eq!(
        pairs(&d)[0].2,
        "10.244.1.9:22",
        "a ready endpoint comes first"
    );
    assert!(!draining(&d));
    let d = with(json!([terminating("10.244.1.5", false)]));
    assert!(d.mappings.is_empty(), "no longer serving: {:?}", pairs(&d));
}

#[test]
fn endpoint_with_unset_ready_condition_counts_as_ready() {
    let d = run(
        vec![legacy("job-1", 8123, "2026-01-01T00:00:00Z")],
        vec![slice(
            "job-1",
            "",
            22,
            json!([{"addresses": ["10.244.1.5"]}]),
        )],
    );
    assert_eq!(d.mappings.len(), 1);
}

#[test]
fn several_ready_endpoints_pick_the_lowest_address_and_warn() {
    let d = run(
        vec![legacy("job-1", 8123, "2026-01-01T00:00:00Z")],
        vec![
            slice(
                "job-1",
                "",
                22,
                json!([ready("10.244.3.9"), ready("10.244.1.20")]),
            ),
            slice("job-1", "", 22, json!([ready("10.244.1.3")])),
        ],
    );
    assert_eq!(pairs(&d)[0].2, "10.244.1.3:22");
    assert!(d.notes.contains(&Note::ManyReadyEndpoints {
        service: "jobs/job-1".into(),
        chosen: "10.244.1.3".parse().unwrap(),
        ready: 3
    }));
}

#[test]
fn two_services_claiming_one_port_oldest_wins_then_name_never_flapping() {
    let eps = |s, ip| slice(s, "", 22, json!([ready(ip)]));
    let older = legacy("zeta", 8123, "2026-01-01T00:00:00Z");
    let newer = legacy("alpha", 8123, "2026-02-01T00:00:00Z");
    for order in [
        vec![older.clone(), newer.clone()],
        vec![newer.clone(), older.clone()],
    ] {
        let d = run(
            order,
            vec![eps("zeta", "10.244.1.5"), eps("alpha", "10.244.1.6")],
        );
        assert_eq!(
            pairs(&d)[0].2,
            "10.244.1.5:22",
            "the older Service wins whatever the order"
        );
        assert!(d.notes.contains(&Note::Conflict {
            frontend: "198.18.0.10:8123".parse().unwrap(),
            winner: "jobs/zeta".into(),
            loser: "jobs/alpha".into()
        }));
    }
    let twin = legacy("beta", 8123, "2026-01-01T00:00:00Z");
    let d = run(
        vec![older, twin],
        vec![eps("zeta", "10.244.1.5"), eps("beta", "10.244.1.7")],
    );
    assert_eq!(pairs(&d)[0].2, "10.244.1.7:22", "same age: by name");
}

#[test]
fn multi_port_service_names_each_mapping_by_port() {
    let mut svc = legacy("job-1", 8123, "2026-01-01T00:00:00Z");
    svc["spec"]["ports"] = json!([{"name": "ssh", "port": 8123, "targetPort": 22}, {"name": "alt", "port": 8124, "targetPort": 2222}]);
    let mut s = slice("job-1", "ssh", 22, json!([ready("10.244.1.5")]));
    s["ports"] = json!([{"name": "ssh", "port": 22}, {"name": "alt", "port": 2222}]);
    let d = run(vec![svc], vec![s]);
    assert_eq!(
        pairs(&d),
        [
            (
                "jobs/job-1:ssh".into(),
                "198.18.0.10:8123".into(),
                "10.244.1.5:22".into()
            ),
            (
                "jobs/job-1:alt".into(),
                "198.18.0.10:8124".into(),
                "10.244.1.5:2222".into()
            ),
        ]
    );
}

#[test]
fn slices_of_a_same_named_service_in_another_namespace_do_not_count() {
    let mut s = slice("job-1", "", 22, json!([ready("10.244.1.5")]));
    s["metadata"]["namespace"] = json!("other");
    let d = run(vec![legacy("job-1", 8123, "2026-01-01T00:00:00Z")], vec![s]);
    assert!(d.mappings.is_empty());
}

#[test]
fn a_port_whose_older_owner_is_not_ready_stays_closed_instead_of_going_to_a_younger_claimant() {
    // The owner's pod restarts: its endpoint is not ready for a moment. A
    // younger Service claiming the same port must not capture it.
    let owner = legacy("owner", 8123, "2026-01-01T00:00:00Z");
    let younger = legacy("younger", 8123, "2026-02-01T00:00:00Z");
    let not_ready = json!([{"addresses": ["10.244.1.5"], "conditions": {"ready": false}}]);
    let d = run(
        vec![owner.clone(), younger.clone()],
        vec![
            slice("owner", "", 22, not_ready),
            slice("younger", "", 22, json!([ready("10.244.9.9")])),
        ],
    );
    assert!(
        d.mappings.is_empty(),
        "closed, not handed over: {:?}",
        pairs(&d)
    );
    assert!(d.notes.contains(&Note::Conflict {
        frontend: "198.18.0.10:8123".parse().unwrap(),
        winner: "jobs/owner".into(),
        loser: "jobs/younger".into()
    }));
    // Without any slice at all the owner still holds the port.
    let d = run(
        vec![owner, younger],
        vec![slice("younger", "", 22, json!([ready("10.244.9.9")]))],
    );
    assert!(d.mappings.is_empty(), "{:?}", pairs(&d));
}

#[test]
fn external_ips_services_are_ignored_with_a_note_when_only_load_balancers_are_honoured() {
    let only_lb = Policy {
        styles: Styles {
            load_balancer: true,
            external_ips: false,
        },
        ..policy()
    };
    let services = vec![
        legacy("legacy", 8123, "2026-01-01T00:00:00Z"),
        lb("balanced", 9000, json!(22)),
    ];
    let slices = vec![
        slice("legacy", "", 22, json!([ready("10.244.1.5")])),
        slice("balanced", "ssh", 22, json!([ready("10.244.2.7")])),
    ];
    let d = run_with(services.clone(), slices.clone(), &only_lb);
    assert_eq!(
        pairs(&d),
        [(
            "jobs/balanced".into(),
            "198.18.0.10:9000".into(),
            "10.244.2.7:22".into()
        )]
    );
    assert!(d.notes.contains(&Note::StyleNotHonoured {
        service: "jobs/legacy".into(),
        style: "externalIPs"
    }));
    let only_legacy = Policy {
        styles: Styles {
            load_balancer: false,
            external_ips: true,
        },
        ..policy()
    };
    let d = run_with(services, slices, &only_legacy);
    assert_eq!(pairs(&d)[0].0, "jobs/legacy");
    assert_eq!(d.mappings.len(), 1);
}

#[test]
fn a_load_balancer_of_our_class_that_allocates_node_ports_is_refused() {
    let mut open = lb("open", 9000, json!(22));
    open["spec"]["allocateLoadBalancerNodePorts"] = json!(true);
    let mut unset = lb("unset", 9001, json!(22));
    unset["spec"]
        .as_object_mut()
        .unwrap()
        .remove("allocateLoadBalancerNodePorts");
    let d = run(
        vec![open, unset, lb("closed", 9002, json!(22))],
        vec![
            slice("open", "ssh", 22, json!([ready("10.244.1.5")])),
            slice("unset", "ssh", 22, json!([ready("10.244.1.6")])),
            slice("closed", "ssh", 22, json!([ready("10.244.1.7")])),
        ],
    );
    assert_eq!(pairs(&d).len(), 1);
    assert_eq!(pairs(&d)[0].0, "jobs/closed");
    for service in ["jobs/open", "jobs/unset"] {
        assert!(d.notes.contains(&Note::NodePortsAllocated {
            service: service.into()
        }));
    }
}

mod family;
mod grant;
mod validity;
