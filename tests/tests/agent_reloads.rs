//! Reloads that must never hurt what runs: a file rewritten in place, a
//! file with a dangerous entry, and reloads at the maps' full capacity.

use std::{io::Write as _, process::Command, time::Duration};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND, refused};
use serde_json::{Value, json};
use ssh_fwd_tests::{
    Agent, Bpffs, Topology, agent, cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

/// `count` mappings 198.18.0.10:(9000 + i) -> pod 1, as file text.
fn mappings_text(count: u16) -> String {
    let mut text = String::from("mappings:\n");
    for i in 0..count {
        text.push_str(&format!(
            "  - name: m{i}\n    frontend: 198.18.0.10:{}\n    backend: 10.244.1.5:22\n",
            9000 + i
        ));
    }
    text
}

fn status(bed: &Bed) -> Value {
    let out = cmd::run(
        Command::new(agent::binary().unwrap())
            .args(["status", "-o", "json", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    serde_json::from_str(&out).unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_file_rewritten_in_place_in_slow_chunks_never_drops_mappings() {
    privilege::require();
    // Hundreds of changes are summed up at info; each is counted here.
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &["--log", "info,ssh_fwd::agent::reconcile=debug"],
    )
    .unwrap();
    std::fs::write(&bed.mappings, mappings_text(400)).unwrap();
    // `a` first, then the 400.
    bed.agents[0]
        .wait_for_log_count("mapping added", 401, Duration::from_secs(20))
        .unwrap();
    let summary = bed.agents[0]
        .log()
        .lines()
        .find(|l| l.contains("mappings changed (each one is logged with --log debug)"))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(summary.contains(r#""added":400"#), "{summary}");
    let before = bed.agents[0].count_in_log("mapping removed");
    // Rewritten in place, one more entry at the end, in four chunks that
    // each end on an entry boundary, with pauses the agent polls through.
    let text = mappings_text(401);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut file = std::fs::File::create(&bed.mappings).unwrap();
    for chunk in lines.chunks(lines.len().div_ceil(4)) {
        file.write_all(chunk.concat().as_bytes()).unwrap();
        file.flush().unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    drop(file);
    bed.agents[0]
        .wait_for_log_count("mapping added", 402, Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        bed.agents[0].count_in_log("mapping removed"),
        before,
        "a half-written file was applied:\n{}",
        bed.agents[0].log()
    );
    assert_eq!(
        bed.bpffs[0]
            .list_of("mappings")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        401
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_file_with_a_loopback_backend_is_rejected_counted_and_changes_nothing() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    let log = rejected(
        &mut bed,
        &[
            ("a", "198.18.0.10:8022", "10.244.1.6:22"),
            ("node-sshd", "198.18.0.10:8023", "127.0.0.1:22"),
        ],
    );
    assert!(
        log.contains("entry #2 (node-sshd): backend 127.0.0.1:22 is a loopback address"),
        "{log}"
    );
    assert_eq!(bed.agents[0].count_in_log("mapping changed"), 0, "{log}");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(status(&bed)["reconcile_errors"], 1, "{}", status(&bed));
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_frontend_on_the_nodes_own_interface_address_is_refused() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    // 192.0.2.1 is the node's address on ext0: port 22 there is its sshd.
    let log = rejected(
        &mut bed,
        &[
            ("a", FRONTEND, "10.244.1.5:22"),
            ("capture", "192.0.2.1:22", "10.244.1.5:22"),
        ],
    );
    assert!(
        log.contains("frontend 192.0.2.1:22 is an address of interface ext0"),
        "{log}"
    );
    assert_eq!(bed.agents[0].count_in_log("mapping added"), 1, "{log}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_backend_on_any_address_of_the_node_is_refused() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    // Addresses of the node beyond 127/8: on ext0, on a pod's veth (its
    // gateway), and on lo (exempt as a frontend, where an SSH IP sits; so
    // would a dummy device be, which this kernel may lack: the unit tests
    // have it).
    let node = &bed.topo.nodes[0].ns;
    node.ip(&["addr", "add", "203.0.113.10/32", "dev", "lo"])
        .unwrap();
    for (n, (backend, iface)) in [
        ("192.0.2.1:22", "ext0"),
        ("10.244.1.1:22", "pod1"),
        ("203.0.113.10:22", "lo"),
    ]
    .into_iter()
    .enumerate()
    {
        agent::write_mappings(
            &bed.mappings,
            &[
                ("a", FRONTEND, "10.244.1.5:22"),
                ("node-sshd", "198.18.0.10:8023", backend),
            ],
        )
        .unwrap();
        bed.agents[0]
            .wait_for_log_count("mappings file rejected", n + 1, Duration::from_secs(10))
            .unwrap();
        let log = bed.agents[0].log();
        assert!(
            log.contains(&format!(
                "entry #2 (node-sshd): backend {backend} is an address of this node (interface {iface})"
            )),
            "{log}"
        );
    }
    assert_eq!(bed.agents[0].count_in_log("mapping added"), 1);
    assert!(refused(bed.client(), 8023));
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn escape_sequences_in_a_rejected_file_reach_neither_status_nor_the_log_raw() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    // A terminal title change, a bell and a right-to-left override in a
    // field the error quotes.
    std::fs::write(
        &bed.mappings,
        "mappings:\n  - frontend: \"\\e]0;owned\\a\\u202e198.18.0.10:8022\"\n    backend: 10.244.1.5:22\n",
    )
    .unwrap();
    bed.agents[0]
        .wait_for_log("mappings file rejected", Duration::from_secs(10))
        .unwrap();
    let table = cmd::run(
        Command::new(agent::binary().unwrap())
            .args(["status", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!table.contains(raw), "{raw:?} raw in: {table:?}");
        assert!(!bed.agents[0].log().contains(raw), "{raw:?} raw in the log");
    }
    assert!(
        table.contains("\\u{1b}]0;owned\\u{7}\\u{202e}198.18"),
        "{table}"
    );
}

fn legacy_service(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"externalIPs": [EXTERNAL_IP], "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}]}
    })
}

fn slice(service: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": service,
                     "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_gone_backend_is_removed_and_a_loopback_service_skipped_while_the_rest_apply() {
    privilege::require();
    let topo = Topology::single_node(2).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.apply(Kind::Service, legacy_service("job-a", 8123));
    api.apply(Kind::EndpointSlice, slice("job-a", "10.244.1.5"));
    let dir = tempfile::tempdir().unwrap();
    let bpffs = Bpffs::new().unwrap();
    let mut args = api.agent_args(dir.path(), EXTERNAL_IP);
    // Its Services are externalIPs ones, honoured only when asked for.
    args.extend(["--honour-styles", "loadbalancer,externalips"].map(String::from));
    let mut agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let ssh = topo.ssh();
    let hostname = |port| ssh.run(&topo.client, EXTERNAL_IP, port, "hostname");
    assert_eq!(hostname(8123).unwrap(), "pod-1");

    // At once: job-a's pod is gone, a Service points at the node's
    // loopback, and a good one appears.
    api.delete(Kind::EndpointSlice, "jobs", "job-a-abcde");
    api.apply(Kind::Service, legacy_service("evil", 8125));
    api.apply(Kind::EndpointSlice, slice("evil", "127.0.0.1"));
    api.apply(Kind::Service, legacy_service("job-c", 8126));
    api.apply(Kind::EndpointSlice, slice("job-c", "10.244.2.5"));
    // A hostNetwork pod's endpoint is the node's own address.
    api.apply(Kind::Service, legacy_service("hostnet", 8127));
    api.apply(Kind::EndpointSlice, slice("hostnet", "192.0.2.1"));
    agent
        .wait_for_log_count("Service skipped", 2, Duration::from_secs(15))
        .unwrap();
    assert!(
        cmd::wait_until(Duration::from_secs(15), || {
            hostname(8126).is_ok_and(|h| h == "pod-2")
        }),
        "job-c must be applied: {}",
        agent.log()
    );
    assert!(
        refused(&topo.client, 8123),
        "job-a's gone backend must be removed"
    );
    assert!(
        refused(&topo.client, 8125),
        "the loopback Service must be skipped"
    );
    assert!(
        refused(&topo.client, 8127),
        "the hostNetwork Service must be skipped"
    );
    let log = agent.log();
    assert!(
        log.contains("jobs/evil") && log.contains("127.0.0.1:22 is a loopback address"),
        "{log}"
    );
    assert!(
        log.contains("jobs/hostnet")
            && log.contains("192.0.2.1:22 is an address of this node (interface ext0)"),
        "{log}"
    );
}

/// Writes `entries` as the mappings file and waits for the agent to reject
/// it; returns the agent's log.
fn rejected(bed: &mut Bed, entries: &[(&str, &str, &str)]) -> String {
    agent::write_mappings(&bed.mappings, entries).unwrap();
    bed.agents[0]
        .wait_for_log("mappings file rejected", Duration::from_secs(10))
        .unwrap();
    bed.agents[0].log()
}
