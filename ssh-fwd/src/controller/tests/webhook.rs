//! The webhook as the API server calls it: over real HTTPS with a
//! certificate the test makes (and swaps on disk), served by controller
//! replicas running against the fake API, reserving ports there.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    sync::Arc,
};

use base64::Engine as _;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::controller::webhook::{mutate::tests::job_pod, self_signed};

/// A CA and a serving certificate for `localhost`, written where
/// `--webhook-cert-dir` reads them (atomically, as the kubelet swaps a
/// Secret volume); returns the CA's PEM.
pub fn write_pair(dir: &Path) -> String {
    let (pem, _, _) =
        self_signed::generate(&["localhost".to_owned()], time::OffsetDateTime::now_utc()).unwrap();
    let staging = dir.join("..staging");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("tls.crt"), &pem.cert).unwrap();
    std::fs::write(staging.join("tls.key"), &pem.key).unwrap();
    std::fs::rename(staging.join("tls.key"), dir.join("tls.key")).unwrap();
    std::fs::rename(staging.join("tls.crt"), dir.join("tls.crt")).unwrap();
    pem.ca
}

/// A free port on loopback for a replica's webhook.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// POSTs `body` to `https://localhost:PORT/mutate`, trusting only `ca`.
pub async fn post(port: u16, ca: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
    post_to(port, "localhost", ca, body).await
}

/// POSTs `body` to the webhook on `port` as `host`, trusting only `ca`,
/// over a connection of its own.
pub async fn post_to(
    port: u16,
    host: &str,
    ca: &str,
    body: &Value,
) -> anyhow::Result<(u16, Value)> {
    let mut connection = Connection::open(port, host, trusting(ca)?).await?;
    connection.review(body).await
}

/// A TLS client configuration trusting only `ca`.
pub fn trusting(ca: &str) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection to a replica's webhook, kept open from one review to the
/// next as the API server's client keeps its connections.
pub struct Connection {
    tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    host: String,
    /// The `?timeout=` of each review, as the API server sends the
    /// webhook's timeoutSeconds.
    pub timeout: &'static str,
}

impl Connection {
    pub async fn open(
        port: u16,
        host: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> anyhow::Result<Self> {
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        // As the API server's (Go) client: no Nagle, one write per request.
        tcp.set_nodelay(true)?;
        let tls = connector
            .connect(ServerName::try_from(host.to_owned())?, tcp)
            .await?;
        Ok(Self {
            tls,
            host: host.to_owned(),
            timeout: "5s",
        })
    }

    /// POSTs one review and reads its answer: the status and the JSON.
    pub async fn review(&mut self, body: &Value) -> anyhow::Result<(u16, Value)> {
        let body = body.to_string();
        let head = format!(
            "POST /mutate?timeout={} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.timeout,
            self.host,
            body.len(),
        );
        self.tls
            .write_all(format!("{head}{body}").as_bytes())
            .await?;
        let mut response = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        let (end, length) = loop {
            if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&response[..end]).to_lowercase();
                let length = (head.lines())
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| anyhow::anyhow!("no Content-Length in {head}"))?;
                break (end + 4, length);
            }
            let n = self.tls.read(&mut chunk).await?;
            anyhow::ensure!(n > 0, "the webhook closed the connection");
            response.extend_from_slice(&chunk[..n]);
        };
        while response.len() < end + length {
            let n = self.tls.read(&mut chunk).await?;
            anyhow::ensure!(n > 0, "the webhook closed the connection mid-answer");
            response.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&response[..end]);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let json = serde_json::from_slice(&response[end..end + length]).unwrap_or(Value::Null);
        Ok((status, json))
    }
}

