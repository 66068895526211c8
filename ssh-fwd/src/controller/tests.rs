//! The controller's reconcile loop against an API server that speaks the
//! real JSON (`ssh_fwd_tests::fake_api`, on loopback): writes, races,
//! exhaustion, warnings, retries, restart, failover. Every test ends by
//! checking every request made against the API-call list the RBAC is built
//! from.

mod client_cert;
mod env_missing;
mod failover;
mod grace;
mod host_certs;
mod publish_gate;
mod quarantine;
mod retries;
mod self_signed;
mod squat;
mod warnings;
mod webhook;

use std::time::Duration;

use serde_json::{Value, json};
use ssh_fwd_tests::fake_api::{FakeApi, Kind, Request};

use crate::{k8s::api_calls, vocabulary};

const LIMIT: Duration = Duration::from_secs(20);

struct Bed {
    api: FakeApi,
    dir: tempfile::TempDir,
}

impl Bed {
    fn new() -> Self {
        Self {
            api: FakeApi::start_on_loopback().unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts a controller in this runtime; dropping the handle's task
    /// (abort) is a crash: no Lease release. Its requests carry `identity`
    /// as their user. Its Lease lasts 2 s unless `extra` says otherwise.
    fn controller(
        &self,
        identity: &str,
        extra: &[&str],
    ) -> tokio::task::JoinHandle<anyhow::Result<()>> {
        let path = self.dir.path().join(format!("kubeconfig-{identity}"));
        std::fs::write(&path, self.api.kubeconfig_as(identity)).unwrap();
        let kubeconfig = path.display().to_string();
        let mut argv = vec![
            "--ssh-ip",
            "198.18.0.10",
            "--ssh-hostname",
            "ssh.example.org",
            "--kubeconfig",
            &kubeconfig,
            "--identity",
            identity,
            "--lease-namespace",
            "ssh-fwd",
        ];
        if !extra.contains(&"--lease-duration") {
            argv.extend(["--lease-duration", "2s"]);
        }
        // No agents here but in `publish_gate`'s tests, which play them.
        if !extra.contains(&"--publish-when") {
            argv.extend(["--publish-when", "ready"]);
        }
        argv.extend_from_slice(extra);
        let args = super::args::parse(argv).unwrap();
        tokio::spawn(super::run(args))
    }

    fn pod(&self, name: &str) {
        self.pod_with(name, json!({}));
    }

    fn pod_with(&self, name: &str, annotations: Value) {
        self.api.apply(
            Kind::Pod,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "jobs",
                                "labels": {vocabulary::SSH: "enabled"},
                                "annotations": annotations},
                   "spec": {"containers": [{"name": "main", "image": "sshd"}]},
                   "status": {"phase": "Running", "podIP": "10.244.0.5",
                              "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
    }

    fn endpoint(&self, pod: &str) -> Option<String> {
        let pod = self.api.get(Kind::Pod, "jobs", pod)?;
        pod["metadata"]["annotations"][vocabulary::ENDPOINT]
            .as_str()
            .map(str::to_owned)
    }

    /// Waits until `pod` has its endpoint annotation.
    async fn annotated(&self, pod: &str) {
        eventually(&format!("{pod} is annotated"), || {
            self.endpoint(pod).is_some()
        })
        .await;
    }

    fn port_of(&self, pod: &str) -> Option<u16> {
        self.endpoint(pod)?.rsplit_once(':')?.1.parse().ok()
    }

    /// The notes of the events with this reason about `pod`, each checked
    /// to be of `type_` (Normal or Warning).
    fn notes(&self, pod: &str, reason: &str, type_: &str) -> Vec<String> {
        let events = self.api.list(Kind::Event);
        let events: Vec<&Value> = events
            .iter()
            .filter(|e| e["regarding"]["name"] == pod && e["reason"] == reason)
            .collect();
        for e in &events {
            assert_eq!(e["type"], type_, "{e}");
        }
        events
            .iter()
            .filter_map(|e| e["note"].as_str().map(str::to_owned))
            .collect()
    }

    /// The requests made with this user (a controller's identity).
    fn requests_of(&self, user: &str) -> Vec<Request> {
        let mut requests = self.api.requests();
        requests.retain(|r| r.user == user);
        requests
    }

    fn our_services(&self) -> Vec<Value> {
        self.api
            .list(Kind::Service)
            .into_iter()
            .filter(|s| {
                s["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ssh-fwd-controller"
            })
            .collect()
    }

    /// Every request so far is one the controller's RBAC grants.
    fn assert_requests_listed(&self) {
        for r in self.api.requests() {
            assert!(
                api_calls::allows(api_calls::CONTROLLER, &r.group, &r.resource, r.verb),
                "{r:?} is not in api_calls::CONTROLLER; add it there (and to deploy/ RBAC)"
            );
        }
    }
}

/// The value of `sample` (its name and labels as `/metrics` writes them)
/// on a controller started with `--metrics-addr 127.0.0.1:PORT`; `None`
/// while it does not answer or has no such sample.
async fn metric(port: u16, sample: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    // HTTP/1.0: the answer ends with the connection, never chunked.
    tcp.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.ok()?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Waits until the controller's `sample` satisfies `check`.
async fn metric_until(port: u16, sample: &str, what: &str, check: impl Fn(f64) -> bool) {
    let start = tokio::time::Instant::now();
    while !metric(port, sample).await.is_some_and(&check) {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !check() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn labelled_pod_gets_a_service_its_endpoint_and_the_ssh_command() {
    let bed = Bed::new();
    let controller = bed.controller("a", &[]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let port = bed.port_of("job-1").unwrap();
    assert!((20000..=27999).contains(&port));
    let svc = bed.api.get(Kind::Service, "jobs", "ssh-job-1").unwrap();
    assert_eq!(svc["spec"]["ports"][0]["port"], port);
    assert_eq!(svc["spec"]["loadBalancerClass"], vocabulary::LB_CLASS);
    assert_eq!(
        svc["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "198.18.0.10", "ports": [{"port": port, "protocol": "TCP"}]}])
    );
    let grant = &svc["status"]["conditions"][0];
    assert_eq!(
        (&grant["type"], &grant["status"]),
        (&json!(vocabulary::GRANTED), &json!("True"))
    );
    let pod_uid = bed.api.get(Kind::Pod, "jobs", "job-1").unwrap()["metadata"]["uid"].clone();
    assert_eq!(
        grant["message"],
        format!(
            "port {port} granted to pod jobs/job-1 (uid {})",
            pod_uid.as_str().unwrap()
        )
    );
    assert_eq!(svc["metadata"]["ownerReferences"][0]["name"], "job-1");
    // The Service selects the pod, so the endpoint controller lists it.
    let pod = bed.api.get(Kind::Pod, "jobs", "job-1").unwrap();
    assert_eq!(pod["metadata"]["labels"][vocabulary::SERVICE], "ssh-job-1");
    eventually("the event is sent", || {
        !bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")
            .is_empty()
    })
    .await;
    assert_eq!(
        bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal"),
        [format!(
            "SSH: Connected! Available at: ssh ucloud@ssh.example.org -p {port}"
        )]
    );
    // Removing the label takes the Service away and the endpoint with it.
    bed.api.patch(
        Kind::Pod,
        "jobs",
        "job-1",
        &json!({"metadata": {"labels": {vocabulary::SSH: null}}}),
    );
    eventually("the Service is deleted", || {
        bed.api.get(Kind::Service, "jobs", "ssh-job-1").is_none()
    })
    .await;
    eventually("the endpoint is withdrawn", || {
        bed.endpoint("job-1").is_none()
    })
    .await;
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn externalips_style_lists_the_ssh_ip() {
    let bed = Bed::new();
    let controller = bed.controller(
        "a",
        &[
            "--expose-as",
            "externalips",
            "--honour-styles",
            "externalips",
            "--ssh-user",
            "alice",
        ],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let svc = bed.api.get(Kind::Service, "jobs", "ssh-job-1").unwrap();
    assert_eq!(svc["spec"]["externalIPs"], json!(["198.18.0.10"]));
    assert!(svc["status"]["loadBalancer"]["ingress"].is_null());
    eventually("the event is sent", || {
        !bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")
            .is_empty()
    })
    .await;
    assert!(
        bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")[0]
            .contains("ssh alice@ssh.example.org -p ")
    );
    bed.assert_requests_listed();
    controller.abort();
}

/// Someone else's Service, older, on the port the controller reserved and
/// created the pod's Service on (as if made a moment before): the grant
/// keeps the port with the pod; the other Service holds none.
#[tokio::test]
async fn a_reserved_port_stays_with_its_pod_against_an_older_service_without_a_grant() {
    let bed = Bed::new();
    let raced = std::sync::Arc::new(std::sync::Mutex::new(None::<u64>));
    let seen = raced.clone();
    // The first create meets an older Service on the same port, as if
    // another client had created it a moment before.
    bed.api.before_service_create(Box::new(move |svc| {
        let mut seen = seen.lock().unwrap();
        if seen.is_some() {
            return None;
        }
        let port = svc["spec"]["ports"][0]["port"].as_u64()?;
        *seen = Some(port);
        Some(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "rival", "namespace": "other",
                                 "creationTimestamp": "2020-01-01T00:00:00Z",
                                 // One the agents honour: the controller sees it.
                                 "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
                    "spec": {"externalIPs": ["198.18.0.10"], "ports": [{"port": port}]}}))
    }));
    // The rival is of a shape the agents honour here.
    let controller = bed.controller(
        "a",
        &[
            "--port-range",
            "9000-9003",
            "--honour-styles",
            "loadbalancer,externalips",
        ],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    let rival_port = raced.lock().unwrap().expect("the hook ran") as u16;
    assert_eq!(bed.port_of("job-1"), Some(rival_port));
    assert_eq!(bed.our_services().len(), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(bed.port_of("job-1"), Some(rival_port), "never moved");
    assert_eq!(
        bed.notes("job-1", vocabulary::reason::SSH_READY, "Normal")
            .len(),
        1,
        "announced once"
    );
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn the_controller_reads_only_labelled_pods_and_the_services_the_agents_honour() {
    let bed = Bed::new();
    let service = |name: &str, port: u16, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "other", "labels": labels,
                            "creationTimestamp": "2025-01-01T00:00:00Z"},
               "spec": {"externalIPs": ["198.18.0.10"],
                        "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}]}})
    };
    // The agents honour this one: its port is taken.
    let honoured = json!({"service.kubernetes.io/service-proxy-name": "ssh-fwd"});
    bed.api
        .apply(Kind::Service, service("rival", 8000, honoured));
    // The agents ignore this one (not selected): its port is not.
    bed.api
        .apply(Kind::Service, service("web", 8001, json!({"app": "web"})));
    bed.api.apply(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web-1", "namespace": "jobs", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "main", "image": "nginx"}]},
               "status": {"phase": "Running", "podIP": "10.244.0.9"}}),
    );
    let styles = ["--honour-styles", "loadbalancer,externalips"];
    let controller = bed.controller("a", &[&["--port-range", "8000-8001"][..], &styles].concat());
    bed.pod("job-1");
    bed.annotated("job-1").await;
    assert_eq!(bed.port_of("job-1"), Some(8001));
    let reads: Vec<Request> = (bed.requests_of("a").into_iter())
        .filter(|r| matches!(r.verb, "list" | "watch"))
        .collect();
    let selectors = |resource: &str| -> Vec<String> {
        let mut s: Vec<String> = (reads.iter())
            .filter(|r| r.resource == resource)
            .map(|r| r.selector.clone())
            .collect();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(
        selectors("pods"),
        [format!("{}={}", vocabulary::SSH, vocabulary::SSH_ENABLED)]
    );
    // Ours carry the agents' default selector: one watch (and the start-up
    // check that the API server accepts --selector) reads them and the
    // others the agents honour.
    assert_eq!(
        selectors("services"),
        ["service.kubernetes.io/service-proxy-name=ssh-fwd"]
    );
    let web = bed.api.get(Kind::Pod, "jobs", "web-1").unwrap();
    assert!(web["metadata"]["annotations"].is_null(), "{web}");
    bed.assert_requests_listed();
    controller.abort();
}

/// A LoadBalancer of our class that someone else made, with an ingress
/// address in its status but no grant of the controller's: the agents
/// honour none of its ports, and neither does the controller.
#[tokio::test]
async fn a_load_balancer_of_our_class_without_a_grant_holds_no_port() {
    let bed = Bed::new();
    bed.api.apply(
        Kind::Service,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "theirs", "namespace": "other",
                            "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"},
                            "creationTimestamp": "2025-01-01T00:00:00Z"},
               "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                        "allocateLoadBalancerNodePorts": false,
                        "ports": [{"port": 8000, "targetPort": 22, "protocol": "TCP"}]},
               "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}}}),
    );
    let controller = bed.controller("a", &["--port-range", "8000-8000"]);
    bed.pod("job-1");
    bed.annotated("job-1").await;
    assert_eq!(bed.port_of("job-1"), Some(8000));
    assert_eq!(bed.our_services().len(), 1);
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test]
async fn with_a_selector_of_its_own_the_controller_still_sees_the_services_the_agents_honour() {
    let bed = Bed::new();
    bed.api.apply(
        Kind::Service,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "rival", "namespace": "other", "labels": {"team": "hpc"},
                            "creationTimestamp": "2025-01-01T00:00:00Z"},
               "spec": {"externalIPs": ["198.18.0.10"],
                        "ports": [{"port": 8000, "targetPort": 22, "protocol": "TCP"}]}}),
    );
    let controller = bed.controller(
        "a",
        &[
            "--port-range",
            "8000-8001",
            "--selector",
            "team=hpc",
            "--honour-styles",
            "loadbalancer,externalips",
        ],
    );
    bed.pod("job-1");
    bed.annotated("job-1").await;
    assert_eq!(bed.port_of("job-1"), Some(8001));
    bed.assert_requests_listed();
    controller.abort();
}
