//! SSH jobs: a pod namespace running sshd, wired to its node, and its Pod
//! object labelled for SSH, which the controller gives a port and a
//! Service. A job ends as a pod does: its object deleted, then its
//! namespace gone.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::bed::Bed;
use crate::{Pod, fake_api::Kind};

/// The label a pod asks for SSH with, and the annotation the controller
/// publishes its endpoint in (`ssh_fwd::vocabulary::{SSH, ENDPOINT}`; the
/// soak test checks they agree).
pub const SSH_LABEL: &str = "ssh-fwd.io/ssh";
pub const ENDPOINT_ANNOTATION: &str = "ssh-fwd.io/endpoint";
/// The namespace jobs run in.
pub const NAMESPACE: &str = "jobs";

/// One running job.
pub struct Job {
    pub pod: Pod,
    pub name: String,
    /// The port its ssh command names.
    pub port: u16,
}

impl Job {
    /// The host name its sshd reports (`pod-N`).
    pub fn hostname(&self) -> &str {
        &self.pod.hostname
    }
}

fn pod_object(name: &str, ip: &str, node: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {SSH_LABEL: "enabled"}},
        "spec": {"nodeName": format!("node{node}"), "containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Starts job `name` as pod number `n` on `node` and waits until its port
/// is published (at most `limit`, and only while `wanted` holds).
pub fn start(
    bed: &Bed,
    name: &str,
    (n, node): (usize, usize),
    limit: Duration,
    wanted: &dyn Fn() -> bool,
) -> anyhow::Result<Job> {
    let pod = Pod::wire(&bed.seg.nodes[node], node, n, &bed.seg.keys)?;
    bed.api
        .create(Kind::Pod, pod_object(name, &pod.ip, node))
        .map_err(|(code, message)| anyhow::anyhow!("creating pod {name}: {code} {message}"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(port) = published_port(bed, name) {
            return Ok(Job {
                pod,
                name: name.to_owned(),
                port,
            });
        }
        if Instant::now() > deadline || !wanted() {
            bail!("job {name}'s port was not published within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The port in the pod's endpoint annotation, once published.
fn published_port(bed: &Bed, name: &str) -> Option<u16> {
    let pod = bed.api.get(Kind::Pod, NAMESPACE, name)?;
    let endpoint = pod["metadata"]["annotations"][ENDPOINT_ANNOTATION].as_str()?;
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// Ends `job`: its Pod deleted (a second's grace, as the kubelet ends it),
/// then its namespace and sshd gone.
pub fn end(bed: &Bed, job: Job) -> anyhow::Result<()> {
    bed.api.delete_pod(NAMESPACE, &job.name, Some(1));
    drop(job.pod);
    let gone = crate::cmd::wait_until(Duration::from_secs(10), || {
        bed.api.get(Kind::Pod, NAMESPACE, &job.name).is_none()
    });
    gone.then_some(())
        .with_context(|| format!("pod {} still there 10 s after its delete", job.name))
}
