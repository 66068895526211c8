//! The real agent (`--kubernetes --announce l2`) and the real controller,
//! each with its own service account token, against a fake API server that
//! enforces deploy/base's RBAC and policies: they still do their job, so
//! what deploy/ grants is enough. And the controller's answer to an
//! activity report from the future.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    cmd::{self, eventually},
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

use crate::common::{EXTERNAL_IP, Session};

const NODE: &str = "e2e-node";

/// A kubeconfig with `token`, whose namespace is `ssh-fwd` (where the
/// agents' ConfigMaps and the Leases are), written into `dir`.
fn kubeconfig(api: &FakeApi, dir: &std::path::Path, token: &str) -> String {
    let text = api.kubeconfig_as(token).replace(
        "    user: fake\n",
        "    user: fake\n    namespace: ssh-fwd\n",
    );
    let path = dir.join(format!("kubeconfig-{}", token.replace(['/', ':'], "-")));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn pod(ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-1", "namespace": "jobs",
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}], "nodeName": NODE},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn controller(
    api: &FakeApi,
    node: &ssh_fwd_tests::NetNs,
    dir: &std::path::Path,
    token: &str,
    extra: &[&str],
) -> Agent {
    let mut args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig(api, dir, token),
        "--ssh-ip",
        EXTERNAL_IP,
        "--identity",
        "e2e",
        "--lease-namespace",
        "ssh-fwd",
        "--activity-interval",
        "1s",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Agent::start_controller(node, dir.join("controller.log"), &args).unwrap()
}

/// The port the controller gave the pod.
fn port_of_pod(api: &FakeApi) -> u16 {
    eventually("the pod's endpoint", Duration::from_secs(30), || {
        let pod = api.get(Kind::Pod, "jobs", "job-1")?;
        let endpoint = pod["metadata"]["annotations"][vocabulary::ENDPOINT].as_str()?;
        endpoint.rsplit_once(':')?.1.parse().ok()
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_real_agent_and_controller_do_their_job_with_their_own_tokens_under_deploys_rbac_and_policies()
 {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    // --announce l2 answers ARP for an SSH IP on no interface of the node
    // (the data path takes its traffic before the stack does).
    node.ip(&["addr", "del", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])
        .unwrap();
    let api = FakeApi::start(node).unwrap();
    api.enforce_deploy();
    api.apply(
        Kind::Node,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-1"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let agent_token = api.service_account_token("ssh-fwd", "ssh-fwd-agent", Some(NODE));
    let controller_token = api.service_account_token("ssh-fwd", "ssh-fwd-controller", None);
    let bpffs = Bpffs::new().unwrap();
    let agent_args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig(&api, dir.path(), &agent_token),
        "--ssh-ip",
        EXTERNAL_IP,
        "--node-name",
        NODE,
        "--announce",
        "l2",
        "--lease-namespace",
        "ssh-fwd",
        "--activity-interval",
        "1s",
    ]
    .map(String::from)
    .to_vec();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let _controller = controller(&api, node, dir.path(), &controller_token, &[]);

    api.apply(Kind::Pod, pod(&topo.pods[0].ip));
    let port = port_of_pod(&api);
    // Leader elected, the SSH IP announced by this node.
    let leader = api
        .get(Kind::Lease, "ssh-fwd", "ssh-fwd-controller")
        .unwrap();
    assert_eq!(leader["spec"]["holderIdentity"], "e2e", "{leader:#}");
    eventually(
        "the SSH IP's Lease held by the node",
        Duration::from_secs(20),
        || {
            let lease = api.get(Kind::Lease, "ssh-fwd", "ssh-fwd-announce-198-18-0-10")?;
            (lease["spec"]["holderIdentity"] == NODE).then_some(())
        },
    );
    // Forwarded: a login through the port, its activity published.
    let frontend = format!("{EXTERNAL_IP}:{port}");
    eventually("the port to be mapped", Duration::from_secs(20), || {
        let rows = bpffs.list_of("mappings").ok()?;
        rows.as_array()?
            .iter()
            .any(|r| r["frontend"] == frontend.as_str())
            .then_some(())
    });
    let mut session = Session::open(&topo.ssh(), &topo.client, port).unwrap();
    session.echo("working").unwrap();
    let key = format!("{EXTERNAL_IP}_{port}");
    eventually(
        "the node's activity ConfigMap",
        Duration::from_secs(20),
        || {
            let cm = api.get(
                Kind::ConfigMap,
                "ssh-fwd",
                &format!("ssh-fwd-activity-{NODE}"),
            )?;
            let report: Value = serde_json::from_str(cm["data"][&key].as_str()?).ok()?;
            (report["openConnections"] == 1).then_some(())
        },
    );
    eventually(
        "the pod's activity annotation",
        Duration::from_secs(20),
        || {
            let pod = api.get(Kind::Pod, "jobs", "job-1")?;
            (pod["metadata"]["annotations"][vocabulary::SSH_CONNECTIONS] == "1").then_some(())
        },
    );
    drop(session);

    // Nothing either of them asked was refused.
    let refused: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.user == agent_token || r.user == controller_token)
        .filter(|r| matches!(r.code, Some(401 | 403)))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_activity_report_from_the_future_does_not_pin_the_pod_as_active() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // No agent here: the command is told once the pod is Ready.
    let controller = controller(
        &api,
        node,
        dir.path(),
        "controller",
        &["--publish-when", "ready"],
    );
    api.apply(Kind::Pod, pod(&topo.pods[0].ip));
    let port = port_of_pod(&api);
    let key = format!("{EXTERNAL_IP}_{port}");
    let report = |node: &str, at: SystemTime, open: u64| {
        let last = humantime::format_rfc3339_seconds(at).to_string();
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("ssh-fwd-activity-{node}"), "namespace": "ssh-fwd",
                            "labels": {vocabulary::ACTIVITY: vocabulary::ACTIVITY_FROM}},
               "data": {&key: json!({"lastActivity": last, "openConnections": open}).to_string()}})
    };
    // Node a saw a packet just now (after the Service was made: one
    // before is another pod's); whoever writes node b's ConfigMap says one
    // will come in a day, with nine sessions open.
    std::thread::sleep(Duration::from_millis(1100));
    let now = SystemTime::now();
    let real = now;
    api.apply(Kind::ConfigMap, report("a", real, 0));
    api.apply(
        Kind::ConfigMap,
        report("b", now + Duration::from_secs(86_400), 9),
    );
    let annotated = || {
        let pod = api.get(Kind::Pod, "jobs", "job-1")?;
        let a = pod["metadata"]["annotations"].clone();
        a[vocabulary::LAST_ACTIVITY].is_string().then_some(a)
    };
    cmd::wait_until(Duration::from_secs(20), || annotated().is_some());
    let Some(annotations) = annotated() else {
        panic!(
            "the pod's activity annotation never came; the controller said:\n{}",
            controller.log()
        );
    };
    let last =
        humantime::parse_rfc3339_weak(annotations[vocabulary::LAST_ACTIVITY].as_str().unwrap())
            .unwrap();
    assert!(
        last <= SystemTime::now() + Duration::from_secs(30),
        "the pod's last activity is {:?} ahead of now: {annotations:#}",
        last.duration_since(SystemTime::now()).unwrap_or_default()
    );
    assert_eq!(
        annotations[vocabulary::SSH_CONNECTIONS],
        "0",
        "{annotations:#}"
    );
}
