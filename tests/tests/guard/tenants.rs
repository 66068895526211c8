//! Tenants tighten, never loosen: in Kubernetes mode a Service's source
//! ranges (the annotation or `spec.loadBalancerSourceRanges`) and its
//! `ssh-fwd.io/syn-rate` only narrow the agent's `--allow` and
//! `--syn-rate`. Through the fake API server, with real OpenSSH.

use std::time::Duration;

use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology, cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    topology::{CLIENT_IP, EXT_IFACE},
};

use super::{EXTERNAL_IP, STRANGER_IP, connect_flood, connect_to, stranger};

/// What the agent logs once for a Service that asks for more.
const NARROWED: &str = "Service asks for more than the agent's --allow or --syn-rate admit";

/// A LoadBalancer-class Service on `port` with `spec` and `annotations`
/// merged in.
fn service(name: &str, port: u16, spec: Value, annotations: Value) -> Value {
    let mut svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"},
                     "annotations": annotations},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS, "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": port, "targetPort": 22, "protocol": "TCP"}]},
        "status": ssh_fwd_tests::grant::status(&[EXTERNAL_IP], port, &format!("uid-{name}"))
    });
    if let (Some(to), Some(from)) = (svc["spec"].as_object_mut(), spec.as_object()) {
        to.extend(from.clone());
    }
    svc
}

fn slice(service: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": "jobs",
                     "labels": {"kubernetes.io/service-name": service,
                                "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
        "endpoints": [ssh_fwd_tests::grant::endpoint("10.244.1.5", "jobs", service, &format!("uid-{service}"))]
    })
}

/// One node with pod 1, the fake API holding `services` (each with its
/// slice), the agent watching it with `extra` flags, and the stranger's
/// address on the client.
struct KubeBed {
    topo: Topology,
    api: FakeApi,
    bpffs: Bpffs,
    agent: Agent,
    _dir: tempfile::TempDir,
}

impl KubeBed {
    fn start(services: &[(&str, Value)], extra: &[&str]) -> Self {
        let topo = Topology::single_node(1).unwrap();
        let node = &topo.nodes[0].ns;
        let api = FakeApi::start(node).unwrap();
        for (name, svc) in services {
            api.apply(Kind::Service, svc.clone());
            api.apply(Kind::EndpointSlice, slice(name));
        }
        let dir = tempfile::tempdir().unwrap();
        let mut args = api.agent_args(dir.path(), EXTERNAL_IP);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let bpffs = Bpffs::new().unwrap();
        let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
        topo.client
            .ip(&["addr", "add", &format!("{STRANGER_IP}/24"), "dev", "eth0"])
            .unwrap();
        Self {
            topo,
            api,
            bpffs,
            agent,
            _dir: dir,
        }
    }

    /// The row of the frontend on `port` in `ssh-fwd list`, once there.
    fn row(&self, port: u16) -> Value {
        let frontend = format!("{EXTERNAL_IP}:{port}");
        let mut found = None;
        let present = cmd::wait_until(Duration::from_secs(15), || {
            let mappings = self.bpffs.list_of("mappings").unwrap_or_default();
            found = (mappings.as_array().into_iter().flatten())
                .find(|m| m["frontend"] == frontend.as_str())
                .cloned();
            found.is_some()
        });
        assert!(present, "no mapping on {frontend}");
        found.unwrap()
    }

