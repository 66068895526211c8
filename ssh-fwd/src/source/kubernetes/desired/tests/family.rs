//! Dual-stack Services: each frontend maps to a backend of its own family,
//! from the EndpointSlice of that family (a dual-stack Service has one per
//! family). Written as the API server's JSON.

use serde_json::{Value, json};

use super::super::*;
use crate::{
    mapping::guard::Cidr,
    source::kubernetes::objects::{SERVICE_NAME_LABEL, WireService, WireSlice},
    vocabulary,
};

const SSH_IP: &str = "198.18.0.10";
const SSH_IP6: &str = "fd00:198::10";

fn policy(ssh_ips: &[&str]) -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: ssh_ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        ports: 8000..=16000,
        styles: Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

/// A legacy Service on `external_ips`, of `families` (`spec.ipFamilies`).
fn legacy(name: &str, external_ips: &[&str], families: &[&str]) -> Value {
    let policy = if families.len() == 2 {
        "RequireDualStack"
    } else {
        "SingleStack"
    };
    json!({
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {vocabulary::PROXY_NAME_LABEL: "ssh-fwd"}},
        "spec": {"externalIPs": external_ips, "ipFamilies": families, "ipFamilyPolicy": policy,
                 "ports": [{"port": 8022, "targetPort": 22}]}
    })
}

/// A LoadBalancer of our class whose status holds `ingress`.
fn lb(name: &str, ingress: &[&str]) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                 "allocateLoadBalancerNodePorts": false,
                 "ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "PreferDualStack",
                 "ports": [{"name": "ssh", "port": 9000, "targetPort": "ssh"}]},
        "status": crate::k8s::grant::status_json(ingress, 9000, POD_UID)
    })
}

/// The uid of the pod every endpoint of these tests names, and the
/// LoadBalancers' grants are for.
const POD_UID: &str = "uid-job";

