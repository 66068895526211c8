use serde_json::{Value, json};

use crate::source::kubernetes::desired::Styles;
use crate::vocabulary;

use super::*;

pub fn pod(name: &str, uid: &str, annotations: Value) -> PodView {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "jobs", "uid": uid,
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}, "annotations": annotations},
        "status": {"podIP": "10.244.0.5", "phase": "Running"},
    }))
    .unwrap()
}

fn settings(style: ServiceStyle) -> Settings {
    Settings {
        ssh_ips: SshIps::single("198.18.0.10".parse().unwrap()),
        style,
    }
}

#[test]
fn service_names_are_dns_labels_stable_and_distinct() {
    assert_eq!(service_name("job-42-rank-0"), "ssh-job-42-rank-0");
    assert_eq!(service_name("a.b"), "ssh-a-b");
    let long_a = format!("{}-a", "x".repeat(80));
    let long_b = format!("{}-b", "x".repeat(80));
    let (a, b) = (service_name(&long_a), service_name(&long_b));
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert_eq!(a, service_name(&long_a));
    assert!(
        a.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    );
}

#[test]
fn load_balancer_service_selects_only_its_pod_and_is_owned_by_it() {
    let pod = pod("job-1", "uid-1", json!({}));
    let svc = build(
        &pod,
        8123,
        IntOrString::Int(22),
        &settings(ServiceStyle::Loadbalancer),
    );
    let value = serde_json::to_value(&svc).unwrap();
    assert_eq!(
        value["spec"],
        json!({
            "type": "LoadBalancer",
            "ipFamilyPolicy": "SingleStack",
            "ipFamilies": ["IPv4"],
            "loadBalancerClass": vocabulary::LB_CLASS,
            "allocateLoadBalancerNodePorts": false,
            "selector": {vocabulary::SERVICE: "ssh-job-1"},
            "ports": [{"name": "ssh", "protocol": "TCP", "port": 8123, "targetPort": 22}],
        })
    );
    assert_eq!(value["metadata"]["namespace"], "jobs");
    assert_eq!(
        value["metadata"]["labels"][vocabulary::PROXY_NAME_LABEL],
        "ssh-fwd"
    );
    assert_eq!(value["metadata"]["labels"][vocabulary::POD_UID], "uid-1");
    assert_eq!(
        value["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "job-1", "uid": "uid-1", "controller": true}])
    );
    assert!(is_managed(&svc));
}

#[test]
fn external_ips_service_lists_the_ssh_ip() {
    let pod = pod("job-1", "uid-1", json!({}));
    let value = serde_json::to_value(build(
        &pod,
        8123,
        IntOrString::Int(22),
        &settings(ServiceStyle::Externalips),
    ))
    .unwrap();
    assert_eq!(value["spec"]["type"], "ClusterIP");
    assert_eq!(value["spec"]["externalIPs"], json!(["198.18.0.10"]));
    assert!(value["spec"]["loadBalancerClass"].is_null());
    // IPv4 whatever the cluster's primary family: the SSH IP is IPv4, and
    // a Service left to the default would get only IPv6 endpoints on an
    // IPv6-primary cluster.
    assert_eq!(value["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(value["spec"]["ipFamilyPolicy"], "SingleStack");
}

#[test]
fn the_services_ask_for_the_ssh_ips_families_the_published_one_first() {
    use crate::controller::ssh_ips::SshIps;
    let pod = pod("job-1", "uid-1", json!({}));
    let spec = |ips: &[&str], style| {
        let ips: Vec<std::net::IpAddr> = ips.iter().map(|ip| ip.parse().unwrap()).collect();
        let settings = Settings {
            ssh_ips: SshIps::new(&ips).unwrap(),
            style,
        };
        let svc = build(&pod, 8123, IntOrString::Int(22), &settings);
        serde_json::to_value(svc).unwrap()["spec"].clone()
    };
    let v6 = spec(&["2001:db8::10"], ServiceStyle::Loadbalancer);
    assert_eq!(
        (&v6["ipFamilies"], &v6["ipFamilyPolicy"]),
        (&json!(["IPv6"]), &json!("SingleStack"))
    );
    let dual = spec(&["2001:db8::10", "198.18.0.10"], ServiceStyle::Loadbalancer);
    assert_eq!(
        (&dual["ipFamilies"], &dual["ipFamilyPolicy"]),
        (&json!(["IPv6", "IPv4"]), &json!("RequireDualStack"))
    );
    let legacy = spec(&["198.18.0.10", "2001:db8::10"], ServiceStyle::Externalips);
    assert_eq!(
        legacy["externalIPs"],
        json!(["198.18.0.10", "2001:db8::10"])
    );
    assert_eq!(legacy["ipFamilies"], json!(["IPv4", "IPv6"]));
}

#[test]
fn target_port_annotation_takes_a_number_or_a_name() {
    let numbered = pod("p", "u", json!({vocabulary::TARGET_PORT: "2222"}));
    assert_eq!(target_port(&numbered), Ok(IntOrString::Int(2222)));
    let named = pod("p", "u", json!({vocabulary::TARGET_PORT: "sshd"}));
    assert_eq!(target_port(&named), Ok(IntOrString::String("sshd".into())));
    assert_eq!(
        target_port(&pod("p", "u", json!({}))),
        Ok(IntOrString::Int(22))
    );
}

#[test]
fn target_ports_the_api_server_would_refuse_are_reported_with_the_fix() {
    for bad in [
        "0",
        "99999",
        "-1",
        "bad name",
        "SSH",
        "2222-",
        "a--b",
        "sixteen-chars-xx",
        "123-456",
        "99999999999",
    ] {
        let p = pod("p", "u", json!({vocabulary::TARGET_PORT: bad}));
        let error = target_port(&p).expect_err(bad);
        assert_eq!(error, InvalidTargetPort(bad.into()));
        let message = error.to_string();
        assert!(message.contains(vocabulary::TARGET_PORT), "{message}");
        assert!(message.contains(&format!("`{bad}`")), "{message}");
        assert!(message.contains("remove it for port 22"), "{message}");
    }
    for good in ["1", "65535", "ssh", "ssh-2", "s15-chars-xxxxx"] {
        let p = pod("p", "u", json!({vocabulary::TARGET_PORT: good}));
        assert!(target_port(&p).is_ok(), "{good}");
    }
}

fn policy(styles: Styles) -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: ["198.18.0.10".parse().unwrap()].into(),
        ports: 8000..=16000,
        styles,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

#[test]
fn claims_count_services_on_the_ssh_ip_only() {
    let ip = &policy(Styles::ALL);
    let foreign: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"externalIPs": ["198.18.0.99"], "ports": [{"port": 8200}]},
    }))
    .unwrap();
    assert!(claims(&foreign, ip).is_empty());
    let legacy: Service = serde_json::from_value(json!({
        "metadata": {"name": "old", "namespace": "default"},
        "spec": {"externalIPs": ["198.18.0.10"], "ports": [{"port": 8200}, {"port": 8201, "protocol": "UDP"}]},
    }))
    .unwrap();
    assert_eq!(
        claims(&legacy, ip)
            .iter()
            .map(|c| c.port)
            .collect::<Vec<_>>(),
        [8200]
    );
    // Ours holds its port once granted (before, its reservation holds it).
    let mut ours = build(
        &pod("job", "u", json!({})),
        9000,
        IntOrString::Int(22),
        &settings(ServiceStyle::Loadbalancer),
    );
    assert!(claims(&ours, ip).is_empty());
    ours.status =
        serde_json::from_value(crate::k8s::grant::status_json(&["198.18.0.10"], 9000, "u"))
            .unwrap();
    let claimed = claims(&ours, ip);
    assert_eq!((claimed[0].port, claimed[0].granted), (9000, true));
}

