//! Activity per job, end to end with real OpenSSH: an open session shows
//! as one open connection with a recent last packet in `ssh-fwd list` and
//! in `/metrics`, none once it closed and was swept; in Kubernetes mode the
//! agent publishes it in its node's ConfigMap and the controller mirrors it
//! onto the pod's annotations, at most once per `--activity-interval`.

use std::{
    io::Write as _,
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND, Session};
use serde_json::{Value, json};
use ssh_fwd::{k8s::api_calls, vocabulary};
use ssh_fwd_tests::{
    Agent, Bpffs, Topology,
    cmd::eventually,
    fake_api::{FakeApi, Kind},
    privilege, prometheus,
    topology::EXT_IFACE,
};

const METRICS: &str = "127.0.0.1:9105";
/// Sweeps every 5 s (an eighth of it).
const IDLE: &str = "40s";

fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

/// Seconds from `text` (RFC 3339) to now.
fn age(text: &str) -> Duration {
    let at = parse_rfc3339(text).unwrap_or_else(|| panic!("not RFC 3339: {text}"));
    SystemTime::now().duration_since(at).unwrap_or_default()
}

/// The sample of `family` for the mapping named `job`.
fn sample(body: &str, family: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains("mapping=\"job\""))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `promtool check metrics` (its lint) finds nothing in the activity
/// families. (It reads the text format, where a counter's help is named
/// after its `_total` samples, not after the OpenMetrics family the agent
/// serves, so it complains of every counter's help: not ours to judge.)
fn promtool_accepts(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus; `cargo xtask setup` installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = said
        .lines()
        .filter(|l| {
            l.contains("ssh_fwd_mapping_open_connections")
                || l.contains("ssh_fwd_mapping_last_activity")
        })
        .collect();
    assert!(ours.is_empty(), "promtool check metrics: {said}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_open_session_shows_in_list_and_metrics_and_none_once_closed_and_swept() {
    privilege::require();
    let extra = ["--conn-idle-timeout", IDLE, "--metrics-addr", METRICS];
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &extra,
    )
    .unwrap();
    let node = &bed.topo.nodes[0].ns;
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    session.echo("working").unwrap();

    let row = bed.bpffs[0].list_of("mappings").unwrap()[0].clone();
    assert_eq!(row["open_connections"], 1, "{row:#}");
    let last = row["last_activity"].as_str().unwrap();
    assert!(age(last) < Duration::from_secs(5), "{row:#}");

    let body = eventually(
        "/metrics to show the session",
        Duration::from_secs(20),
        || {
            let (_, body) = prometheus::get_in(node, METRICS, "/metrics").ok()?;
            (sample(&body, "ssh_fwd_mapping_open_connections") == Some(1.0)).then_some(body)
        },
    );
    let last = sample(&body, "ssh_fwd_mapping_last_activity_timestamp_seconds").unwrap();
    assert!((unix_now() - last).abs() < 15.0, "last activity {last}");
    promtool_accepts(&body);

    drop(session);
    eventually("list to show it closed", Duration::from_secs(30), || {
        let row = bed.bpffs[0].list_of("mappings").ok()?[0].clone();
        (row["open_connections"] == 0).then_some(())
    });
    let body = eventually(
        "/metrics to show it closed",
        Duration::from_secs(30),
        || {
            let (_, body) = prometheus::get_in(node, METRICS, "/metrics").ok()?;
            (sample(&body, "ssh_fwd_mapping_open_connections") == Some(0.0)).then_some(body)
        },
    );
    // The agent remembers the last packet after the entry is gone.
    let kept = sample(&body, "ssh_fwd_mapping_last_activity_timestamp_seconds");
    assert!(kept.is_some_and(|t| t >= last), "{body}");
}

