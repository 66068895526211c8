//! The agent in Kubernetes mode with IPv6: a dual-stack Service followed
//! to each of its pod's addresses, over real ssh, from a fake API server
//! playing a dual-stack cluster.

use std::time::Duration;

use crate::common::EXTERNAL_IP;
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, Topology,
    cmd::eventually,
    fake_api::{FakeApi, IpFamily, Kind},
    privilege,
    topology::{CLIENT_IP6, EXT_IFACE, EXTERNAL_IP6, pod_ip6},
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(15);

/// A LoadBalancer of our class, dual-stack, with both SSH IPs in its
/// status, selecting pod `app`.
fn dual_lb(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs",
                     "labels": {vocabulary::PROXY_NAME_LABEL: "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                 "allocateLoadBalancerNodePorts": false,
                 "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"],
                 "selector": {"app": name},
                 "ports": [{"name": "ssh", "port": port, "targetPort": 22, "protocol": "TCP"}]}
    })
}

/// A legacy Service of IPv4 only that lists the IPv6 SSH IP too (the API
/// server takes that).
fn ipv4_only_with_ipv6_external_ip(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs",
                     "labels": {vocabulary::PROXY_NAME_LABEL: "ssh-fwd"}},
        "spec": {"externalIPs": [EXTERNAL_IP6, EXTERNAL_IP], "ipFamilies": ["IPv4"],
                 "selector": {"app": name},
                 "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}]}
    })
}

/// Pod 1 as the API server shows it: both addresses, ready, labelled `app`.
fn pod(app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-0"), "namespace": "jobs", "labels": {"app": app}},
        "spec": {"containers": [{"name": "sshd", "image": "sshd"}]},
        "status": {"phase": "Running", "podIP": "10.244.1.5",
                   "podIPs": [{"ip": "10.244.1.5"}, {"ip": pod_ip6(1)}],
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Whether a TCP connect from `ns` to `ip`'s `port` fails: no mapping, so
/// the data path drops it (an SSH IP exposes only mapped ports) and the
/// connect is given up after 3 s.
fn refused(ns: &NetNs, ip: &str, port: u16) -> bool {
    let out = (ns.command("timeout"))
        .args(["3", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{ip}/{port}"))
        .output();
    matches!(out, Ok(o) if !o.status.success())
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_dual_stack_service_reaches_its_pod_over_each_family_and_an_ipv4_only_one_not_over_ipv6() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    topo.add_ipv6().unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.dual_stack(IpFamily::Ipv4);
    api.create(Kind::Pod, pod("dual")).unwrap();
    api.create(Kind::Pod, pod("legacy")).unwrap();
    api.create(Kind::Service, dual_lb("dual", 8123)).unwrap();
    // Our class's status, as the controller writes it: the grant, on both
    // SSH IPs.
    let uid = api.get(Kind::Pod, "jobs", "dual-0").unwrap()["metadata"]["uid"].clone();
    let status =
        ssh_fwd_tests::grant::status(&[EXTERNAL_IP6, EXTERNAL_IP], 8123, uid.as_str().unwrap());
    api.patch_status(Kind::Service, "jobs", "dual", &json!({"status": status}));
    api.create(
        Kind::Service,
        ipv4_only_with_ipv6_external_ip("legacy", 8124),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut args = api.agent_args(dir.path(), EXTERNAL_IP);
    args.extend(["--ssh-ip".into(), EXTERNAL_IP6.into()]);
    // The second Service is an externalIPs one, honoured only when asked for.
    args.extend(["--honour-styles", "loadbalancer,externalips"].map(String::from));
    let bpffs = Bpffs::new().unwrap();
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let ssh = topo.ssh();
    let login = |ip: &str, port| {
        ssh.run(&topo.client, ip, port, "hostname; echo $SSH_CLIENT")
            .unwrap_or_default()
    };

    let seen = login(EXTERNAL_IP6, 8123);
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("pod-1"), "over IPv6: {seen:?}");
    let client = lines.next().unwrap_or_default();
    assert!(
        client.starts_with(&format!("{CLIENT_IP6} ")),
        "the pod sees the client's IPv6 address, so it came by its IPv6 address: {client:?}"
    );
    assert!(login(EXTERNAL_IP, 8123).starts_with("pod-1\n"), "over IPv4");
    assert!(
        login(EXTERNAL_IP, 8124).starts_with("pod-1\n"),
        "legacy over IPv4"
    );
    assert!(
        refused(&topo.client, EXTERNAL_IP6, 8124),
        "an IPv4-only Service maps nothing on its IPv6 external IP"
    );
    eventually("the warning naming the family", WAIT, || {
        agent.log().contains("endpoints only of the other")
    });

    let mappings = bpffs.list_of("mappings").unwrap();
    let mut frontends: Vec<&str> = (mappings.as_array().into_iter().flatten())
        .filter_map(|m| m["frontend"].as_str())
        .collect();
    frontends.sort_unstable();
    assert_eq!(
        frontends,
        [
            "198.18.0.10:8123",
            "198.18.0.10:8124",
            "[fd00:198::10]:8123"
        ],
        "{mappings}"
    );

    // The Service drops IPv4 (allowed with SingleStack): its IPv4 slice
    // goes, so its IPv4 port closes and its IPv6 one stays.
    api.patch(
        Kind::Service,
        "jobs",
        "dual",
        &json!({"spec": {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"]}}),
    );
    eventually(
        "dual's IPv4 frontend closed after it became IPv6 only",
        WAIT,
        || refused(&topo.client, EXTERNAL_IP, 8123),
    );
    assert!(login(EXTERNAL_IP6, 8123).starts_with("pod-1\n"));
    drop(agent);
}
