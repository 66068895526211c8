//! The controller with an IPv6 SSH IP, end to end: on a dual-stack cluster
//! (the fake API server playing one), a controller given the IPv6 SSH IP
//! first and the IPv4 one second makes dual-stack Services, publishes the
//! IPv6 endpoint, and the ssh command it prints reaches the pod through
//! the agent over IPv6, as OpenSSH reads it.

use std::time::Duration;

use crate::common::EXTERNAL_IP;
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    cmd::eventually,
    fake_api::{FakeApi, IpFamily, Kind},
    privilege,
    topology::{CLIENT_IP6, EXT_IFACE, EXTERNAL_IP6, pod_ip6},
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(20);

/// Pod 1, asking for SSH, with both its addresses.
fn rank_0(ip4: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-6-rank-0", "namespace": "jobs",
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": ip4,
                   "podIPs": [{"ip": ip4}, {"ip": pod_ip6(1)}],
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_first_controller_publishes_an_ipv6_command_that_reaches_the_pod() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    topo.add_ipv6().unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.dual_stack(IpFamily::Ipv4);
    let dir = tempfile::tempdir().unwrap();
    let mut agent_args = api.agent_args(dir.path(), EXTERNAL_IP);
    agent_args.extend(["--ssh-ip".into(), EXTERNAL_IP6.into()]);
    let bpffs = Bpffs::new().unwrap();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let kubeconfig = dir.path().join("kubeconfig").display().to_string();
    let controller_args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig,
        "--ssh-ip",
        EXTERNAL_IP6,
        "--ssh-ip",
        EXTERNAL_IP,
        "--ssh-user",
        "root",
        "--identity",
        "e2e",
        "--lease-namespace",
        "ssh-fwd",
    ]
    .map(String::from)
    .to_vec();
    let _controller =
        Agent::start_controller(node, dir.path().join("controller.log"), &controller_args).unwrap();

    api.apply(Kind::Pod, rank_0(&topo.pods[0].ip));
    let event: Value = eventually("the SSHReady event", WAIT, || {
        api.list(Kind::Event).into_iter().find(|e| {
            e["regarding"]["name"] == "job-6-rank-0" && e["reason"] == vocabulary::reason::SSH_READY
        })
    });
    let printed = event["note"].as_str().unwrap().to_owned();
    let command = printed
        .strip_prefix("SSH: Connected! Available at: ")
        .unwrap_or_else(|| panic!("unexpected event text: {printed}"))
        .to_owned();
    let port: u16 = command.rsplit_once(" -p ").unwrap().1.parse().unwrap();
    assert_eq!(command, format!("ssh root@{EXTERNAL_IP6} -p {port}"));
    let pod = api.get(Kind::Pod, "jobs", "job-6-rank-0").unwrap();
    assert_eq!(
        pod["metadata"]["annotations"][vocabulary::ENDPOINT],
        format!("[{EXTERNAL_IP6}]:{port}")
    );
    let service = api.get(Kind::Service, "jobs", "ssh-job-6-rank-0").unwrap();
    assert_eq!(
        (
            &service["spec"]["ipFamilies"],
            &service["spec"]["ipFamilyPolicy"]
        ),
        (&json!(["IPv6", "IPv4"]), &json!("RequireDualStack")),
        "{service}"
    );
    let listing = |ip: &str| json!({"ip": ip, "ports": [{"port": port, "protocol": "TCP"}]});
    assert_eq!(
        service["status"]["loadBalancer"]["ingress"],
        json!([listing(EXTERNAL_IP6), listing(EXTERNAL_IP)])
    );
    let leases = api.list(Kind::Lease);
    assert!(
        leases.iter().any(|l| l["metadata"]["name"]
            == format!("ssh-port-fd00-0198-0000-0000-0000-0000-0000-0010-{port}")),
        "the port's reservation, named after the IPv6 SSH IP: {leases:?}"
    );

    // The command as printed, pasted into OpenSSH, lands in the pod over
    // IPv6; the IPv4 SSH IP serves the same port.
    let ssh = topo.ssh();
    let landed = eventually("ssh through the published command", WAIT, || {
        ssh.run_pasted(&topo.client, &command, "hostname; echo $SSH_CLIENT")
            .ok()
    });
    let mut lines = landed.lines();
    assert_eq!(lines.next(), Some(topo.pods[0].hostname.as_str()));
    let client = lines.next().unwrap_or_default();
    assert!(
        client.starts_with(&format!("{CLIENT_IP6} ")),
        "came over IPv6: {client:?}"
    );
    let over_ipv4 = ssh
        .run(&topo.client, EXTERNAL_IP, port, "hostname")
        .unwrap();
    assert_eq!(over_ipv4, topo.pods[0].hostname);
}
