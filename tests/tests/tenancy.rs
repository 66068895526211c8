//! A port reaches the job it was given to, and nobody else: tenants who
//! share the cluster try to take another tenant's published port, end to
//! end, with the real agent and controller on one node, each with its own
//! service account token, the fake API server enforcing deploy/'s RBAC and
//! admission policies and Kubernetes' bootstrap roles, and real OpenSSH in
//! the pods. Each attack is made with a tenant's token, bound to the
//! standard `edit` role in its own namespace; the victim's port must keep
//! reaching the victim's pod, and its Service must stay the one it was
//! given.

use std::time::{Duration, Instant};

use crate::common::EXTERNAL_IP;
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
const WAIT: Duration = Duration::from_secs(30);

/// The victim's namespace and the attacker's.
// The attacker's sorts first, so that it would win any tie of age.
const VICTIM_NS: &str = "victim";
const ATTACKER_NS: &str = "attacker";

/// One node with an agent and a controller on the fake API server, and
/// three pods running sshd (10.244.1.5, .2.5, .3.5: pod 0 has the lowest
/// address).
struct Bed {
    api: FakeApi,
    /// The tenants' tokens: the attacker's namespace's, and the victim's
    /// (a neighbour of the victim who may write in its namespace).
    attacker: String,
    neighbour: String,
    topo: Topology,
    _controller: Agent,
    _agent: Agent,
    _bpffs: Bpffs,
    _dir: tempfile::TempDir,
}

impl Bed {
    /// `styles`: the agent's and the controller's `--honour-styles`, or
    /// their defaults.
    fn start(styles: Option<&str>) -> Self {
        let topo = Topology::single_node(3).unwrap();
        let node = &topo.nodes[0].ns;
        let api = FakeApi::start(node).unwrap();
        api.enforce_deploy();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = |who: &str, token: &str| {
            let path = dir.path().join(format!("kubeconfig-{who}"));
            std::fs::write(&path, api.kubeconfig_as(token)).unwrap();
            path.to_str().unwrap().to_owned()
        };
        let agent_token = api.service_account_token("ssh-fwd", "ssh-fwd-agent", Some("node"));
        let controller_token = api.service_account_token("ssh-fwd", "ssh-fwd-controller", None);
        let styles: Vec<String> = styles
            .map(|s| vec!["--honour-styles".into(), s.into()])
            .unwrap_or_default();
        let agent_config = kubeconfig("agent", &agent_token);
        let mut agent_args: Vec<String> = ["--kubernetes", "--kubeconfig", &agent_config]
            .map(String::from)
            .to_vec();
        // The node its token names, as the DaemonSet passes NODE_NAME.
        agent_args.extend(["--ssh-ip".into(), EXTERNAL_IP.into()]);
        agent_args.extend(["--node-name".into(), "node".into()]);
        agent_args.extend(styles.iter().cloned());
        let bpffs = Bpffs::new().unwrap();
        let agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
        let controller_config = kubeconfig("controller", &controller_token);
        let mut controller_args: Vec<String> = [
            "--kubeconfig",
            &controller_config,
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
            attacker: api.tenant_token(ATTACKER_NS),
            neighbour: api.tenant_token(VICTIM_NS),
            api,
            topo,
            _controller: controller,
            _agent: agent,
            _bpffs: bpffs,
            _dir: dir,
        }
    }

