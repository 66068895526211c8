//! The controller and the agent together, end to end: both watch the same
//! fake API server in the node namespace; a labelled pod whose IP is a
//! namespace running sshd gets a Service from the controller, the agent maps
//! it, and the ssh command from the pod's event works as printed.

use std::time::Duration;

use crate::common::{EXTERNAL_IP, refused};
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    cmd::eventually,
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(20);

fn pod(name: &str, ip: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "jobs", "labels": labels},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// The controller in `node`, reading the fake API through `kubeconfig`,
/// its log in `dir`, with `extra` flags.
fn controller(
    node: &ssh_fwd_tests::NetNs,
    dir: &std::path::Path,
    kubeconfig: &str,
    extra: &[&str],
) -> Agent {
    let mut args: Vec<String> = [
        "--kubeconfig",
        kubeconfig,
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
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Agent::start_controller(node, dir.join("controller.log"), &args).unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn controller_publishes_an_ssh_command_that_reaches_the_rank_0_pod() {
    privilege::require();
    let topo = Topology::single_node(2).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let bpffs = Bpffs::new().unwrap();
    let agent_args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig,
        "--ssh-ip",
        EXTERNAL_IP,
    ]
    .map(String::from)
    .to_vec();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let _controller = controller(node, dir.path(), &kubeconfig, &[]);

    // A two-rank job: rank 0 asks for SSH, rank 1 does not.
    api.apply(
        Kind::Pod,
        pod(
            "job-7-rank-0",
            &topo.pods[0].ip,
            json!({vocabulary::SSH: "enabled"}),
        ),
    );
    api.apply(Kind::Pod, pod("job-7-rank-1", &topo.pods[1].ip, json!({})));
    let event: Value = eventually("the SSHReady event", WAIT, || {
        api.list(Kind::Event).into_iter().find(|e| {
            e["regarding"]["name"] == "job-7-rank-0" && e["reason"] == vocabulary::reason::SSH_READY
        })
    });
    assert_eq!(event["type"], "Normal", "{event}");
    let printed = event["note"].as_str().unwrap().to_owned();
    let command = printed
        .strip_prefix("SSH: Connected! Available at: ")
        .unwrap_or_else(|| panic!("unexpected event text: {printed}"))
        .to_owned();
    let port: u16 = command.rsplit_once(" -p ").unwrap().1.parse().unwrap();
    assert_eq!(command, format!("ssh root@{EXTERNAL_IP} -p {port}"));
    let pod0 = api.get(Kind::Pod, "jobs", "job-7-rank-0").unwrap();
    assert_eq!(
        pod0["metadata"]["annotations"][vocabulary::ENDPOINT],
        format!("{EXTERNAL_IP}:{port}")
    );

    // The agent maps it once the Service and its EndpointSlice are in; the
    // command as printed lands in rank 0.
    let ssh = topo.ssh();
    let landed = eventually("ssh through the published command", WAIT, || {
        ssh.run_pasted(&topo.client, &command, "hostname").ok()
    });
    assert_eq!(landed, topo.pods[0].hostname);
    let services = api.list(Kind::Service);
    assert_eq!(
        services.len(),
        1,
        "one Service, for rank 0 only: {services:?}"
    );

    // The job stops asking: the Service goes, the agent unmaps the port.
    // The controller takes the selector label off the pod before it deletes
    // the Service, so the port closes first; a slow delete shows it.
    api.delay(Kind::Service, "delete", Duration::from_secs(2));
    api.patch(
        Kind::Pod,
        "jobs",
        "job-7-rank-0",
        &json!({"metadata": {"labels": {vocabulary::SSH: null}}}),
    );
    eventually("the port to be refused", WAIT, || {
        refused(&topo.client, port).then_some(())
    });
    eventually("the Service to be deleted", WAIT, || {
        api.list(Kind::Service).is_empty().then_some(())
    });
}

/// The ssh command is told only once the node's data path maps the port
/// to the pod: with the agent started late, the pod waits (granted, in
/// its Service's endpoints, no SSHReady); once the agent reports the
/// mapping, the command is told and works at the first try.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_ssh_command_is_told_only_once_the_data_path_maps_the_port() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let _controller = controller(node, dir.path(), &kubeconfig, &["--publish-wait", "120s"]);
    api.apply(
        Kind::Pod,
        pod(
            "job-8-rank-0",
            &topo.pods[0].ip,
            json!({vocabulary::SSH: "enabled"}),
        ),
    );
    eventually("the grant and the selector label", WAIT, || {
        let pod = api.get(Kind::Pod, "jobs", "job-8-rank-0")?;
        (pod["metadata"]["labels"][vocabulary::SERVICE] == "ssh-job-8-rank-0").then_some(())
    });
    let ready_events = || {
        api.list(Kind::Event)
            .into_iter()
            .filter(|e| e["reason"] == vocabulary::reason::SSH_READY)
            .count()
    };
    // No agent yet: nothing forwards the port, so nothing is told.
    let quiet_until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < quiet_until {
        assert_eq!(ready_events(), 0, "told before any node maps the port");
        // The pace of checks in a window where the event must not come.
        std::thread::sleep(Duration::from_millis(100));
    }
    let bpffs = Bpffs::new().unwrap();
    let agent_args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig,
        "--ssh-ip",
        EXTERNAL_IP,
        "--node-name",
        "e2e-node",
    ]
    .map(String::from)
    .to_vec();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let event: Value = eventually("the SSHReady event", WAIT, || {
        api.list(Kind::Event)
            .into_iter()
            .find(|e| e["reason"] == vocabulary::reason::SSH_READY)
    });
    let report = api
        .get(Kind::ConfigMap, "ssh-fwd", "ssh-fwd-served-e2e-node")
        .expect("the agent's served report");
    let command = event["note"]
        .as_str()
        .unwrap()
        .strip_prefix("SSH: Connected! Available at: ")
        .unwrap()
        .to_owned();
    let port: u16 = command.rsplit_once(" -p ").unwrap().1.parse().unwrap();
    assert_eq!(
        report["data"][format!("{EXTERNAL_IP}_{port}")],
        format!("{}:22", topo.pods[0].ip),
        "{report}"
    );
    assert_eq!(report["data"]["receives"], EXTERNAL_IP, "{report}");
    // Told means it works: the first try lands.
    let landed = topo
        .ssh()
        .run_pasted(&topo.client, &command, "hostname")
        .unwrap();
    assert_eq!(landed, topo.pods[0].hostname);
    let warned: Vec<Value> = api
        .list(Kind::Event)
        .into_iter()
        .filter(|e| e["reason"] == vocabulary::reason::SSH_UNCONFIRMED)
        .collect();
    assert!(warned.is_empty(), "{warned:?}");
}

