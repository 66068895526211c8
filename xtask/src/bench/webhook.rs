//! `cargo xtask bench webhook`: how long the admission webhook of the
//! release controller takes to answer, over HTTPS on loopback as the API
//! server calls it, reserving each port in the in-process fake API: one at
//! a time (p50/p99), many at once, and with an API server that answers
//! reservations only after 6 s (the webhook must answer, without a port,
//! within its 4 s deadline). No packets leave this host.

use std::{
    collections::BTreeSet,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use ssh_fwd_tests::fake_api::{FakeApi, Kind};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const HOST: &str = "ssh-fwd-webhook.ssh-fwd.svc";

/// How many admissions of each kind.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Admissions one after another, each on a new TLS connection.
    #[arg(long, default_value_t = 300)]
    pub sequential: usize,
    /// Admissions at once.
    #[arg(long, default_value_t = 500)]
    pub concurrent: usize,
    /// Admissions while the API server answers reservations late.
    #[arg(long, default_value_t = 10)]
    pub slow: usize,
}

pub fn run(options: Options) -> anyhow::Result<()> {
    let Options {
        sequential,
        concurrent,
        slow,
    } = options;
    let bin = crate::build_ssh_fwd_profile(true)?;
    let api = FakeApi::start_on_loopback()?;
    api.without_endpoint_slices();
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut controller = spawn(&bin, &kubeconfig, port, &dir.path().join("controller.log"))?;
    let result = measure(&api, port, sequential, concurrent, slow);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(controller.id() as i32, libc::SIGTERM) };
    let _ = controller.wait();
    result
}

fn measure(
    api: &FakeApi,
    port: u16,
    sequential: usize,
    concurrent: usize,
    slow: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    println!("==> waiting for the controller's self-signed certificate");
    let ca = wait_for_ca(api)?;
    let client = Client::new(port, &ca)?;
    runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while client.admit("warm-up").await.is_err() {
            ensure!(Instant::now() < deadline, "the webhook never answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(())
    })?;
    println!("==> {sequential} admissions one at a time");
    let mut one = Vec::with_capacity(sequential);
    for i in 0..sequential {
        let started = Instant::now();
        let port = runtime
            .block_on(client.admit(&format!("seq-{i}")))?
            .context("no port")?;
        one.push((started.elapsed(), port));
    }
    println!("==> {concurrent} admissions at once");
    let started = Instant::now();
    let client = Arc::new(client);
    let many: Vec<Option<u16>> = runtime.block_on(async {
        let tasks: Vec<_> = (0..concurrent)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move { client.admit(&format!("par-{i}")).await })
            })
            .collect();
        let mut ports = Vec::new();
        for task in tasks {
            ports.push(task.await??);
        }
        anyhow::Ok(ports)
    })?;
    let all_at_once = started.elapsed();
    let ports: BTreeSet<u16> = one
        .iter()
        .map(|(_, p)| *p)
        .chain(many.iter().flatten().copied())
        .collect();
    ensure!(
        ports.len() == sequential + concurrent,
        "{} distinct ports for {} admissions",
        ports.len(),
        sequential + concurrent
    );
    println!("==> {slow} admissions with reservations answered after 6 s");
    api.delay(Kind::Lease, "create", Duration::from_secs(6));
    let mut slowed = Vec::with_capacity(slow);
    for i in 0..slow {
        let started = Instant::now();
        let port = runtime.block_on(client.admit(&format!("slow-{i}")))?;
        ensure!(
            port.is_none(),
            "a port was reserved although the API answered too late"
        );
        slowed.push(started.elapsed());
    }
    api.delay(Kind::Lease, "create", Duration::ZERO);
    let mut quick: Vec<Duration> = one.iter().map(|(d, _)| *d).collect();
    report(&mut quick, all_at_once, concurrent, &mut slowed);
    Ok(())
}