/// The slice of `family` for `service`, with ready `ips` on `port`.
fn slice(service: &str, family: &str, port: i32, ips: &[&str]) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| {
            json!({"addresses": [ip], "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "name": "job", "uid": POD_UID}})
        })
        .collect();
    json!({
        "metadata": {"name": format!("{service}-{family}"), "namespace": "jobs",
                     "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": family,
        "ports": [{"name": "ssh", "port": port}, {"name": "", "port": port}],
        "endpoints": endpoints
    })
}

fn run(services: Vec<Value>, slices: Vec<Value>, policy: &Policy) -> Desired {
    let services: Vec<ServiceView> = (services.into_iter())
        .map(|v| serde_json::from_value::<WireService>(v).unwrap().view())
        .collect();
    let slices: Vec<SliceView> = (slices.into_iter())
        .map(|v| serde_json::from_value::<WireSlice>(v).unwrap().view())
        .collect();
    compute(&services, &slices, policy)
}

fn pairs(d: &Desired) -> Vec<(String, String)> {
    (d.mappings.iter())
        .map(|m| (m.frontend.to_string(), m.backend.to_string()))
        .collect()
}

#[test]
fn an_ipv6_only_service_maps_its_ipv6_external_ip_to_its_ipv6_endpoint() {
    let d = run(
        vec![legacy("job-1", &[SSH_IP6], &["IPv6"])],
        vec![slice("job-1", "IPv6", 22, &["fd00:244:1::5"])],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert_eq!(
        pairs(&d),
        [("[fd00:198::10]:8022".into(), "[fd00:244:1::5]:22".into())]
    );
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}

#[test]
fn a_dual_stack_service_maps_each_family_to_the_endpoint_of_its_own_family() {
    let d = run(
        vec![legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"])],
        vec![
            slice("job-1", "IPv4", 22, &["10.244.1.5"]),
            slice("job-1", "IPv6", 22, &["fd00:244:1::5"]),
        ],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert_eq!(
        pairs(&d),
        [
            ("198.18.0.10:8022".into(), "10.244.1.5:22".into()),
            ("[fd00:198::10]:8022".into(), "[fd00:244:1::5]:22".into()),
        ]
    );
}

#[test]
fn a_load_balancers_ingress_of_both_families_maps_each_with_the_named_target_port() {
    let d = run(
        vec![lb("job-2", &[SSH_IP6, SSH_IP])],
        vec![
            slice("job-2", "IPv6", 2222, &["fd00:244:2::7"]),
            slice("job-2", "IPv4", 2222, &["10.244.2.7"]),
        ],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert_eq!(
        pairs(&d),
        [
            ("198.18.0.10:9000".into(), "10.244.2.7:2222".into()),
            ("[fd00:198::10]:9000".into(), "[fd00:244:2::7]:2222".into()),
        ]
    );
}

#[test]
fn an_ipv6_external_ip_with_only_ipv4_endpoints_maps_nothing_and_says_why() {
    // The API server takes an IPv6 external IP on an IPv4-only Service;
    // its slices are IPv4 only, and no NAT64 is done.
    let d = run(
        vec![legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4"])],
        vec![slice("job-1", "IPv4", 22, &["10.244.1.5"])],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert_eq!(
        pairs(&d),
        [("198.18.0.10:8022".into(), "10.244.1.5:22".into())],
        "the IPv4 frontend still maps"
    );
    assert_eq!(
        d.notes,
        [Note::NoEndpointOfFamily {
            service: "jobs/job-1".into(),
            family: Family::V6
        }]
    );
}

#[test]
fn an_ipv6_frontend_without_an_ipv6_endpoint_still_holds_its_port_closed() {
    // The older Service owns the IPv6 frontend though it cannot serve it:
    // the younger one, which could, does not take it.
    let mut older = legacy("older", &[SSH_IP6], &["IPv4"]);
    older["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
    let d = run(
        vec![older, legacy("younger", &[SSH_IP6], &["IPv6"])],
        vec![
            slice("older", "IPv4", 22, &["10.244.1.5"]),
            slice("younger", "IPv6", 22, &["fd00:244:1::6"]),
        ],
        &policy(&[SSH_IP6]),
    );
    assert!(d.mappings.is_empty());
    assert!(d.notes.contains(&Note::Conflict {
        frontend: "[fd00:198::10]:8022".parse().unwrap(),
        winner: "jobs/older".into(),
        loser: "jobs/younger".into()
    }));
}

#[test]
fn a_service_with_no_endpoint_of_any_family_is_noted_once_as_not_ready() {
    let d = run(
        vec![legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"])],
        vec![],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert!(d.mappings.is_empty());
    assert_eq!(
        d.notes,
        [Note::NoReadyEndpoint {
            service: "jobs/job-1".into()
        }]
    );
}

#[test]
fn ssh_ips_restrict_frontends_of_each_family() {
    let service = || legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"]);
    let slices = || {
        vec![
            slice("job-1", "IPv4", 22, &["10.244.1.5"]),
            slice("job-1", "IPv6", 22, &["fd00:244:1::5"]),
        ]
    };
    let only_v6 = run(vec![service()], slices(), &policy(&[SSH_IP6]));
    assert_eq!(
        pairs(&only_v6),
        [("[fd00:198::10]:8022".into(), "[fd00:244:1::5]:22".into())]
    );
    let only_v4 = run(vec![service()], slices(), &policy(&[SSH_IP]));
    assert_eq!(
        pairs(&only_v4),
        [("198.18.0.10:8022".into(), "10.244.1.5:22".into())]
    );
    let other = run(vec![service()], slices(), &policy(&["fd00:198::11"]));
    assert!(other.mappings.is_empty());
    assert_eq!(
        other.notes,
        [Note::NoSshIp {
            service: "jobs/job-1".into()
        }]
    );
}

#[test]
fn source_ranges_of_each_family_guard_the_frontends_of_that_family() {
    let mut svc = legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"]);
    svc["metadata"]["annotations"] =
        json!({vocabulary::SOURCE_RANGES: "192.0.2.0/24, 2001:db8::/32"});
    let d = run(
        vec![svc],
        vec![
            slice("job-1", "IPv4", 22, &["10.244.1.5"]),
            slice("job-1", "IPv6", 22, &["fd00:244:1::5"]),
        ],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    let ranges = |frontend: &str| {
        let m = d.mappings.get(&frontend.parse().unwrap()).expect(frontend);
        m.guard.ranges().cloned()
    };
    let cidr = |s: &str| s.parse::<Cidr>().unwrap();
    assert_eq!(
        ranges("198.18.0.10:8022"),
        Some([cidr("192.0.2.0/24")].into())
    );
    assert_eq!(
        ranges("[fd00:198::10]:8022"),
        Some([cidr("2001:db8::/32")].into())
    );
}

#[test]
fn an_ipv6_loopback_endpoint_skips_the_whole_service() {
    let d = run(
        vec![legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"])],
        vec![
            slice("job-1", "IPv4", 22, &["10.244.1.5"]),
            slice("job-1", "IPv6", 22, &["::1"]),
        ],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert!(d.mappings.is_empty());
    assert!(
        d.notes
            .iter()
            .any(|n| matches!(n, Note::Invalid { service, .. } if service == "jobs/job-1")),
        "{:?}",
        d.notes
    );
}

#[test]
fn a_slice_lists_only_addresses_of_its_address_type() {
    // An FQDN slice and a stray address of the other family give nothing.
    let mut stray = slice("job-1", "IPv4", 22, &["10.244.1.5"]);
    stray["endpoints"][0]["addresses"] = json!(["fd00:244:1::5"]);
    let mut fqdn = slice("job-1", "FQDN", 22, &["pod.example.org"]);
    fqdn["metadata"]["name"] = json!("job-1-fqdn");
    let d = run(
        vec![legacy("job-1", &[SSH_IP6, SSH_IP], &["IPv4", "IPv6"])],
        vec![stray, fqdn],
        &policy(&[SSH_IP, SSH_IP6]),
    );
    assert!(d.mappings.is_empty());
}