/// Waits until the replica's webhook answers with `ca`.
pub(super) async fn serving(port: u16, ca: &str) {
    let probe = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                       "request": {"uid": "probe", "kind": {"kind": "Service"}, "operation": "CREATE"}});
    let start = tokio::time::Instant::now();
    while post(port, ca, &probe).await.is_err() {
        assert!(
            start.elapsed() < LIMIT,
            "the webhook on {port} never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The arguments that turn on a replica's webhook on `port`.
pub(super) fn webhook_args(port: u16, certs: &Path) -> Vec<String> {
    [
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-cert-dir",
        &certs.display().to_string(),
        "--webhook-reload-interval",
        "100ms",
        "--image",
        "ssh-fwd:test",
        "--reservation-grace",
        "2s",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The pod of a review, patched as the answer says.
pub fn patched(answer: &Value, pod: &Value) -> Value {
    let mut out = pod.clone();
    if let Some(patch) = answer["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut out, &patch).unwrap();
    }
    out
}

pub fn review(uid: &str, pod: &Value) -> Value {
    json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
           "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                       "resource": {"group": "", "version": "v1", "resource": "pods"},
                       "name": "", "namespace": "jobs", "operation": "CREATE",
                       "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
                       "object": pod, "oldObject": null, "dryRun": false}})
}

/// Creates the pod as the API server would after admission: validated
/// (the mutation must leave a pod it takes), stored under `name` (as if
/// made from generateName), then running (the controller watches it
/// appear).
pub(super) fn create_pod(bed: &Bed, pod: &Value, name: &str) {
    let mut pod = pod.clone();
    pod["metadata"]["name"] = json!(name);
    if let Err((code, message)) = bed.api.create(Kind::Pod, pod) {
        panic!("the API server refuses the admitted pod ({code}): {message}");
    }
    bed.api.patch_status(
        Kind::Pod,
        "jobs",
        name,
        &json!({"status": {"phase": "Running", "podIP": "10.244.0.5",
                           "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
}

pub(super) fn told_port(pod: &Value) -> Option<u16> {
    pod["metadata"]["annotations"][vocabulary::ENDPOINT]
        .as_str()?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
}

/// The reservations holding a port for a pod or a Service: a quarantined
/// one (its job ended) holds it for nobody.
pub(super) fn reservation_count(bed: &Bed) -> usize {
    bed.api.count(Kind::Lease, |l| {
        l["metadata"]["labels"][vocabulary::PORT_RESERVATION] == "198.18.0.10"
            && l["metadata"]["annotations"][vocabulary::RELEASED_AT].is_null()
    })
}

#[tokio::test]
async fn the_webhook_serves_https_and_picks_up_a_certificate_swapped_on_disk() {
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let first_ca = write_pair(certs.path());
    let port = free_port();
    let metrics_port = free_port();
    let mut args = webhook_args(port, certs.path());
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{metrics_port}")]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = bed.controller("a", &argv);
    serving(port, &first_ca).await;
    let pod = job_pod();
    let (status, answer) = post(port, &first_ca, &review("u-1", &pod)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["uid"], "u-1");
    assert!(told_port(&patched(&answer, &pod)).is_some(), "{answer}");

    // cert-manager renews: new files, same paths. Clients trusting only
    // the new CA get in; the old certificate is no longer served.
    let second_ca = write_pair(certs.path());
    let start = tokio::time::Instant::now();
    while post(port, &second_ca, &review("u-2", &pod)).await.is_err() {
        assert!(
            start.elapsed() < LIMIT,
            "the new certificate is never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(post(port, &first_ca, &review("u-3", &pod)).await.is_err());
    // A half-written pair is not swapped in: once the controller has read
    // it and found it unusable, the good one is still served.
    std::fs::write(certs.path().join("tls.key"), "garbage").unwrap();
    let unusable = r#"ssh_fwd_controller_webhook_certificate_reloads_total{outcome="Unusable"}"#;
    metric_until(
        metrics_port,
        unusable,
        "the half-written pair is read",
        |n| n >= 1.0,
    )
    .await;
    assert!(post(port, &second_ca, &review("u-4", &pod)).await.is_ok());
    bed.assert_requests_listed();
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_admit_500_pods_at_once_with_500_distinct_ports_and_services_on_them() {
    let bed = Arc::new(Bed::new());
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let ports = [free_port(), free_port()];
    // The grace must outlast the burst: a reservation whose pod is not
    // there after it is free again, and its port may be handed out anew.
    let grace = Duration::from_secs(20);
    let mut replicas = Vec::new();
    for (identity, port) in ["a", "b"].into_iter().zip(ports) {
        let mut args = webhook_args(port, certs.path());
        // A debug build on a busy machine may not answer 500 at once within
        // the production 4 s; this test is about the ports handed out (the
        // reviews say the longest timeoutSeconds an API server sends, 30 s).
        args.extend(["--port-range", "9000-9999", "--webhook-deadline", "60s"].map(str::to_owned));
        // All 500 in one namespace at once, each with its port: past the
        // default caps (32 a namespace) they would be admitted without.
        args.extend(
            ["--provisional-cap", "500", "--provisional-cap-total", "500"].map(str::to_owned),
        );
        // The production Lease: a 2 s one may change hands on a loaded
        // machine, and a new leader waits the grace anew before releasing
        // (failover has tests of its own).
        args.extend(["--lease-duration", "15s"].map(str::to_owned));
        let at = args
            .iter()
            .position(|a| a == "--reservation-grace")
            .unwrap();
        args[at + 1] = "20s".into();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        replicas.push(bed.controller(identity, &argv));
        serving(port, &ca).await;
    }
    // 500 admissions at once, alternating between the replicas. All 500
    // connections are opened at once, as an API server opens new ones when
    // many pods are created together (the webhook's handshakes take turns,
    // each timed from its turn), then all 500 reviews are sent together.
    // As the API server does, each pod is stored right after its
    // admission, under a name made from its generateName; every tenth
    // never is (rejected by a later admission step, quota...).
    let pod = job_pod();
    let config = trusting(&ca).unwrap();
    let together = Arc::new(tokio::sync::Barrier::new(501));
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let (config, pod, bed) = (config.clone(), pod.clone(), Arc::clone(&bed));
            let together = together.clone();
            tokio::spawn(async move {
                let mut connection = Connection::open(ports[i % 2], "localhost", config)
                    .await
                    .unwrap();
                connection.timeout = "30s";
                together.wait().await;
                let (status, answer) = connection
                    .review(&review(&format!("u-{i}"), &pod))
                    .await
                    .unwrap();
                assert_eq!(status, 200, "{answer}");
                let admitted = patched(&answer, &pod);
                let name = (i % 10 != 9).then(|| format!("job-4711-{i:05}"));
                if let Some(name) = &name {
                    create_pod(&bed, &admitted, name);
                }
                (name, admitted)
            })
        })
        .collect();
    tokio::time::timeout(LIMIT, together.wait())
        .await
        .expect("the 500 connections are open");
    let burst = tokio::time::Instant::now();
    let mut admitted = Vec::new();
    for task in tasks {
        admitted.push(task.await.unwrap());
    }
    let took = burst.elapsed();
    let burst_end = tokio::time::Instant::now();
    println!("500 admissions over open connections answered in {took:?}");
    assert!(
        took < grace,
        "the burst took {took:?}, longer than the grace: ports of pods never created may be handed out twice"
    );
    let without = admitted
        .iter()
        .filter(|(_, p)| told_port(p).is_none())
        .count();
    assert_eq!(without, 0, "every pod was given a port");
    let told: BTreeSet<u16> = admitted.iter().filter_map(|(_, p)| told_port(p)).collect();
    assert_eq!(told.len(), 500, "500 distinct ports");
    let expected: BTreeMap<String, u16> = admitted
        .iter()
        .filter_map(|(name, pod)| Some((format!("ssh-{}", name.as_ref()?), told_port(pod)?)))
        .collect();
    assert_eq!(expected.len(), 450);
    eventually("every Service is on the port its pod was told", || {
        let services: BTreeMap<String, u16> = bed
            .our_services()
            .iter()
            .map(|s| {
                (
                    s["metadata"]["name"].as_str().unwrap().to_owned(),
                    s["spec"]["ports"][0]["port"].as_u64().unwrap() as u16,
                )
            })
            .collect();
        services == expected
    })
    .await;
    // None is released before its grace: checked while even the oldest
    // (made at the start of the burst) is within it.
    if burst.elapsed() + Duration::from_secs(1) < grace {
        assert_eq!(reservation_count(&bed), 500);
    }
    // The leader counts a reservation's grace from when it first saw it:
    // the last ones were made at the end of the burst.
    tokio::time::sleep(grace.saturating_sub(burst_end.elapsed())).await;
    eventually(
        "the 50 reservations of pods never created are released",
        || reservation_count(&bed) == 450,
    )
    .await;
    let missing = bed
        .api
        .list(Kind::Event)
        .iter()
        .filter(|e| e["reason"] == vocabulary::reason::SSH_ENV_MISSING)
        .count();
    assert_eq!(missing, 0, "every pod had its variable");
    // A pod deleted: its Service goes with it (garbage collection), then
    // its reservation.
    bed.api.delete(Kind::Pod, "jobs", "job-4711-00007");
    eventually("the deleted pod's reservation is released", || {
        reservation_count(&bed) == 449
    })
    .await;
    bed.assert_requests_listed();
    for replica in replicas {
        replica.abort();
    }
}

#[tokio::test]
async fn a_restarted_leader_keeps_live_reservations_and_releases_orphans_only_after_its_grace() {
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let port = free_port();
    let args = webhook_args(port, certs.path());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = bed.controller("a", &argv);
    serving(port, &ca).await;
    let pod = job_pod();
    let mut admitted = Vec::new();
    for i in 0..3 {
        let (_, answer) = post(port, &ca, &review(&format!("u-{i}"), &pod))
            .await
            .unwrap();
        admitted.push(patched(&answer, &pod));
    }
    // The leader dies with the pods admitted but not yet created.
    first.abort();
    let _ = first.await;
    assert_eq!(reservation_count(&bed), 3);
    let second = bed.controller("a", &argv);
    create_pod(&bed, &admitted[0], "job-a");
    create_pod(&bed, &admitted[1], "job-b");
    let started = tokio::time::Instant::now();
    for (name, pod) in [("ssh-job-a", &admitted[0]), ("ssh-job-b", &admitted[1])] {
        eventually("the created pods get Services on their told ports", || {
            bed.api
                .get(Kind::Service, "jobs", name)
                .is_some_and(|s| s["spec"]["ports"][0]["port"] == told_port(pod).unwrap())
        })
        .await;
    }
    eventually("the orphan is released", || reservation_count(&bed) == 2).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before the new leader's grace: {:?}",
        started.elapsed()
    );
    bed.assert_requests_listed();
    second.abort();
}

#[tokio::test]
async fn a_pod_being_deleted_loses_its_service_and_reservation_while_it_terminates() {
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let ca = write_pair(certs.path());
    let port = free_port();
    let args = webhook_args(port, certs.path());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = bed.controller("a", &argv);
    serving(port, &ca).await;
    let pod = job_pod();
    let (_, answer) = post(port, &ca, &review("u-1", &pod)).await.unwrap();
    let mut admitted = patched(&answer, &pod);
    let told = told_port(&admitted).unwrap();
    // Scheduled and running: a delete gives it its grace to stop.
    admitted["spec"]["nodeName"] = json!("node-1");
    create_pod(&bed, &admitted, "job-t");
    eventually("the pod gets its Service on its told port", || {
        bed.api
            .get(Kind::Service, "jobs", "ssh-job-t")
            .is_some_and(|s| s["spec"]["ports"][0]["port"] == told)
    })
    .await;
    assert_eq!(reservation_count(&bed), 1);
    bed.api.delete_pod("jobs", "job-t", Some(600));
    let terminating = bed.api.get(Kind::Pod, "jobs", "job-t").unwrap();
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());
    // Its sshd is stopping: no new sessions, so the Service goes, and the
    // port is free again, while the pod is still there.
    eventually("the terminating pod's Service is deleted", || {
        bed.api.get(Kind::Service, "jobs", "ssh-job-t").is_none()
    })
    .await;
    eventually("its reservation is released", || {
        reservation_count(&bed) == 0
    })
    .await;
    eventually("its endpoint is withdrawn", || {
        bed.endpoint("job-t").is_none()
    })
    .await;
    let still = bed
        .api
        .get(Kind::Pod, "jobs", "job-t")
        .expect("still terminating");
    assert_eq!(still["metadata"]["uid"], terminating["metadata"]["uid"]);
    // Gone for good (its containers stopped): nothing comes back.
    bed.api.delete_pod("jobs", "job-t", Some(0));
    assert!(bed.api.get(Kind::Pod, "jobs", "job-t").is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(bed.api.get(Kind::Service, "jobs", "ssh-job-t").is_none());
    assert_eq!(reservation_count(&bed), 0);
    bed.assert_requests_listed();
    controller.abort();
}
