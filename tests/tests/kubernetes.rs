//! The agent in Kubernetes mode, end to end: a fake API server inside the
//! node namespace, the real agent watching it, real ssh through the maps.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use std::time::Duration;

use common::{EXTERNAL_IP, Session, refused};
use serde_json::{Value, json};
use ssh_fwd_tests::{
    Agent, Bpffs, Topology, cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

fn lb_service(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "ssh-fwd.io/ssh", "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": port, "targetPort": 22, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": EXTERNAL_IP}]}}
    })
}

fn legacy_service(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"externalIPs": [EXTERNAL_IP], "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}]}
    })
}

fn slice(service: &str, port_name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
    })
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    assert!(
        cmd::wait_until(Duration::from_secs(15), &mut check),
        "timed out waiting for: {what}"
    );
}

#[test]
fn agent_follows_services_and_endpointslices_and_survives_losing_the_api() {
    if !privilege::check("agent_follows_services_and_endpointslices_and_survives_losing_the_api") {
        return;
    }
    let topo = Topology::single_node(2).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.apply(Kind::Service, lb_service("job-a", 8123));
    api.apply(Kind::EndpointSlice, slice("job-a", "ssh", "10.244.1.5"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--ssh-ip",
        EXTERNAL_IP,
        "--metrics-addr",
        "127.0.0.1:9102",
        "--resync-interval",
        "2s",
    ]
    .map(String::from)
    .to_vec();
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let ssh = topo.ssh();
    let hostname = |port| {
        ssh.run(&topo.client, EXTERNAL_IP, port, "hostname")
            .unwrap_or_default()
    };

    // LoadBalancer-class Service -> its ready endpoint.
    assert_eq!(hostname(8123), "pod-1");
    // The pod moves: new logins land on the new IP.
    api.apply(Kind::EndpointSlice, slice("job-a", "ssh", "10.244.2.5"));
    eventually("job-a moved to pod-2", || hostname(8123) == "pod-2");
    // A legacy externalIPs Service appears; job-a is deleted -> refused.
    api.apply(Kind::Service, legacy_service("job-b", 8124));
    api.apply(Kind::EndpointSlice, slice("job-b", "", "10.244.1.5"));
    eventually("job-b mapped", || hostname(8124) == "pod-1");
    let mut session = Session::open(&ssh, &topo.client, 8124).unwrap();
    api.delete(Kind::Service, "jobs", "job-a");
    eventually("job-a's port refused", || refused(&topo.client, 8123));

    // Metrics and readiness.
    let metrics = cmd::run(node.command("bash").args([
        "-c",
        "exec 3<>/dev/tcp/127.0.0.1/9102; printf 'GET /metrics HTTP/1.1\\r\\n\\r\\n' >&3; cat <&3",
    ]))
    .unwrap();
    assert!(metrics.contains("ssh_fwd_mappings 1"), "{metrics}");
    assert!(
        metrics.contains("ssh_fwd_mapping_packets_total{mapping=\"jobs/job-b\""),
        "{metrics}"
    );
    let ready = cmd::run(node.command("bash").args([
        "-c",
        "exec 3<>/dev/tcp/127.0.0.1/9102; printf 'GET /readyz HTTP/1.1\\r\\n\\r\\n' >&3; cat <&3",
    ]))
    .unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    // The API goes away: maps stay, the session and new logins keep working,
    // across several resyncs.
    api.cut();
    session.echo("api-gone").unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(hostname(8124), "pod-1");
    session.echo("still-api-gone").unwrap();
    assert!(agent.log().contains("watch failed"), "{}", agent.log());
    assert!(
        !agent
            .log()
            .contains("mapping removed\",\"frontend\":\"198.18.0.10:8124"),
        "{}",
        agent.log()
    );
    drop(session);
    drop(agent);
}

#[test]
fn restarted_agent_changes_nothing_until_the_api_answers() {
    if !privilege::check("restarted_agent_changes_nothing_until_the_api_answers") {
        return;
    }
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.apply(Kind::Service, lb_service("job-a", 8123));
    api.apply(Kind::EndpointSlice, slice("job-a", "ssh", "10.244.1.5"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--ssh-ip",
        EXTERNAL_IP,
    ]
    .map(String::from)
    .to_vec();
    let mut agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let mut session = Session::open(&topo.ssh(), &topo.client, 8123).unwrap();
    agent.stop().unwrap();

    // The API is down while the new agent starts: it adopts the pinned maps
    // and must not treat its empty caches as "no Services".
    api.cut();
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    let log = dir.path().join("agent2.log");
    let mut second = KillOnDrop(
        node.command(bin.to_str().unwrap())
            .args([
                "agent",
                "--iface",
                EXT_IFACE,
                "--log-format",
                "json",
                "--bpffs",
            ])
            .arg(bpffs.path())
            .args(&args)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    eventually("second agent waiting for the API", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("waiting for complete lists")
    });
    std::thread::sleep(Duration::from_secs(3));
    session.echo("during-restart").unwrap();
    assert_eq!(
        topo.ssh()
            .run(&topo.client, EXTERNAL_IP, 8123, "hostname")
            .unwrap(),
        "pod-1"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("mapping removed") && !text.contains("agent ready"),
        "{text}"
    );

    // The API answers again: the agent becomes ready with nothing removed.
    api.restore();
    eventually("second agent ready", || {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        t.contains("agent ready")
    });
    session.echo("after-restart").unwrap();
    // SAFETY: stopping our own child.
    unsafe { libc::kill(second.0.id() as i32, libc::SIGTERM) };
    second.0.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("mapping removed"), "{text}");
}

/// Kills a child if the test ends early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