/// The controller's kubeconfig namespace is `ssh-fwd`, the agents' too:
/// their ConfigMaps are where the controller looks.
fn kubeconfig(api: &FakeApi, dir: &std::path::Path, user: &str) -> String {
    let text = api.kubeconfig_as(user).replace(
        "    user: fake\n",
        "    user: fake\n    namespace: ssh-fwd\n",
    );
    let path = dir.join(format!("kubeconfig-{user}"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn pod(ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-1", "namespace": "jobs",
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// When the controller patched the pod's activity annotations.
fn activity_patches(api: &FakeApi, after: Instant) -> Vec<Instant> {
    api.requests()
        .into_iter()
        .filter(|r| r.user == "controller" && r.verb == "patch" && r.resource == "pods")
        .filter_map(|r| r.handled)
        .filter(|at| *at > after)
        .collect()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_controller_mirrors_a_sessions_activity_onto_its_pod_at_most_once_per_interval() {
    privilege::require();
    const INTERVAL: Duration = Duration::from_secs(8);
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    api.apply(
        Kind::Node,
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "e2e-node", "uid": "node-uid-1"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let bpffs = Bpffs::new().unwrap();
    let agent_args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig(&api, dir.path(), "agent"),
        "--ssh-ip",
        EXTERNAL_IP,
        "--node-name",
        "e2e-node",
        "--activity-interval",
        "1s",
        "--conn-idle-timeout",
        IDLE,
    ]
    .map(String::from)
    .to_vec();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let controller_args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig(&api, dir.path(), "controller"),
        "--ssh-ip",
        EXTERNAL_IP,
        "--identity",
        "e2e",
        "--lease-namespace",
        "ssh-fwd",
        "--activity-interval",
        "8s",
    ]
    .map(String::from)
    .to_vec();
    let _controller =
        Agent::start_controller(node, dir.path().join("controller.log"), &controller_args).unwrap();

    api.apply(Kind::Pod, pod(&topo.pods[0].ip));
    let port: u16 = eventually("the pod's endpoint", Duration::from_secs(20), || {
        let pod = api.get(Kind::Pod, "jobs", "job-1")?;
        let endpoint = pod["metadata"]["annotations"][vocabulary::ENDPOINT].as_str()?;
        endpoint.rsplit_once(':')?.1.parse().ok()
    });
    // Mapped (read from the maps: a probe connection would be activity).
    let frontend = format!("{EXTERNAL_IP}:{port}");
    eventually("the port to be mapped", Duration::from_secs(20), || {
        let rows = bpffs.list_of("mappings").ok()?;
        rows.as_array()?
            .iter()
            .any(|r| r["frontend"] == frontend.as_str())
            .then_some(())
    });
    let ssh = topo.ssh();
    let opened = Instant::now();
    let mut session = Session::open(&ssh, &topo.client, port).unwrap();

    // The node's ConfigMap, owned by its Node.
    let key = format!("{EXTERNAL_IP}_{port}");
    let cm = eventually("the agent's ConfigMap", Duration::from_secs(20), || {
        let cm = api.get(Kind::ConfigMap, "ssh-fwd", "ssh-fwd-activity-e2e-node")?;
        let report: Value = serde_json::from_str(cm["data"][&key].as_str()?).ok()?;
        (report["openConnections"] == 1).then_some(cm)
    });
    assert_eq!(
        cm["metadata"]["labels"][vocabulary::ACTIVITY],
        vocabulary::ACTIVITY_FROM
    );
    assert_eq!(
        cm["metadata"]["ownerReferences"][0]["uid"], "node-uid-1",
        "{cm:#}"
    );

    // The pod annotated once, then not again within the interval though
    // the session keeps talking (the ConfigMap changes every sweep).
    let annotations = eventually("the pod's annotations", Duration::from_secs(20), || {
        let pod = api.get(Kind::Pod, "jobs", "job-1")?;
        let a = pod["metadata"]["annotations"].clone();
        (a[vocabulary::SSH_CONNECTIONS] == "1").then_some(a)
    });
    let last = annotations[vocabulary::LAST_ACTIVITY].as_str().unwrap();
    assert!(age(last) < Duration::from_secs(15), "{annotations:#}");
    let first = activity_patches(&api, opened);
    assert_eq!(first.len(), 1, "one activity patch so far");
    let talking = Instant::now();
    while talking.elapsed() < INTERVAL + Duration::from_secs(4) {
        session.echo("typing").unwrap();
        std::thread::sleep(Duration::from_millis(500));
    }
    let patches = activity_patches(&api, opened);
    assert!(
        patches.len() >= 2,
        "a newer packet is mirrored after the interval: {patches:?}"
    );
    let gap = patches[1].duration_since(patches[0]);
    assert!(
        gap >= INTERVAL - Duration::from_millis(200),
        "patched again after {gap:?}"
    );
    let newer = api.get(Kind::Pod, "jobs", "job-1").unwrap()["metadata"]["annotations"]
        [vocabulary::LAST_ACTIVITY]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        parse_rfc3339(&newer) > parse_rfc3339(last),
        "{newer} after {last}"
    );

    // Closed: the pod says so within an interval and a sweep.
    drop(session);
    eventually(
        "the pod to show no connection",
        Duration::from_secs(30),
        || {
            let pod = api.get(Kind::Pod, "jobs", "job-1")?;
            (pod["metadata"]["annotations"][vocabulary::SSH_CONNECTIONS] == "0").then_some(())
        },
    );

    // Every call made is one deploy/ grants.
    for r in api.requests() {
        let calls = match r.user.as_str() {
            "agent" => api_calls::AGENT,
            "controller" => api_calls::CONTROLLER,
            _ => continue,
        };
        assert!(
            api_calls::allows(calls, &r.group, &r.resource, r.verb),
            "{r:?} is not in k8s/api_calls.rs"
        );
    }

    // The node goes: its ConfigMap with it.
    api.delete(Kind::Node, "", "e2e-node");
    assert!(
        api.get(Kind::ConfigMap, "ssh-fwd", "ssh-fwd-activity-e2e-node")
            .is_none()
    );
}