fn report(
    quick: &mut [Duration],
    all_at_once: Duration,
    concurrent: usize,
    slowed: &mut [Duration],
) {
    let pct = |v: &mut [Duration], p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
    };
    println!();
    println!("| figure | value |");
    println!("| --- | --- |");
    println!(
        "| one admission (new TLS connection, port reserved), p50 / p99 ({} in a row) | {:.1} ms / {:.1} ms |",
        quick.len(),
        pct(quick, 0.5),
        pct(quick, 0.99)
    );
    println!(
        "| {concurrent} admissions at once, all answered | {:.2} s |",
        all_at_once.as_secs_f64()
    );
    println!(
        "| API server answering reservations after 6 s: answer without a port, p50 / p99 ({}) | {:.0} ms / {:.0} ms |",
        slowed.len(),
        pct(slowed, 0.5),
        pct(slowed, 0.99)
    );
}

/// The CA the controller put into its Secret.
fn wait_for_ca(api: &FakeApi) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(secret) = api.get(Kind::Secret, "ssh-fwd", "ssh-fwd-webhook-tls")
            && let Some(ca) = secret["data"]["ca.crt"].as_str()
        {
            let pem = base64_decode(ca)?;
            return Ok(String::from_utf8(pem)?);
        }
        if Instant::now() > deadline {
            bail!("the controller made no certificate Secret within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::STANDARD.decode(text)?)
}

/// An HTTPS client trusting only the webhook's CA, as the API server is.
struct Client {
    port: u16,
    connector: tokio_rustls::TlsConnector,
}

impl Client {
    fn new(port: u16, ca: &str) -> anyhow::Result<Self> {
        use rustls::pki_types::{CertificateDer, pem::PemObject as _};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Self {
            port,
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// One admission of a labelled pod made from generateName; the port
    /// it was given, if any.
    async fn admit(&self, uid: &str) -> anyhow::Result<Option<u16>> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        // As the API server's (Go) client: no Nagle, one write per request.
        tcp.set_nodelay(true)?;
        let mut tls = self
            .connector
            .connect(rustls::pki_types::ServerName::try_from(HOST)?, tcp)
            .await?;
        let body = review(uid).to_string();
        let head = format!(
            "POST /mutate?timeout=5s HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(format!("{head}{body}").as_bytes()).await?;
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response);
        let answer: Value =
            serde_json::from_str(text.split_once("\r\n\r\n").map_or("", |(_, b)| b))
                .context("no JSON answer")?;
        ensure!(
            answer["response"]["allowed"] == true,
            "not allowed: {answer}"
        );
        let patch = base64_decode(answer["response"]["patch"].as_str().context("no patch")?)?;
        let ops: Value = serde_json::from_slice(&patch)?;
        let endpoint = ops.as_array().into_iter().flatten().find_map(|op| {
            let path = op["path"].as_str()?;
            if path == "/metadata/annotations" {
                op["value"]["ssh-fwd.io/endpoint"]
                    .as_str()
                    .map(str::to_owned)
            } else {
                path.ends_with("ssh-fwd.io~1endpoint")
                    .then(|| op["value"].as_str().map(str::to_owned))
                    .flatten()
            }
        });
        Ok(endpoint.and_then(|e| e.rsplit_once(':')?.1.parse().ok()))
    }
}

fn review(uid: &str) -> Value {
    json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
           "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                       "resource": {"group": "", "version": "v1", "resource": "pods"},
                       "name": "", "namespace": "jobs", "operation": "CREATE",
                       "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
                       "object": {"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"generateName": "job-", "namespace": "jobs",
                                               "labels": {"ssh-fwd.io/ssh": "enabled"}},
                                  "spec": {"containers": [{"name": "job", "image": "hpc"}]}},
                       "dryRun": false}})
}

fn spawn(
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    port: u16,
    log: &std::path::Path,
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new(bin)
        .args([
            "controller",
            "--ssh-ip",
            "198.18.0.10",
            "--identity",
            "bench",
            "--lease-namespace",
            "ssh-fwd",
        ])
        .args([
            "--port-range",
            "8000-16000",
            "--log-format",
            "json",
            "--log",
            "warn",
        ])
        .args([
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-self-signed",
            "--image",
            "ssh-fwd:bench",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ssh-fwd controller")
}
