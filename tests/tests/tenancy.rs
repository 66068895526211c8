//! A port reaches the job it was given to, and nobody else: tenants who
//! share the cluster try to take another tenant's published port, end to
//! end, with the real agent and controller on one node, the fake API
//! server, and real OpenSSH in the pods. Each attack is one a tenant with
//! the ordinary rights in its own namespace can make; the victim's port
//! must keep reaching the victim's pod, and its Service must stay the one
//! it was given.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use std::time::{Duration, Instant};

use common::EXTERNAL_IP;
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, Topology, cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    topology::EXT_IFACE,
};

/// The victim's namespace and the attacker's.
// The attacker's sorts first, so that it would win any tie of age.
const VICTIM_NS: &str = "victim";
const ATTACKER_NS: &str = "attacker";

/// One node with an agent and a controller on the fake API server, and
/// three pods running sshd (10.244.1.5, .2.5, .3.5: pod 0 has the lowest
/// address).
struct Bed {
    api: FakeApi,
    topo: Topology,
    _controller: Agent,
    _agent: Agent,
    _bpffs: Bpffs,
    _dir: tempfile::TempDir,
}

impl Bed {
    /// `styles`: the agent's and the controller's `--service-styles`, or
    /// their defaults.
    fn start(styles: Option<&str>) -> Self {
        let topo = Topology::single_node(3).unwrap();
        let node = &topo.nodes[0].ns;
        let api = FakeApi::start(node).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
        let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
        let styles: Vec<String> = styles
            .map(|s| vec!["--service-styles".into(), s.into()])
            .unwrap_or_default();
        let mut agent_args: Vec<String> = ["--kubernetes", "--kubeconfig", &kubeconfig]
            .map(String::from)
            .to_vec();
        agent_args.extend(["--ssh-ip".into(), EXTERNAL_IP.into()]);
        agent_args.extend(styles.iter().cloned());
        let bpffs = Bpffs::new().unwrap();
        let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
        let mut controller_args: Vec<String> = [
            "--kubeconfig",
            &kubeconfig,
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
        controller_args.extend(styles);
        let controller =
            Agent::start_controller(node, dir.path().join("controller.log"), &controller_args)
                .unwrap();
        Self {
            api,
            topo,
            _controller: controller,
            _agent: agent,
            _bpffs: bpffs,
            _dir: dir,
        }
    }

    /// Pod `name` in `namespace` on pod `n`'s address, with `labels`.
    fn pod(&self, namespace: &str, name: &str, n: usize, labels: Value) {
        self.api
            .create(
                Kind::Pod,
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
                    "status": {"phase": "Running", "podIP": self.topo.pods[n].ip,
                               "conditions": [{"type": "Ready", "status": "True"}]}
                }),
            )
            .unwrap();
    }

    /// An SSH job's pod on pod `n`, and the port it was told, once its
    /// command works.
    fn job(&self, namespace: &str, name: &str, n: usize) -> u16 {
        self.pod(
            namespace,
            name,
            n,
            json!({vocabulary::SSH: vocabulary::SSH_ENABLED}),
        );
        let port = eventually("the job's SSHReady event", || {
            let event = self.api.list(Kind::Event).into_iter().find(|e| {
                e["regarding"]["namespace"] == namespace
                    && e["regarding"]["name"] == name
                    && e["reason"] == vocabulary::reason::SSH_READY
            })?;
            let note = event["note"].as_str()?.to_owned();
            note.rsplit_once(" -p ")?.1.parse::<u16>().ok()
        });
        let hostname = &self.topo.pods[n].hostname;
        eventually("ssh to the job's port", || {
            (self.landed(port).as_deref() == Some(hostname.as_str())).then_some(())
        });
        port
    }

    /// The host name of the pod that `ssh -p PORT` reaches, if any.
    fn landed(&self, port: u16) -> Option<String> {
        let ssh = self.topo.ssh();
        ssh.run(&self.topo.client, EXTERNAL_IP, port, "hostname")
            .ok()
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Value> {
        self.api.get(Kind::Service, namespace, name)
    }

    fn uid(&self, namespace: &str, name: &str) -> String {
        let svc = self.service(namespace, name).unwrap();
        svc["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    /// For `hold`, the victim's port keeps reaching pod `victim` and its
    /// Service keeps `uid`.
    fn victim_holds(&self, port: u16, victim: usize, uid: &str, hold: Duration) {
        let until = Instant::now() + hold;
        let hostname = &self.topo.pods[victim].hostname;
        let service = format!("ssh-{VICTIM_JOB}");
        while Instant::now() < until {
            let now = self.service(VICTIM_NS, &service);
            let now_uid = now.as_ref().and_then(|s| s["metadata"]["uid"].as_str());
            assert_eq!(
                now_uid,
                Some(uid),
                "the victim's Service was replaced or removed: {now:?}"
            );
            assert_eq!(
                self.landed(port).as_deref(),
                Some(hostname.as_str()),
                "the victim's port {port} no longer reaches the victim's pod"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

const VICTIM_JOB: &str = "victim-job";
const ATTACKER_JOB: &str = "attacker-job";

fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let mut found = None;
    let done = cmd::wait_until(Duration::from_secs(30), || {
        found = check();
        found.is_some()
    });
    assert!(done, "timed out waiting for: {what}");
    found.unwrap()
}

/// Creation times are kept to the second: what is made after this is
/// younger than what was made before, never the same age.
fn older_by_a_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

/// A TCP Service port forwarding to the pod's port 22.
fn port(name: &str, number: u16) -> Value {
    json!({"name": name, "protocol": "TCP", "port": number, "targetPort": 22})
}

/// The ports of a Service's spec.
fn ports_of(svc: &Value) -> Vec<u64> {
    svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["port"].as_u64())
        .collect()
}

/// A tenant's own plain Service, made before the victim's job existed:
/// `externalIPs` on the SSH IP, selecting the tenant's pod, with the
/// agents' selector label, on `first` (a port nobody was given).
fn own_external_ips_service(bed: &Bed, name: &str, labels: Value, first: u16) {
    let mut all = json!({vocabulary::PROXY_NAME_LABEL: vocabulary::PROXY_NAME});
    all.as_object_mut()
        .unwrap()
        .extend(labels.as_object().unwrap().clone());
    bed.api
        .create(
            Kind::Service,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ATTACKER_NS, "labels": all},
                "spec": {"type": "ClusterIP", "externalIPs": [EXTERNAL_IP],
                         "selector": {"app": "mine"}, "ports": [port("ssh", first)]}
            }),
        )
        .unwrap();
}

/// The tenant's own job Service, made by the controller before the
/// victim's, patched to list the victim's port too: the victim's port
/// still reaches the victim, its Service stays, and the controller puts
/// the tenant's Service back as it made it.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_tenant_adding_a_victims_port_to_its_older_load_balancer_takes_nothing() {
    privilege::require();
    let bed = Bed::start(None);
    let own = bed.job(ATTACKER_NS, ATTACKER_JOB, 0);
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    let attacker_svc = format!("ssh-{ATTACKER_JOB}");
    bed.api.patch(
        Kind::Service,
        ATTACKER_NS,
        &attacker_svc,
        &json!({"spec": {"ports": [port("ssh", own), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    eventually(
        "the attacker's Service put back as the controller made it",
        || {
            let svc = bed.service(ATTACKER_NS, &attacker_svc)?;
            (ports_of(&svc) == [u64::from(own)]).then_some(())
        },
    );
    assert_eq!(
        bed.landed(own).as_deref(),
        Some(bed.topo.pods[0].hostname.as_str())
    );
}

/// A tenant's plain `externalIPs` Service, made before the victim's job,
/// patched to list the victim's port: under the default Service styles it
/// is not honoured at all.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_tenants_older_external_ips_service_takes_nothing_by_default() {
    privilege::require();
    let bed = Bed::start(None);
    bed.pod(ATTACKER_NS, "mine-0", 0, json!({"app": "mine"}));
    own_external_ips_service(&bed, "sneaky", json!({}), 15_999);
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    bed.api.patch(
        Kind::Service,
        ATTACKER_NS,
        "sneaky",
        &json!({"spec": {"ports": [port("ssh", 15_999), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    assert_eq!(
        bed.landed(15_999),
        None,
        "an externalIPs Service is not honoured unless --service-styles says so"
    );
}

/// With `externalips` honoured (a cluster that trusts every Service
/// writer with the ports nobody was given), the same attack still takes
/// nothing: a port the controller granted goes to its grant, however old
/// the other Service is.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_granted_port_beats_an_older_external_ips_service_where_those_are_honoured() {
    privilege::require();
    let bed = Bed::start(Some("loadbalancer,externalips"));
    bed.pod(ATTACKER_NS, "mine-0", 0, json!({"app": "mine"}));
    own_external_ips_service(&bed, "sneaky", json!({}), 15_999);
    eventually("the tenant's own externalIPs port", || {
        (bed.landed(15_999).as_deref() == Some(bed.topo.pods[0].hostname.as_str())).then_some(())
    });
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    bed.api.patch(
        Kind::Service,
        ATTACKER_NS,
        "sneaky",
        &json!({"spec": {"ports": [port("ssh", 15_999), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
}

/// A pod in the victim's namespace labelled to join the victim's Service
/// (and with a lower address, which the choice among ready endpoints
/// would favour) is not the backend: only the pod the port was granted to
/// is.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_joining_another_jobs_service_by_label_is_not_its_backend() {
    privilege::require();
    let bed = Bed::start(None);
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    let service = format!("ssh-{VICTIM_JOB}");
    bed.pod(
        VICTIM_NS,
        "intruder",
        0,
        json!({vocabulary::SERVICE: service}),
    );
    eventually("the intruder in the victim's EndpointSlice", || {
        bed.api.list(Kind::EndpointSlice).into_iter().find(|s| {
            s["metadata"]["namespace"] == VICTIM_NS
                && s["endpoints"].as_array().is_some_and(|e| e.len() == 2)
        })
    });
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(6));
}

/// A tenant's Service that carries the controller's `managed-by` label
/// (anyone may set a label) is not the controller's: made before the
/// victim's job and patched to list its port, it moves nothing.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_service_labelled_as_the_controllers_is_not_the_controllers() {
    privilege::require();
    let bed = Bed::start(None);
    bed.api
        .create(
            Kind::Service,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "decoy", "namespace": ATTACKER_NS, "labels": {
                    vocabulary::PROXY_NAME_LABEL: vocabulary::PROXY_NAME,
                    vocabulary::MANAGED_BY_LABEL: vocabulary::CONTROLLER,
                }},
                "spec": {"type": "ClusterIP", "selector": {"app": "mine"},
                         "ports": [port("ssh", 15_998)]}
            }),
        )
        .unwrap();
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    bed.api.patch(
        Kind::Service,
        ATTACKER_NS,
        "decoy",
        &json!({"spec": {"ports": [port("ssh", 15_998), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    assert!(
        bed.service(ATTACKER_NS, "decoy").is_some(),
        "the controller deleted a Service it did not make"
    );
}
