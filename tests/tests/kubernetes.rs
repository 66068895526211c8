//! The agent in Kubernetes mode, end to end: a fake API server inside the
//! node namespace, the real agent watching it, real ssh through the maps.

use std::time::Duration;

use crate::common::{EXTERNAL_IP, Session, refused};
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    cmd::{self, eventually},
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(15);

fn lb_service(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS, "allocateLoadBalancerNodePorts": false,
                 "ports": [{"name": "ssh", "port": port, "targetPort": 22, "protocol": "TCP"}]},
        "status": ssh_fwd_tests::grant::status(&[EXTERNAL_IP], port, &format!("uid-{name}"))
    })
}

/// The agent's flag that honours [`legacy_service`]s, which trust every
/// Service writer (the default honours only granted LoadBalancers).
const EXTERNAL_IPS_TOO: [&str; 2] = ["--honour-styles", "loadbalancer,externalips"];

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
        "metadata": {"name": format!("{service}-abcde"), "namespace": "jobs", "labels": {"kubernetes.io/service-name": service,
                     // Copied from the Service by the EndpointSlice controller.
                     "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": 22, "protocol": "TCP"}],
        "endpoints": [ssh_fwd_tests::grant::endpoint(ip, "jobs", service, &format!("uid-{service}"))]
    })
}

/// GET `path` from the agent's metrics endpoint inside the node namespace.
fn metric(node: &ssh_fwd_tests::NetNs, path: &str) -> String {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/9102; printf 'GET {path} HTTP/1.1\\r\\nHost: agent\\r\\nConnection: close\\r\\n\\r\\n' >&3; cat <&3"
    );
    cmd::run(node.command("timeout").args(["10", "bash", "-c", &script])).unwrap()
}