/// The agent runs with exactly the capabilities the DaemonSet grants, with
/// the host's bpffs mounted and its own directory not yet made.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn agent_runs_with_only_the_daemonset_capabilities() {
    privilege::require();
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/base/agent-daemonset.yaml"),
    )
    .unwrap();
    let daemonset: Value = serde_saphyr::from_str(&manifest).unwrap();
    let caps: Vec<String> = daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]
        ["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_lowercase())
        .collect();
    assert!(!caps.is_empty());
    let caps: Vec<&str> = caps.iter().map(String::as_str).collect();

    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    ssh_fwd_tests::agent::write_mappings(
        &mappings,
        &[(
            "job",
            "198.18.0.10:8022",
            &format!("{}:22", topo.pods[0].ip),
        )],
    )
    .unwrap();
    let below = bpffs.path().join("ssh-fwd");
    let args: Vec<String> = vec![
        "--mappings".into(),
        mappings.display().to_string(),
        "--bpffs".into(),
        below.display().to_string(),
    ];
    let mut agent =
        Agent::start_with_capabilities(node, &caps, &[EXT_IFACE], &bpffs, &args).unwrap();
    let host = topo
        .ssh()
        .run(&topo.client, EXTERNAL_IP, 8022, "hostname")
        .unwrap();
    assert_eq!(host, topo.pods[0].hostname);
    // Everything it asks for is granted: no warning of a capability, and
    // the address events of every namespace (NET_BROADCAST) are heard.
    let log = agent.log();
    assert!(
        !log.contains("no CAP_") && !log.contains("no address events"),
        "{log}"
    );
    agent.stop().unwrap();

    // Without NET_BROADCAST it runs, and says what it does without.
    let without: Vec<&str> = caps
        .iter()
        .copied()
        .filter(|c| *c != "net_broadcast")
        .collect();
    assert_eq!(
        without.len() + 1,
        caps.len(),
        "the DaemonSet grants NET_BROADCAST"
    );
    let mut agent =
        Agent::start_with_capabilities(node, &without, &[EXT_IFACE], &bpffs, &args).unwrap();
    for warning in ["no CAP_NET_BROADCAST", "no address events"] {
        agent.wait_for_log(warning, Duration::from_secs(5)).unwrap();
    }
    agent.stop().unwrap();

    // One capability fewer and the agent names what is missing.
    let fewer: Vec<&str> = caps.iter().copied().filter(|c| *c != "net_admin").collect();
    let error = Agent::start_with_capabilities(node, &fewer, &[EXT_IFACE], &bpffs, &args)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("missing capabilities: CAP_NET_ADMIN"),
        "{error}"
    );
}
