//! The mutating admission webhook every controller replica serves (only the
//! leader reconciles; every replica admits): a labelled pod being created
//! gets a port reserved for it (`controller::reservation`, the API server
//! arbitrating), the endpoint annotation, the endpoint variable in every
//! container, and its authorized keys (`keys`). Over HTTPS (`tls`), with
//! the certificate from files or self-made (`self_signed`).

mod admit;
mod args;
mod budget;
pub mod keys;
mod metrics;
pub mod mutate;
mod patch;
mod review;
pub mod self_signed;
mod tls;

use std::{net::SocketAddr, ops::RangeInclusive, sync::Arc};

use anyhow::Context as _;
use axum::{
    Extension, Router,
    body::Bytes,
    extract::{RawQuery, State},
    http::{StatusCode, header},
    response::IntoResponse,
    routing::post,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, runtime::reflector::Store};

use crate::controller::reservation::LeaseView;

pub use admit::Admitter;
pub use args::{AdmissionArgs, AdmissionFlagError};
pub use metrics::AdmissionMetrics;

/// What the webhook shares with the rest of the controller.
pub struct Shared {
    pub client: kube::Client,
    /// The controller's own namespace: reservations, the TLS Secret.
    pub namespace: String,
    pub ssh_ip: std::net::IpAddr,
    pub host: String,
    pub range: RangeInclusive<u16>,
    /// `--port-reuse-after`.
    pub reuse_after: std::time::Duration,
    pub store: Store<LeaseView>,
    pub metrics: AdmissionMetrics,
}

/// Background tasks that end with the controller (aborted when dropped).
pub struct Running(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Loads the certificate, binds `--webhook-addr` (failing at once if it
/// cannot), and serves in the background.
pub async fn start(args: &AdmissionArgs, shared: Shared) -> anyhow::Result<Running> {
    let addr: SocketAddr = args.webhook_addr.context("start needs --webhook-addr")?;
    let image = match &args.image {
        Some(image) => image.clone(),
        None => own_image(&shared.client, &shared.namespace).await?,
    };
    let (certs, follow) = certificates(args, &shared).await?;
    let clients = match &args.webhook_client_ca {
        Some(path) => Some(tls::client_verifier(path).with_context(|| {
            format!(
                "--webhook-client-ca {}: the webhook cannot check its clients; give a PEM file of the CA that signed the API server's client certificate",
                path.display()
            )
        })?),
        None => None,
    };
    let clients_shown = match &args.webhook_client_ca {
        Some(path) => format!(
            "only clients with a certificate signed by {}",
            path.display()
        ),
        None => "any client (no --webhook-client-ca)".to_owned(),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --webhook-addr {addr}; is the port in use?"))?;
    let injection = mutate::Injection {
        variable: args.env_name.clone(),
        host: shared.host.clone(),
        keys: keys::Keys {
            image,
            dir: args.keys_dir.clone(),
            file: args.keys_file.clone(),
            uid: args.keys_uid.map(i64::from),
            default_secret: args.default_keys_secret.clone(),
            interval: args.keys_watch_interval,
        },
        host_certs: (args.host_certs).then(|| args.sshd_config_env_name.clone()),
    };
    let total = budget::total_for(args.provisional_cap_total as usize, &shared.range);
    if total < args.provisional_cap_total as usize {
        tracing::info!(
            asked = args.provisional_cap_total,
            total,
            "--provisional-cap-total is held to half of --port-range"
        );
    }
    let admitter = Arc::new(Admitter {
        injection,
        reservations: Api::namespaced(shared.client.clone(), &shared.namespace),
        store: shared.store,
        ssh_ip: shared.ssh_ip,
        range: shared.range,
        reuse_after: shared.reuse_after,
        deadline: args.webhook_deadline,
        budget: budget::Budget::new(args.provisional_cap as usize, total, args.reservation_grace),
        metrics: shared.metrics,
    });
    tracing::info!(%addr, variable = %args.env_name, clients = %clients_shown, "serving the admission webhook (HTTPS, POST /mutate)");
    let handshakes = tls::Handshakes::new(admitter.metrics.handshake_timeouts.clone());
    let server = tokio::spawn(tls::serve(
        listener,
        tls::server_config(certs, clients),
        router(admitter),
        handshakes,
    ));
    Ok(Running(vec![server, follow]))
}

/// The routes, for [`start`] and for tests.
pub fn router(admitter: Arc<Admitter>) -> Router {
    Router::new()
        .route("/mutate", post(mutate_handler))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "the ssh-fwd webhook answers POST /mutate\n",
            )
        })
        .with_state(admitter)
}