    /// Pod `name` in `namespace` on pod `n`'s address, with `labels`,
    /// created by the tenant of `namespace`, then running and ready as its
    /// kubelet reports.
    fn pod(&self, namespace: &str, name: &str, n: usize, labels: Value) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        });
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        taken(
            self.api
                .call(self.tenant(namespace), "POST", &path, Some(&pod)),
        );
        let status = json!({"status": {"phase": "Running", "podIP": self.topo.pods[n].ip,
                                       "conditions": [{"type": "Ready", "status": "True"}]}});
        self.api.patch_status(Kind::Pod, namespace, name, &status);
    }

    fn tenant(&self, namespace: &str) -> &str {
        if namespace == ATTACKER_NS {
            &self.attacker
        } else {
            &self.neighbour
        }
    }

    /// The attacker's merge patch of its own Service `name`.
    fn attacker_patches(&self, name: &str, patch: &Value) {
        let path = format!("/api/v1/namespaces/{ATTACKER_NS}/services/{name}");
        taken(self.api.call(&self.attacker, "PATCH", &path, Some(patch)));
    }

    /// A Service the attacker makes in its namespace.
    fn attacker_creates(&self, service: &Value) {
        let path = format!("/api/v1/namespaces/{ATTACKER_NS}/services");
        taken(self.api.call(&self.attacker, "POST", &path, Some(service)));
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
        let port = eventually("the job's SSHReady event", WAIT, || {
            let event = self.api.list(Kind::Event).into_iter().find(|e| {
                e["regarding"]["namespace"] == namespace
                    && e["regarding"]["name"] == name
                    && e["reason"] == vocabulary::reason::SSH_READY
            })?;
            let note = event["note"].as_str()?.to_owned();
            note.rsplit_once(" -p ")?.1.parse::<u16>().ok()
        });
        let hostname = &self.topo.pods[n].hostname;
        eventually("ssh to the job's port", WAIT, || {
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

/// Expects a write to be taken (2xx).
fn taken((code, answer): (u16, Value)) {
    assert!((200..300).contains(&code), "refused with {code}: {answer}");
}

const VICTIM_JOB: &str = "victim-job";
const ATTACKER_JOB: &str = "attacker-job";

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
    bed.attacker_creates(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ATTACKER_NS, "labels": all},
        "spec": {"type": "ClusterIP", "externalIPs": [EXTERNAL_IP],
                 "selector": {"app": "mine"}, "ports": [port("ssh", first)]}
    }));
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
    bed.attacker_patches(
        &attacker_svc,
        &json!({"spec": {"ports": [port("ssh", own), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    eventually(
        "the attacker's Service put back as the controller made it",
        WAIT,
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
    bed.attacker_patches(
        "sneaky",
        &json!({"spec": {"ports": [port("ssh", 15_999), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    assert_eq!(
        bed.landed(15_999),
        None,
        "an externalIPs Service is not honoured unless --honour-styles says so"
    );
    eventually("the tenant told why, on its Service", WAIT, || {
        bed.api.list(Kind::Event).into_iter().find(|e| {
            e["metadata"]["namespace"] == ATTACKER_NS
                && e["regarding"]["name"] == "sneaky"
                && e["reason"] == ssh_fwd::agent::source::events::reason::STYLE_NOT_HONOURED
        })
    });
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
    eventually("the tenant's own externalIPs port", WAIT, || {
        (bed.landed(15_999).as_deref() == Some(bed.topo.pods[0].hostname.as_str())).then_some(())
    });
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    bed.attacker_patches(
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
    eventually("the intruder in the victim's EndpointSlice", WAIT, || {
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
    bed.attacker_creates(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "decoy", "namespace": ATTACKER_NS, "labels": {
            vocabulary::PROXY_NAME_LABEL: vocabulary::PROXY_NAME,
            vocabulary::MANAGED_BY_LABEL: vocabulary::CONTROLLER,
        }},
        "spec": {"type": "ClusterIP", "selector": {"app": "mine"},
                 "ports": [port("ssh", 15_998)]}
    }));
    older_by_a_second();
    let taken = bed.job(VICTIM_NS, VICTIM_JOB, 1);
    let uid = bed.uid(VICTIM_NS, &format!("ssh-{VICTIM_JOB}"));
    bed.attacker_patches(
        "decoy",
        &json!({"spec": {"ports": [port("ssh", 15_998), port("stolen", taken)]}}),
    );
    bed.victim_holds(taken, 1, &uid, Duration::from_secs(8));
    assert!(
        bed.service(ATTACKER_NS, "decoy").is_some(),
        "the controller deleted a Service it did not make"
    );
}

/// A tenant may write its own job's Service: its selector widened and its
/// shape changed, the Service is put back as the controller made it (the
/// admission policies let the controller write a Service it made, however
/// someone changed it since), the pod is told, and the port reaches the
/// job's pod throughout.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_tenants_change_to_its_own_jobs_service_is_put_back_and_told() {
    privilege::require();
    let bed = Bed::start(None);
    let own = bed.job(ATTACKER_NS, ATTACKER_JOB, 0);
    bed.pod(ATTACKER_NS, "other-0", 1, json!({"app": "other"}));
    let name = format!("ssh-{ATTACKER_JOB}");
    bed.attacker_patches(
        &name,
        &json!({"spec": {"selector": {"app": "other"}, "externalIPs": [EXTERNAL_IP]}}),
    );
    eventually(
        "the Service put back as the controller made it",
        WAIT,
        || {
            let svc = bed.service(ATTACKER_NS, &name)?;
            let selector = &svc["spec"]["selector"];
            let back = *selector == json!({vocabulary::SERVICE: name})
                && svc["spec"]["externalIPs"].is_null();
            back.then_some(())
        },
    );
    let told = eventually("the pod told", WAIT, || {
        bed.api.list(Kind::Event).into_iter().find(|e| {
            e["regarding"]["name"] == ATTACKER_JOB
                && e["reason"] == vocabulary::reason::SERVICE_RESTORED
        })
    });
    assert_eq!(told["type"], "Warning", "{told}");
    assert!(
        told["note"]
            .as_str()
            .unwrap()
            .contains("selector, externalIPs"),
        "{told}"
    );
    assert_eq!(
        bed.landed(own).as_deref(),
        Some(bed.topo.pods[0].hostname.as_str())
    );
}