/// A connect to the external IP's `port` from `ns` gets no answer for 2 s
/// (neither accepted nor refused: the SYN was dropped).
fn no_answer(ns: &ssh_fwd_tests::NetNs, port: u16) -> bool {
    let status = (ns.command("timeout"))
        .args(["2", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{EXTERNAL_IP}/{port}"))
        .status();
    status.is_ok_and(|s| s.code() == Some(124))
}

/// A fake API with one LoadBalancer-class Service on pod 1, and the agent
/// arguments that watch it.
struct KubeBed {
    api: FakeApi,
    bpffs: Bpffs,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

fn kube_bed(node: &ssh_fwd_tests::NetNs, extra: &[&str]) -> KubeBed {
    let api = FakeApi::start(node).unwrap();
    api.apply(Kind::Service, lb_service("job-a", 8123));
    api.apply(Kind::EndpointSlice, slice("job-a", "ssh", "10.244.1.5"));
    let dir = tempfile::tempdir().unwrap();
    let mut args = api.agent_args(dir.path(), EXTERNAL_IP);
    // The tests' legacy Services are externalIPs ones.
    args.extend(EXTERNAL_IPS_TOO.map(String::from));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    KubeBed {
        api,
        bpffs: Bpffs::new().unwrap(),
        args,
        _dir: dir,
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn agent_follows_services_and_endpointslices_and_survives_losing_the_api() {
    privilege::require();
    let topo = Topology::single_node(2).unwrap();
    let node = &topo.nodes[0].ns;
    let KubeBed {
        api,
        bpffs,
        args,
        _dir,
    } = kube_bed(
        node,
        &[
            "--metrics-addr",
            "127.0.0.1:9102",
            "--resync-interval",
            "2s",
        ],
    );
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
    eventually("job-a moved to pod-2", WAIT, || hostname(8123) == "pod-2");
    // A legacy externalIPs Service appears; job-a is deleted -> refused.
    api.apply(Kind::Service, legacy_service("job-b", 8124));
    api.apply(Kind::EndpointSlice, slice("job-b", "", "10.244.1.5"));
    eventually("job-b mapped", WAIT, || hostname(8124) == "pod-1");
    let mut session = Session::open(&ssh, &topo.client, 8124).unwrap();
    api.delete(Kind::Service, "jobs", "job-a");
    eventually("job-a's port refused", WAIT, || refused(&topo.client, 8123));

    // Metrics and readiness. The per-mapping rows are rendered off the
    // scrape's path and may lag a scrape behind.
    let metrics = metric(node, "/metrics");
    assert!(metrics.contains("ssh_fwd_mappings 1"), "{metrics}");
    eventually("job-b's row in /metrics", WAIT, || {
        metric(node, "/metrics").contains("ssh_fwd_mapping_packets_total{mapping=\"jobs/job-b\"")
    });
    let ready = metric(node, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    // The API goes away: maps stay, the session and new logins keep working,
    // across several resyncs.
    api.cut();
    session.echo("api-gone").unwrap();
    let reconciles = || {
        metric(node, "/metrics")
            .lines()
            .find_map(|l| l.strip_prefix("ssh_fwd_reconciles_total "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = reconciles();
    eventually("two resyncs with the API down", WAIT, || {
        reconciles() >= before + 2
    });
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

/// The node gains an address after the agent started (a CNI bridge's
/// gateway, a tunnel's, a new node IP): an endpoint there is the node's own
/// service, refused as a backend like one on the addresses it started with.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_address_the_node_gains_after_start_is_refused_as_a_backend() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let KubeBed {
        api,
        bpffs,
        args,
        _dir,
    } = kube_bed(
        node,
        &[
            "--metrics-addr",
            "127.0.0.1:9102",
            "--resync-interval",
            "1s",
        ],
    );
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let gauge = |name: &str| {
        let metrics = metric(node, "/metrics");
        let prefix = format!("{name} ");
        let value = metrics.lines().find_map(|l| l.strip_prefix(&prefix));
        value.and_then(|v| v.parse::<u64>().ok())
    };
    eventually("job-a mapped", WAIT, || {
        gauge("ssh_fwd_mappings") == Some(1)
    });
    // A bridge with a gateway address appears in the node's namespace (the
    // test's own, gone with it).
    for args in [
        &["link", "add", "sshfwd-br0", "type", "bridge"][..],
        &["addr", "add", "10.244.9.1/24", "dev", "sshfwd-br0"],
        &["link", "set", "sshfwd-br0", "up"],
    ] {
        cmd::run(node.command("ip").args(args)).unwrap();
    }
    api.apply(Kind::Service, legacy_service("hostnet", 8125));
    api.apply(Kind::EndpointSlice, slice("hostnet", "", "10.244.9.1"));
    eventually("hostnet counted as invalid", WAIT, || {
        gauge("ssh_fwd_invalid_services") == Some(1)
    });
    // Refused, so never mapped: job-a's is the only mapping, in the
    // pinned maps and in the gauge.
    let mappings = bpffs.list_of("mappings").unwrap();
    let frontends: Vec<&str> = mappings
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["frontend"].as_str())
        .collect();
    assert_eq!(frontends, ["198.18.0.10:8123"], "{mappings}");
    assert_eq!(gauge("ssh_fwd_mappings"), Some(1));
    assert!(
        agent
            .log()
            .contains("is an address of this node (interface sshfwd-br0)"),
        "{}",
        agent.log()
    );
    drop(agent);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn restarted_agent_changes_nothing_until_the_api_answers() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let KubeBed {
        api,
        bpffs,
        args,
        _dir,
    } = kube_bed(node, &[]);
    let mut agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let mut session = Session::open(&topo.ssh(), &topo.client, 8123).unwrap();
    agent.stop().unwrap();

    // The API is down while the new agent starts: it adopts the pinned maps
    // and must not treat its empty caches as "no Services".
    api.cut();
    let mut second = Agent::spawn(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    second
        .wait_for_log("waiting for complete lists", Duration::from_secs(15))
        .unwrap();
    // It has tried the API and failed, so it is running on empty caches.
    second
        .wait_for_log("watch failed", Duration::from_secs(15))
        .unwrap();
    session.echo("during-restart").unwrap();
    assert_eq!(
        topo.ssh()
            .run(&topo.client, EXTERNAL_IP, 8123, "hostname")
            .unwrap(),
        "pod-1"
    );
    let text = second.log();
    assert!(
        !text.contains("mapping removed") && !text.contains("agent ready"),
        "{text}"
    );

    // The API answers again: the agent becomes ready with nothing removed.
    api.restore();
    second
        .wait_for_log("agent ready", Duration::from_secs(15))
        .unwrap();
    session.echo("after-restart").unwrap();
    second.stop().unwrap();
    assert!(
        !second.log().contains("mapping removed"),
        "{}",
        second.log()
    );
}

/// The key in force on the node whose pins are in `bpffs`.
fn key_in_force(bpffs: &Bpffs) -> Option<[u64; 2]> {
    let layout = ssh_fwd::datapath::pins::PinLayout::new(bpffs.path());
    ssh_fwd::datapath::key::KeyMap::open_pinned(&layout)
        .unwrap()
        .read()
        .unwrap()
}

/// The key the Secret holds, if it exists.
fn key_in_secret(api: &FakeApi) -> Option<[u64; 2]> {
    let secret = api.get(Kind::Secret, "default", "ssh-fwd-cross-node-key")?;
    let encoded = secret["data"]["key"].as_str().unwrap();
    let hex = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded).unwrap(),
    )
    .unwrap();
    let half = |s: &str| u64::from_str_radix(s, 16).unwrap();
    Some([half(&hex[..16]), half(&hex[16..32])])
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn agents_share_one_cross_node_key_kept_in_a_secret_and_keep_it_without_the_api() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let KubeBed {
        api,
        bpffs,
        args,
        _dir,
    } = kube_bed(node, &[]);
    // The first agent makes the key and puts it in force.
    let mut first = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    eventually("the first agent creates the Secret", WAIT, || {
        key_in_secret(&api).is_some()
    });
    let key = key_in_secret(&api).unwrap();
    eventually("the key is in force", WAIT, || {
        key_in_force(&bpffs) == Some(key)
    });
    first.stop().unwrap();

    // An agent on another node reads it and makes none of its own.
    let other = Bpffs::new().unwrap();
    let mut second = Agent::start_with(node, &[EXT_IFACE], &other, &args).unwrap();
    eventually("the second agent puts the same key in force", WAIT, || {
        key_in_force(&other) == Some(key)
    });
    second.stop().unwrap();
    assert_eq!(key_in_secret(&api), Some(key));
    drop(second);
    drop(other);

    // A restart while the API server is away keeps the key in force.
    api.cut();
    let mut third = Agent::spawn(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    third
        .wait_for_log(
            "cannot read the cross-node key yet",
            Duration::from_secs(15),
        )
        .unwrap();
    assert_eq!(key_in_force(&bpffs), Some(key));
    api.restore();
    third.stop().unwrap();
    assert_eq!(key_in_force(&bpffs), Some(key));
}

/// The `allow` of the mapping on `port` in `ssh-fwd list`, or `None` when
/// no mapping is there.
fn allow_on(bpffs: &Bpffs, port: u16) -> Option<Value> {
    let frontend = format!("{EXTERNAL_IP}:{port}");
    let mappings = bpffs.list_of("mappings").unwrap();
    (mappings.as_array().into_iter().flatten())
        .find(|m| m["frontend"] == frontend.as_str())
        .map(|m| m["allow"].clone())
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn load_balancer_source_ranges_reach_the_maps_and_a_bad_one_skips_only_its_service() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let KubeBed {
        api,
        bpffs,
        args,
        _dir,
    } = kube_bed(node, &["--metrics-addr", "127.0.0.1:9102"]);
    api.apply(Kind::Service, lb_service("job-c", 8125));
    api.apply(Kind::EndpointSlice, slice("job-c", "ssh", "10.244.1.5"));
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let ranges = |list: &[&str]| json!({"spec": {"loadBalancerSourceRanges": list}});
    eventually("job-c mapped", WAIT, || allow_on(&bpffs, 8125).is_some());
    assert_eq!(allow_on(&bpffs, 8123), Some(Value::Null), "no list: open");

    // The client's range: written to the maps, and the client logs in.
    api.patch(Kind::Service, "jobs", "job-a", &ranges(&["192.0.2.0/24"]));
    eventually("job-a's list in the maps", WAIT, || {
        allow_on(&bpffs, 8123) == Some(json!(["192.0.2.0/24"]))
    });
    let ssh = topo.ssh();
    assert_eq!(
        ssh.run(&topo.client, EXTERNAL_IP, 8123, "hostname")
            .unwrap(),
        "pod-1"
    );
    // Another range: the client's SYNs now go unanswered, counted.
    api.patch(
        Kind::Service,
        "jobs",
        "job-a",
        &ranges(&["198.51.100.0/24"]),
    );
    eventually("job-a's new list in the maps", WAIT, || {
        allow_on(&bpffs, 8123) == Some(json!(["198.51.100.0/24"]))
    });
    assert!(no_answer(&topo.client, 8123), "no answer");
    let denied = bpffs.list().unwrap()["counters"]["denied"].as_u64();
    assert!(denied.unwrap_or(0) > 0, "denied {denied:?}");

    // A range with bits past its prefix: job-a is skipped and counted,
    // job-c is as it was.
    api.patch(Kind::Service, "jobs", "job-a", &ranges(&["192.0.2.1/24"]));
    eventually("job-a skipped", WAIT, || allow_on(&bpffs, 8123).is_none());
    let metrics = metric(node, "/metrics");
    assert!(
        metrics.lines().any(|l| l == "ssh_fwd_invalid_services 1"),
        "{metrics}"
    );
    assert!(
        agent.log().contains("spec.loadBalancerSourceRanges"),
        "the warning names the field: {}",
        agent.log()
    );
    assert_eq!(allow_on(&bpffs, 8125), Some(Value::Null));
    assert_eq!(
        ssh.run(&topo.client, EXTERNAL_IP, 8125, "hostname")
            .unwrap(),
        "pod-1"
    );
    drop(agent);
}

/// `kubectl delete pod` on the pod behind an externalIPs Service the agent
/// honours (not one the controller made, which it deletes itself): the
/// EndpointSlice controller marks the endpoint not ready but serving and
/// terminating at once. The mapping drains through the grace period: the
/// open session goes on, a new login gets no answer (the address may be
/// another pod's before the slice says the pod stopped serving), and the
/// mapping goes with the pod.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_in_its_grace_period_keeps_its_sessions_and_takes_no_new_login() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    let mut service = legacy_service("job-g", 8125);
    service["spec"]["selector"] = json!({"job": "g"});
    api.apply(Kind::Service, service);
    api.apply(
        Kind::Pod,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "g-0", "namespace": "jobs", "labels": {"job": "g"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "sshd", "image": "sshd"}]},
            "status": {"phase": "Running", "podIP": "10.244.1.5",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let bpffs = Bpffs::new().unwrap();
    let mut args = api.agent_args(dir.path(), EXTERNAL_IP);
    args.extend(EXTERNAL_IPS_TOO.map(String::from));
    let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let ssh = topo.ssh();
    let hostname = || {
        ssh.run(&topo.client, EXTERNAL_IP, 8125, "hostname")
            .unwrap_or_default()
    };
    eventually("job-g mapped", WAIT, || hostname() == "pod-1");
    let mut session = Session::open(&ssh, &topo.client, 8125).unwrap();

    api.delete_pod("jobs", "g-0", Some(6));
    let slice = api
        .get(Kind::EndpointSlice, "jobs", "job-g-emulated")
        .unwrap();
    assert_eq!(
        slice["endpoints"][0]["conditions"],
        json!({"ready": false, "serving": true, "terminating": true}),
        "the delete is accepted and the endpoint marked"
    );
    eventually("job-g draining in the maps", WAIT, || {
        bpffs
            .list_of("mappings")
            .is_ok_and(|m| m[0]["draining"] == json!(true))
    });
    session.echo("terminating").unwrap();
    assert!(no_answer(&topo.client, 8125), "a new login: no answer");
    session.echo("still-terminating").unwrap();
    assert!(!agent.log().contains("mapping removed"), "{}", agent.log());

    // The grace ends, the pod goes, and its mapping with it.
    eventually("job-g's port refused once the pod is gone", WAIT, || {
        refused(&topo.client, 8125)
    });
    drop(session);
    drop(agent);
}