/// One review, its deadline counted from when it arrived ([`tls::Arrived`])
/// and bounded by the API server's `?timeout=`.
async fn mutate_handler(
    State(admitter): State<Arc<Admitter>>,
    arrived: Option<Extension<tls::Arrived>>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> impl IntoResponse {
    let started = arrived.map_or_else(std::time::Instant::now, |Extension(at)| at.0);
    let budget = admitter.budget(review::timeout_param(query.as_deref()));
    let (code, answer) = admitter.review_within(&body, started, budget).await;
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
}

/// The pair to serve first, and the task that keeps it current.
async fn certificates(
    args: &AdmissionArgs,
    shared: &Shared,
) -> anyhow::Result<(Arc<tls::Swappable>, tokio::task::JoinHandle<()>)> {
    let interval = args.webhook_reload_interval;
    if let Some(dir) = &args.webhook_cert_dir {
        let files = tls::CertDir { dir: dir.clone() };
        let key = files.load().with_context(|| {
            format!(
                "--webhook-cert-dir {}: the webhook cannot serve TLS",
                dir.display()
            )
        })?;
        let certs = tls::Swappable::new(key);
        let reloads = shared.metrics.certificate_reloads.clone();
        let follow = tokio::spawn(files.follow(certs.clone(), interval, reloads));
        return Ok((certs, follow));
    }
    let service = &args.webhook_service;
    let namespace = &shared.namespace;
    let own = self_signed::SelfSigned {
        secrets: Api::namespaced(shared.client.clone(), namespace),
        configurations: Api::all(shared.client.clone()),
        secret: args.webhook_secret.clone(),
        configuration: args.webhook_configuration.clone(),
        dns_names: vec![
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
            format!("{service}.{namespace}"),
            service.clone(),
        ],
        injected_by_cert_manager: std::sync::atomic::AtomicBool::new(false),
    };
    let pem = own.ensure().await.context("--webhook-self-signed")?;
    own.inject_ca(&pem.ca)
        .await
        .context("--webhook-self-signed")?;
    let key = tls::certified_key(
        pem.cert.as_bytes(),
        pem.key.as_bytes(),
        &args.webhook_secret,
    )?;
    let certs = tls::Swappable::new(key);
    let follow = tokio::spawn(own.follow(certs.clone(), pem, interval));
    Ok((certs, follow))
}

/// The image this controller runs, from its own pod (POD_NAME in its
/// namespace): the container named `controller`, else the only one.
async fn own_image(client: &kube::Client, namespace: &str) -> anyhow::Result<String> {
    let fix = "pass --image IMAGE for the install-keys containers";
    let name = std::env::var("POD_NAME").with_context(|| {
        format!("POD_NAME is not set, so the controller cannot read its own image; {fix}")
    })?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods.get(&name).await.with_context(|| {
        format!("reading this controller's pod {namespace}/{name} for its image; {fix}")
    })?;
    let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
    let chosen = match containers.iter().find(|c| c.name == "controller") {
        Some(c) => Some(c),
        None if containers.len() == 1 => containers.first(),
        None => None,
    };
    chosen
        .and_then(|c| c.image.clone())
        .with_context(|| format!("pod {namespace}/{name} has no container named controller; {fix}"))
}
