//! `ssh-fwd controller`: gives each pod that asks for SSH a port and a
//! Service, and tells the user how to connect. Level-triggered: every pass
//! recomputes the writes from the full caches of labelled pods and all
//! Services (`plan`), so a missed event or a restart costs nothing.

mod api_error;
mod apply;
mod expect;
mod flags;
mod lease;
mod plan;
mod ports;
mod service;
mod warn;

#[cfg(test)]
mod tests;

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{
    Api,
    runtime::{events::Recorder, reflector::Store, watcher},
};
use rand::SeedableRng as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::Notify,
    time::{MissedTickBehavior, interval},
};

use crate::{cli::ControllerArgs, http_probe, k8s};
use apply::{Applied, Context, Warned};
use expect::Expectations;
use lease::Elector;
use service::Settings;

/// Retry delay after a pass with failed writes.
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let host = flags::check(&args)?;
    let identity = match &args.identity {
        Some(id) => id.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .context(
                "no --identity or POD_NAME, and the host name is unreadable; pass --identity",
            )?,
    };
    let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
    let leader = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "ssh-fwd-controller".into(),
                instance: Some(identity.clone()),
            },
        ),
        client: client.clone(),
        ssh_ip: args.ssh_ip,
        host,
        user: args.ssh_user.clone(),
        range: args.port_range.clone(),
        api_errors: Arc::new(AtomicU64::new(0)),
        services_created: AtomicU64::new(0),
        services_deleted: AtomicU64::new(0),
    });
    if let Some(addr) = args.metrics_addr {
        serve_metrics(addr, ctx.clone(), leader.clone()).await?;
    }
    let elector = Arc::new(Elector {
        api: Api::namespaced(client.clone(), &args.lease_namespace),
        name: args.lease_name.clone(),
        me: identity,
        duration: args.lease_duration,
        observed: Mutex::default(),
    });
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        acquired = elector.acquire() => acquired?,
        _ = terminate.recv() => return Ok(()),
        _ = interrupt.recv() => return Ok(()),
    }
    leader.store(true, Ordering::Relaxed);
    let mut holding = AbortOnDrop({
        let elector = elector.clone();
        tokio::spawn(async move { elector.hold().await })
    });
    let result = tokio::select! {
        result = lead(&args, &ctx, client) => result,
        lost = &mut holding.0 => Err(lost.unwrap_or_else(|e| anyhow::anyhow!("the Lease task ended: {e}")))
            .context("stopping: another replica may lead now; a restart rejoins the election"),
        _ = terminate.recv() => { tracing::info!("SIGTERM received"); Ok(()) }
        _ = interrupt.recv() => { tracing::info!("SIGINT received"); Ok(()) }
    };
    leader.store(false, Ordering::Relaxed);
    if result.is_ok() {
        elector.release().await;
    }
    result
}

/// What the leader does: watch, then reconcile on every change and timer.
async fn lead(args: &ControllerArgs, ctx: &Context, client: kube::Client) -> anyhow::Result<()> {
    let changed = Arc::new(Notify::new());
    let pods: Store<Pod> = k8s::source::spawn_reflector(
        Api::all(client.clone()),
        watcher::Config::default().labels(&format!(
            "{}={}",
            service::SSH_LABEL,
            service::SSH_ENABLED
        )),
        prune_pod,
        "Pod",
        &changed,
        &ctx.api_errors,
    );
    let services: Store<Service> = k8s::source::spawn_reflector(
        Api::all(client),
        watcher::Config::default(),
        k8s::source::drop_managed_fields,
        "Service",
        &changed,
        &ctx.api_errors,
    );
    tracing::info!("waiting for complete lists of labelled pods and of Services");
    pods.wait_until_ready().await?;
    services.wait_until_ready().await?;
    tracing::info!(ssh_ip = %ctx.ssh_ip, ports = %format!("{}-{}", ctx.range.start(), ctx.range.end()), "controller ready");
    let settings = Settings {
        ssh_ip: args.ssh_ip,
        style: args.service_style,
    };
    let mut resync = interval(args.resync_interval);
    resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut expected = Expectations::default();
    let mut warned = Warned::new();
    let mut rng = rand::rngs::StdRng::from_os_rng();
    loop {
        let (pods, services) = (pods.state(), services.state());
        expected.settle(&pods, &services, Instant::now());
        forget_gone(&mut warned, &pods);
        let input = plan::Input {
            pods: &pods,
            services: &services,
            expected: &expected,
        };
        let actions = plan::compute(&input, &settings, &ctx.range, &ctx.host, &mut rng);
        let Applied { done, failures } = apply::apply(ctx, actions, &mut warned).await;
        let now = Instant::now();
        for done in done {
            expected.record(done, now);
        }
        tokio::select! {
            _ = changed.notified() => {
                // Coalesce a burst of events into one pass.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ = resync.tick() => {}
            _ = tokio::time::sleep(RETRY_AFTER), if failures > 0 => {}
        }
    }
}

/// Warnings of pods no longer labelled (or gone) need not be remembered.
fn forget_gone(warned: &mut Warned, pods: &[Arc<Pod>]) {
    if warned.is_empty() {
        return;
    }
    let uids: BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    warned.retain(|(uid, _)| uids.contains(uid.as_str()));
}

/// Keeps what the plan reads of a pod: its metadata and phase. A pod's spec
/// and status are most of its size, and there may be thousands of pods.
fn prune_pod(pod: &mut Pod) {
    k8s::source::drop_managed_fields(pod);
    pod.spec = None;
    let phase = pod.status.take().and_then(|s| s.phase);
    pod.status = phase.map(|phase| k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase),
        ..Default::default()
    });
}

/// Renewal must stop when leading stops, also when `run` is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve_metrics(
    addr: std::net::SocketAddr,
    ctx: Arc<Context>,
    leader: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    http_probe::serve(
        addr,
        Arc::new(move |path: &str| match path {
            // A standby is ready too: a rolling update must be able to
            // start the new replica while the old one still leads.
            "/healthz" | "/readyz" => ("200 OK", "ok\n".to_owned()),
            "/metrics" => {
                let line = |name: &str, kind: &str, help: &str, value: u64| {
                    format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n")
                };
                let body = [
                    line(
                        "ssh_fwd_controller_leader",
                        "gauge",
                        "1 while this replica leads.",
                        u64::from(leader.load(Ordering::Relaxed)),
                    ),
                    line(
                        "ssh_fwd_controller_services_created_total",
                        "counter",
                        "SSH Services created.",
                        ctx.services_created.load(Ordering::Relaxed),
                    ),
                    line(
                        "ssh_fwd_controller_services_deleted_total",
                        "counter",
                        "SSH Services deleted.",
                        ctx.services_deleted.load(Ordering::Relaxed),
                    ),
                    line(
                        "ssh_fwd_controller_api_errors_total",
                        "counter",
                        "Failed API writes and watches (each retried).",
                        ctx.api_errors.load(Ordering::Relaxed),
                    ),
                ]
                .concat();
                ("200 OK", body)
            }
            _ => (
                "404 Not Found",
                "try /metrics, /healthz or /readyz\n".to_owned(),
            ),
        }),
    )
    .await
}