    fn hostname(&self, port: u16) -> String {
        (self.topo.ssh())
            .run(&self.topo.client, EXTERNAL_IP, port, "hostname")
            .unwrap_or_default()
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_service_listing_every_source_cannot_widen_the_agents_allow() {
    privilege::require();
    let every = json!(["0.0.0.0/0"]);
    let bed = KubeBed::start(
        &[
            (
                "by-annotation",
                service(
                    "by-annotation",
                    8123,
                    json!({}),
                    json!({vocabulary::SOURCE_RANGES: "0.0.0.0/0"}),
                ),
            ),
            (
                "by-spec",
                service(
                    "by-spec",
                    8124,
                    json!({"loadBalancerSourceRanges": every}),
                    json!({}),
                ),
            ),
        ],
        &["--allow", &format!("{CLIENT_IP}/32")],
    );
    // The listed client logs in; the stranger, outside --allow, gets no
    // answer through either Service's list.
    let mut answered = Vec::new();
    for port in [8123, 8124] {
        bed.row(port);
        assert_eq!(bed.hostname(port), "pod-1", "the listed client on {port}");
        let (result, took) = connect_to(&bed.topo.client, stranger(), port);
        if result.is_ok() || took < Duration::from_millis(2900) {
            answered.push(format!("{port}: {result:?} after {took:?}"));
        }
    }
    assert!(
        answered.is_empty(),
        "the stranger outside --allow got an answer: {answered:?}"
    );
    for port in [8123, 8124] {
        let row = bed.row(port);
        assert!(row["denied"].as_u64() > Some(0), "counted as denied: {row}");
        assert_eq!(row["allow"], json!([format!("{CLIENT_IP}/32")]), "{row}");
    }
    // Told once per Service, and not again when the Service changes in a
    // way that cuts the same.
    let told = |n| {
        let mut agent_log = String::new();
        let seen = cmd::wait_until(Duration::from_secs(5), || {
            agent_log = bed.agent.log();
            agent_log.matches(NARROWED).count() == n
        });
        assert!(seen, "{n} warnings expected: {agent_log}");
    };
    told(2);
    assert!(
        bed.agent
            .log()
            .contains("source range 0.0.0.0/0 cut by --allow to 192.0.2.2/32"),
        "{}",
        bed.agent.log()
    );
    let relabel = json!({"metadata": {"labels": {"team": "a"}}});
    bed.api.patch(Kind::Service, "jobs", "by-spec", &relabel);
    bed.api.apply(Kind::EndpointSlice, slice("by-annotation"));
    // Must not happen within: a change that cuts the same is not told
    // again (the agent reconciles within a second of a change).
    std::thread::sleep(Duration::from_secs(2));
    told(2);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_services_syn_rate_off_or_higher_leaves_the_agents_rate_in_force() {
    privilege::require();
    let bed = KubeBed::start(
        &[(
            "unlimited",
            service(
                "unlimited",
                8123,
                json!({}),
                json!({vocabulary::SYN_RATE: "off"}),
            ),
        )],
        &["--syn-rate", "1/s", "--syn-burst", "3"],
    );
    bed.row(8123);
    // Twenty connects within 20 ms: the burst (and at most one more, two
    // CPUs taking the last token at once), not all twenty.
    let burst = connect_flood(
        &bed.topo.client,
        stranger(),
        8123,
        20,
        Duration::from_millis(1),
    )
    .unwrap();
    assert!(
        (3..=4).contains(&burst.connected),
        "syn-rate: off lifted --syn-rate: {burst:?}"
    );
    let row = bed.row(8123);
    assert_eq!(
        (row["syn_rate"].as_str(), row["syn_burst"].as_u64()),
        (Some("1/s"), Some(3)),
        "{row}"
    );
    assert_eq!(
        row["syn_limited"].as_u64(),
        Some(20 - burst.connected),
        "{row}"
    );
    // A rate above the agent's is cut to it as well.
    let higher = json!({"metadata": {"annotations": {vocabulary::SYN_RATE: "1000/s"}}});
    bed.api.patch(Kind::Service, "jobs", "unlimited", &higher);
    let mut agent_log = String::new();
    let told = cmd::wait_until(Duration::from_secs(10), || {
        agent_log = bed.agent.log();
        agent_log.contains("syn-rate 1000/s is above --syn-rate: 1/s applies")
    });
    assert!(told, "{agent_log}");
    assert_eq!(bed.row(8123)["syn_rate"], "1/s");
}