#[test]
fn a_service_holds_only_the_port_granted_to_it_whatever_its_spec_lists() {
    let mut ours = build(
        &pod("job", "u", json!({})),
        9000,
        IntOrString::Int(22),
        &settings(ServiceStyle::Loadbalancer),
    );
    ours.status =
        serde_json::from_value(crate::k8s::grant::status_json(&["198.18.0.10"], 9000, "u"))
            .unwrap();
    let spec = ours.spec.as_mut().unwrap();
    let mut stolen = spec.ports.as_ref().unwrap()[0].clone();
    stolen.name = Some("stolen".into());
    stolen.port = 9001;
    spec.ports.as_mut().unwrap().push(stolen);
    let ports: Vec<u16> = claims(&ours, &policy(Styles::ALL))
        .iter()
        .map(|c| c.port)
        .collect();
    assert_eq!(ports, [9000]);
}

#[test]
fn ours_is_known_by_its_owner_and_name_and_never_by_a_label_alone() {
    let made = build(
        &pod("job", "u", json!({})),
        9000,
        IntOrString::Int(22),
        &settings(ServiceStyle::Loadbalancer),
    );
    assert_eq!(served_pod(&made), Some("u"));
    let mut labelled_only = made.clone();
    labelled_only.metadata.owner_references = None;
    assert_eq!(served_pod(&labelled_only), None, "the label alone");
    let mut renamed = made.clone();
    renamed.metadata.name = Some("ssh-other".into());
    assert_eq!(served_pod(&renamed), None, "named for another pod");
    let mut unlabelled = made.clone();
    unlabelled.metadata.labels = None;
    assert_eq!(served_pod(&unlabelled), None, "neither label nor grant");
    unlabelled.status =
        serde_json::from_value(crate::k8s::grant::status_json(&["198.18.0.10"], 9000, "u"))
            .unwrap();
    assert_eq!(served_pod(&unlabelled), Some("u"), "its grant");
    unlabelled.status =
        serde_json::from_value(crate::k8s::grant::status_json(&["198.18.0.10"], 9000, "v"))
            .unwrap();
    assert_eq!(served_pod(&unlabelled), None, "a grant for another pod");
}

