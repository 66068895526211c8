//! `--publish-when served`: the ssh command is told only once the pod is
//! Ready and every node receiving the SSH IP reports the port mapped to
//! it; the test plays the agents, writing their served ConfigMaps as
//! `agent::served` does.

use std::time::SystemTime;

use super::*;
use crate::k8s::served::{RECEIVES, RENEWED, config_map_name, data_key, rfc3339};

const SSH_IP: &str = "198.18.0.10";
const POD_IP: &str = "10.244.0.5";

impl Bed {
    /// Node `node`'s agent reports that it receives the SSH IP (or not)
    /// and serves `frontends` (port, backend).
    fn report(&self, node: &str, receives: bool, frontends: &[(u16, &str)]) {
        let ip = SSH_IP.parse().unwrap();
        let mut data: serde_json::Map<String, Value> = frontends
            .iter()
            .map(|(port, backend)| (data_key(ip, *port), json!(backend)))
            .collect();
        data.insert(RECEIVES.into(), json!(if receives { SSH_IP } else { "" }));
        data.insert(RENEWED.into(), json!(rfc3339(SystemTime::now())));
        self.api.apply(
            Kind::ConfigMap,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": config_map_name(node), "namespace": "ssh-fwd",
                                "labels": {vocabulary::SERVED: vocabulary::ACTIVITY_FROM}},
                   "data": data}),
        );
    }

    fn unready_pod(&self, name: &str) {
        self.api.apply(
            Kind::Pod,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "jobs",
                                "labels": {vocabulary::SSH: "enabled"}},
                   "spec": {"containers": [{"name": "main", "image": "sshd"}]},
                   "status": {"phase": "Running", "podIP": POD_IP,
                              "conditions": [{"type": "Ready", "status": "False"}]}}),
        );
    }

    fn set_ready(&self, name: &str) {
        self.api.patch_status(
            Kind::Pod,
            "jobs",
            name,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                                               "lastTransitionTime": rfc3339(SystemTime::now())}]}}),
        );
    }

    fn told(&self, pod: &str) -> bool {
        !self
            .notes(pod, vocabulary::reason::SSH_READY, "Normal")
            .is_empty()
    }

    /// The port granted to `pod`'s Service (from its spec: the endpoint
    /// annotation comes only with the command).
    async fn granted_port(&self, pod: &str) -> u16 {
        let name = format!("ssh-{pod}");
        eventually("the grant", || {
            self.api
                .get(Kind::Service, "jobs", &name)
                .is_some_and(|s| s["status"]["conditions"][0]["type"] == vocabulary::GRANTED)
        })
        .await;
        let svc = self.api.get(Kind::Service, "jobs", &name).unwrap();
        u16::try_from(svc["spec"]["ports"][0]["port"].as_u64().unwrap()).unwrap()
    }
}

/// Waits `for_`, checking `pod` is not told meanwhile.
async fn not_told_for(bed: &Bed, pod: &str, for_: Duration, why: &str) {
    let until = tokio::time::Instant::now() + for_;
    while tokio::time::Instant::now() < until {
        assert!(!bed.told(pod), "told before {why}");
        assert!(bed.endpoint(pod).is_none(), "annotated before {why}");
        // The pace of checks in a window where the command must not come.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_command_waits_for_readiness_then_for_every_node_receiving_the_ssh_ip() {
    let bed = Bed::new();
    let controller = bed.controller("a", &["--publish-when", "served", "--publish-wait", "60s"]);
    bed.unready_pod("job-1");
    let port = bed.granted_port("job-1").await;
    // Labelled into its Service's endpoints at once, so the agents can map
    // it; the command waits.
    eventually("the selector label", || {
        bed.api
            .get(Kind::Pod, "jobs", "job-1")
            .is_some_and(|p| p["metadata"]["labels"][vocabulary::SERVICE] == "ssh-job-1")
    })
    .await;
    let backend = format!("{POD_IP}:22");
    bed.report("node-a", true, &[(port, &backend)]);
    // node-b receives the SSH IP too (no announcement: the network brings
    // it to both) and maps the port to the previous job still; node-c
    // receives nothing and does not count.
    bed.report("node-b", true, &[(port, "10.244.9.9:22")]);
    bed.report("node-c", false, &[]);
    not_told_for(&bed, "job-1", Duration::from_secs(1), "the pod is Ready").await;
    bed.set_ready("job-1");
    not_told_for(
        &bed,
        "job-1",
        Duration::from_secs(2),
        "node-b maps the port to the pod",
    )
    .await;
    bed.report("node-b", true, &[(port, &backend)]);
    eventually("the command is told", || bed.told("job-1")).await;
    assert_eq!(
        bed.endpoint("job-1"),
        Some(format!("ssh.example.org:{port}"))
    );
    assert!(
        bed.notes("job-1", vocabulary::reason::SSH_UNCONFIRMED, "Warning")
            .is_empty()
    );
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn past_the_wait_the_command_is_told_with_a_warning_naming_the_late_node() {
    let bed = Bed::new();
    let controller = bed.controller("a", &["--publish-when", "served", "--publish-wait", "3s"]);
    // node-b's report is in before the pod exists, so before it is Ready:
    // node-a's alone would do otherwise.
    bed.report("node-b", true, &[]);
    bed.unready_pod("job-1");
    let port = bed.granted_port("job-1").await;
    bed.report("node-a", true, &[(port, &format!("{POD_IP}:22"))]);
    bed.set_ready("job-1");
    // The wait counts from the Ready condition's time, to the second.
    not_told_for(
        &bed,
        "job-1",
        Duration::from_millis(1500),
        "the wait passed",
    )
    .await;
    eventually("the command is told", || bed.told("job-1")).await;
    let warned = bed.notes("job-1", vocabulary::reason::SSH_UNCONFIRMED, "Warning");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("node(s) node-b") && warned[0].contains(&format!("port {port}")),
        "{}",
        warned[0]
    );
    bed.assert_requests_listed();
    controller.abort();
}
