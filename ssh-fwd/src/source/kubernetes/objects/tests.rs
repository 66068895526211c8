use serde_json::json;

use super::*;

#[test]
fn only_the_service_name_label_is_kept_of_a_slice() {
    let slice: WireSlice = serde_json::from_value(json!({
        "metadata": {"name": "s-1", "namespace": "jobs", "resourceVersion": "7",
                     "labels": {"kubernetes.io/service-name": "job-1", "other": "x"},
                     "annotations": {"big": "x".repeat(10_000)},
                     "managedFields": [{"manager": "kube-controller-manager"}]},
        "addressType": "IPv4",
        "ports": [{"name": "ssh", "port": 22}],
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                      {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                      {"addresses": ["10.0.0.3"]}]
    }))
    .unwrap();
    let meta = kube::Resource::meta(&slice);
    assert_eq!(meta.resource_version.as_deref(), Some("7"));
    assert_eq!(meta.labels.as_ref().map(|l| l.len()), Some(1));
    assert!(meta.annotations.is_none() && meta.managed_fields.is_none());
    let view = slice.view();
    assert_eq!(view.service.as_deref(), Some("jobs/job-1"));
    assert_eq!(
        *view.ready,
        [
            "10.0.0.1".parse::<IpAddr>().unwrap(),
            "10.0.0.3".parse().unwrap()
        ]
    );
}

#[test]
fn a_ready_endpoint_names_its_pod_and_other_targets_name_none() {
    let slice: WireSlice = serde_json::from_value(json!({
        "metadata": {"name": "s-1", "namespace": "jobs"},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.0.1"], "targetRef": {"kind": "Pod", "name": "job-1-0"}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false},
             "targetRef": {"kind": "Pod", "name": "job-1-1"}},
            {"addresses": ["10.0.0.3"], "targetRef": {"kind": "Node", "name": "n"}},
            {"addresses": ["10.0.0.4"],
             "targetRef": {"kind": "Pod", "namespace": "other", "name": "p"}},
            {"addresses": ["10.0.0.5"]}
        ]
    }))
    .unwrap();
    let pods = slice.view().pods;
    let at = |ip: &str, name: &str| PodAt {
        ip: ip.parse().unwrap(),
        name: name.into(),
        uid: None,
    };
    assert_eq!(
        *pods,
        [at("10.0.0.1", "jobs/job-1-0"), at("10.0.0.4", "other/p")]
    );
}

#[test]
fn a_load_balancers_ingress_counts_only_for_our_class() {
    let service = |class: &str| -> WireService {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "jobs"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": class,
                     "ports": [{"port": 8022, "targetPort": "ssh"}, {"port": 8023}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}, {"hostname": "x"}]}}
        }))
        .unwrap()
    };
    let ours = service(vocabulary::LB_CLASS).view();
    assert!(ours.ours && !ours.node_ports_off);
    assert_eq!(
        *ours.ingress,
        [Ingress {
            ip: "198.18.0.10".parse().unwrap(),
            ports: [].into()
        }]
    );
    assert_eq!(ours.grant, None);
    assert_eq!(ours.ports[0].numeric_target, None, "named: from the slice");
    assert_eq!(ours.ports[1].numeric_target, Some(8023), "defaults to port");
    assert!(service("metallb.io/x").view().ingress.is_empty());
}

#[test]
fn an_ipv6_slice_keeps_its_ipv6_addresses_and_services_their_addresses_of_both_families() {
    let slice: WireSlice = serde_json::from_value(json!({
        "metadata": {"name": "s-6", "namespace": "jobs",
                     "labels": {"kubernetes.io/service-name": "job-1"}},
        "addressType": "IPv6",
        "endpoints": [{"addresses": ["fd00:244:1::5"], "targetRef": {"kind": "Pod", "name": "p"}},
                      {"addresses": ["10.0.0.1"]}]
    }))
    .unwrap();
    let view = slice.view();
    let pod: IpAddr = "fd00:244:1::5".parse().unwrap();
    assert_eq!(view.family, Some(Family::V6));
    assert_eq!(
        *view.ready,
        [pod],
        "an address of the other family is no endpoint"
    );
    let at = PodAt {
        ip: pod,
        name: "jobs/p".into(),
        uid: None,
    };
    assert_eq!(*view.pods, [at]);
    let service: WireService = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": "jobs"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                 "externalIPs": ["2001:db8::10", "198.18.0.10", "nope"]},
        "status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::11"}, {"ip": "198.18.0.11"}]}}
    }))
    .unwrap();
    let view = service.view();
    let ips = |texts: [&str; 2]| texts.map(|t| t.parse::<IpAddr>().unwrap());
    assert_eq!(*view.external_ips, ips(["2001:db8::10", "198.18.0.10"]));
    let ingress: Vec<IpAddr> = view.ingress.iter().map(|i| i.ip).collect();
    assert_eq!(ingress, ips(["2001:db8::11", "198.18.0.11"]));
}

#[test]
fn the_grant_and_the_ports_each_ingress_lists_are_read_off_the_status() {
    let grant = Grant {
        port: 8022,
        pod_uid: "u-1".into(),
    };
    let service: WireService = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": "jobs"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS},
        "status": {
            "loadBalancer": {"ingress": [
                {"ip": "198.18.0.10", "ipMode": "VIP",
                 "ports": [{"port": 8022, "protocol": "TCP"}, {"port": 8023, "protocol": "UDP"}]},
                {"ip": "fd00:198::10"}
            ]},
            "conditions": [
                {"type": "Other", "status": "True", "reason": "X", "message": "m",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": vocabulary::GRANTED, "status": "True", "reason": "PortGranted",
                 "message": grant.message("jobs/job-1"),
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }
    }))
    .unwrap();
    let view = service.view();
    assert_eq!(view.grant, Some(grant));
    assert_eq!(&*view.ingress[0].ports, [8022], "TCP ports only");
    assert!(view.ingress[1].ports.is_empty());
}

#[test]
fn an_endpoint_names_its_pod_by_uid_as_the_endpoint_slice_controller_writes_it() {
    let slice: WireSlice = serde_json::from_value(json!({
        "metadata": {"name": "s-1", "namespace": "jobs"},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"],
                       "targetRef": {"kind": "Pod", "name": "job-1", "namespace": "jobs", "uid": "u-1"}}]
    }))
    .unwrap();
    assert_eq!(slice.view().pods[0].uid.as_deref(), Some("u-1"));
}