#[test]
fn others_hold_ports_only_as_the_agents_honour_them() {
    let service = |spec: Value, status: Value| -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "theirs", "namespace": "default"},
            "spec": spec, "status": status,
        }))
        .unwrap()
    };
    let ports = |svc: &Service, styles| {
        claims(svc, &policy(styles))
            .iter()
            .map(|c| c.port)
            .collect::<Vec<_>>()
    };
    let on_ip = crate::k8s::grant::status_json(&["198.18.0.10"], 8300, "u");
    let ungranted = json!({"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}});
    let legacy = service(
        json!({"externalIPs": ["198.18.0.10"], "ports": [{"port": 8200}, {"port": 20000}]}),
        json!({}),
    );
    assert_eq!(
        ports(&legacy, Styles::ALL),
        [8200],
        "outside the range: ignored"
    );
    let lb_only = Styles {
        load_balancer: true,
        external_ips: false,
    };
    assert!(
        ports(&legacy, lb_only).is_empty(),
        "a shape the agents leave out"
    );
    let our_class = json!({"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                           "allocateLoadBalancerNodePorts": false, "ports": [{"port": 8300}]});
    assert_eq!(
        ports(&service(our_class.clone(), on_ip.clone()), lb_only),
        [8300]
    );
    assert!(
        ports(&service(our_class, ungranted), lb_only).is_empty(),
        "an address in the status without the controller's grant"
    );
    let another_class = json!({"type": "LoadBalancer", "loadBalancerClass": "metallb",
                               "ports": [{"port": 8300}]});
    assert!(
        ports(&service(another_class, on_ip.clone()), Styles::ALL).is_empty(),
        "only our class's status counts"
    );
    let node_ports = json!({"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                            "ports": [{"port": 8300}]});
    assert!(
        ports(&service(node_ports, on_ip), Styles::ALL).is_empty(),
        "the agents refuse it whole"
    );
}

/// The controller's pruned Service must read the same as the whole one
/// under the agents' rule, or a Service they route would look ignored.
#[test]
fn a_pruned_service_reads_as_the_whole_one_to_the_agents_rule() {
    use crate::source::kubernetes::objects::ServiceView;
    let whole: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "theirs", "namespace": "other", "uid": "u1",
                     "creationTimestamp": "2025-01-01T00:00:00Z",
                     "annotations": {"a": "b"}, "labels": {"l": "v"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                 "allocateLoadBalancerNodePorts": false, "externalIPs": ["198.18.0.10"],
                 "clusterIP": "10.96.0.9", "sessionAffinity": "None",
                 "ports": [{"name": "ssh", "port": 8000, "targetPort": 22, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}}
    }))
    .unwrap();
    let mut pruned = whole.clone();
    crate::controller::leader::prune_service(&mut pruned);
    assert_eq!(ServiceView::of(&pruned), ServiceView::of(&whole));
    assert!(ServiceView::of(&pruned).node_ports_off);
}
