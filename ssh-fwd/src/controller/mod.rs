//! `ssh-fwd controller`: gives each pod that asks for SSH a port and a
//! Service, and tells the user how to connect. Level-triggered: a pass
//! computes the writes from the caches (`plan`, one function of the
//! `world`), for the part of the world the watches' changes touched, and
//! for all of it at start, on a relist, on the periodic resync and after a
//! failed write, so a missed event or a restart costs nothing and a change
//! costs work in proportion to what it touched.

mod api_error;
mod apply;
mod args;
mod expect;
mod flags;
mod lease;
mod metrics;
mod plan;
mod pod;
mod ports;
mod reservation;
mod reserving;
mod retry;
mod service;
mod warn;
pub mod webhook;
mod world;

#[cfg(test)]
mod tests;

use std::{sync::Arc, time::Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api,
    runtime::{reflector::Store, watcher},
};
use rand::SeedableRng as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use crate::vocabulary;
use crate::{
    k8s,
    k8s::reflector::Changes,
    source::kubernetes::desired::{Policy, Styles},
    telemetry,
};
use apply::{Applied, Context, Warned};
pub use args::ControllerArgs;
use expect::Expectations;
use lease::Elector;
use metrics::ControllerMetrics;
use plan::scope::{Scope, Waiting};
use pod::{PodView, PodWire};
use reservation::LeaseView;
use world::{
    World,
    dirty::{DirtyLog, Stores},
};

pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let host = flags::check(&args)?;
    args.admission.check()?;
    let identity = match &args.identity {
        Some(id) => id.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .context(
                "no --identity or POD_NAME, and the host name is unreadable; pass --identity",
            )?,
    };
    let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
    k8s::selector::check(&client, &args.selector).await?;
    let metrics = ControllerMetrics::new();
    let term = Arc::new(lease::Term::default());
    let namespace = args.lease_namespace.clone();
    let changes = Changes::new();
    let dirty = Arc::new(DirtyLog::default());
    // When this process first saw each reservation, kept from one term to
    // the next: a term that starts anew does not restart their grace.
    let first_seen = Arc::new(reservation::FirstSeen::new(
        args.admission.reservation_grace,
    ));
    let watch_reservations = || {
        reserving::watch(
            &client,
            &namespace,
            args.ssh_ip,
            &changes,
            &dirty,
            &first_seen,
            &metrics,
        )
    };
    // Every replica's webhook reads the reservations (which ports to try),
    // and so knows how long each has waited when it comes to lead; without
    // a webhook only the leader needs them.
    let early = args.admission.webhook_addr.map(|_| watch_reservations());
    let _webhook = match &early {
        Some(store) => {
            let shared = webhook::Shared {
                client: client.clone(),
                namespace: namespace.clone(),
                ssh_ip: args.ssh_ip,
                host: host.clone(),
                range: args.port_range.clone(),
                store: store.clone(),
                metrics: metrics.admission.clone(),
            };
            Some(webhook::start(&args.admission, shared).await?)
        }
        None => None,
    };
    let ctx = Arc::new(Context {
        reservations: Api::namespaced(client.clone(), &namespace),
        reporter: kube::runtime::events::Reporter {
            controller: vocabulary::CONTROLLER.into(),
            instance: Some(identity.clone()),
        },
        client: client.clone(),
        ssh_ip: args.ssh_ip,
        style: args.service_style,
        policy: Policy {
            ssh_ips: [args.ssh_ip].into(),
            ports: args.port_range.clone(),
            styles: Styles::of(&args.service_styles),
            // The controller leaves nothing out: capacity is the agents'.
            capacity: usize::MAX,
        },
        host,
        user: args.ssh_user.clone(),
        range: args.port_range.clone(),
        metrics: metrics.clone(),
        term: term.clone(),
    });
    if let Some(addr) = args.metrics_addr {
        telemetry::http::serve(addr, metrics.endpoints()).await?;
    }
    let elector = Arc::new(Elector {
        api: Api::namespaced(client.clone(), &args.lease_namespace),
        name: args.lease_name.clone(),
        me: identity,
        duration: args.lease_duration,
        observed: std::sync::Mutex::default(),
        term,
    });
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    // Kept from one term to the next once made (a standby without a
    // webhook never needs them).
    let mut reservations = early;
    let mut reserving = reserving::Reserving::new(&args.admission, first_seen.clone());
    loop {
        tokio::select! {
            acquired = elector.acquire() => acquired?,
            _ = terminate.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
        }
        metrics.leader.set(1);
        let store = reservations.get_or_insert_with(watch_reservations).clone();
        let mut holding = AbortOnDrop({
            let elector = elector.clone();
            tokio::spawn(async move { elector.hold().await })
        });
        // Losing the Lease ends `lead` (its writes and its watches) but not
        // the process: this replica's webhook goes on admitting, and it
        // stands for election again.
        let result = tokio::select! {
            result = lead(&args, &ctx, client.clone(), &changes, &dirty, store, &mut reserving) => result,
            lost = &mut holding.0 => {
                let why = lost.unwrap_or_else(|e| anyhow::anyhow!("the Lease task ended: {e}"));
                tracing::error!(
                    error = %format!("{why:#}"),
                    "stopped leading: another replica may lead now; admitting as before and standing for election again"
                );
                metrics.leader.set(0);
                continue;
            }
            _ = terminate.recv() => { tracing::info!("SIGTERM received"); Ok(()) }
            _ = interrupt.recv() => { tracing::info!("SIGINT received"); Ok(()) }
        };
        metrics.leader.set(0);
        if result.is_ok() {
            elector.release().await;
        }
        return result;
    }
}

/// Writes in one pass, or changed objects it took, past which its peak of
/// memory is handed back.
const BIG_PASS: usize = 256;

/// What the leader does: watch, then reconcile on every change and timer.
/// A change is planned for around what it touched; the first pass of a
/// term, a relist, the periodic resync, a retry after a failed write and
/// a due reservation or expectation plan for everything.
async fn lead(
    args: &ControllerArgs,
    ctx: &Arc<Context>,
    client: kube::Client,
    changes: &Arc<Changes>,
    dirty: &Arc<DirtyLog>,
    reservations: Store<LeaseView>,
    reserving: &mut reserving::Reserving,
) -> anyhow::Result<()> {
    // The term's watches: they end with it (a JoinSet aborts its tasks
    // when dropped).
    let mut watches = tokio::task::JoinSet::new();
    let stores = watch_term(
        args,
        ctx,
        client,
        changes,
        dirty,
        reservations,
        &mut watches,
    )
    .await?;
    tracing::info!(ssh_ip = %ctx.ssh_ip, ports = %format!("{}-{}", ctx.range.start(), ctx.range.end()), "controller ready");
    let mut resync = interval(args.resync_interval);
    resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut expected = Expectations::default();
    let mut warned = Warned::new();
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut world = World::new(ctx.policy.clone());
    let mut waiting = Waiting::default();
    let mut everything = true;
    let mut retry = retry::Retry::default();
    loop {
        let started = Instant::now();
        let changed = dirty.take();
        let big = changed.len() >= BIG_PASS;
        let scope = if everything || changed.everything {
            // The old world goes first: both at once would double the peak.
            drop(std::mem::replace(
                &mut world,
                World::new(ctx.policy.clone()),
            ));
            world = stores.world(&ctx.policy);
            Scope::All
        } else {
            let touched = stores.refresh(&mut world, &changed);
            Scope::around(&world, touched, waiting.uids())
        };
        expected.settle(&world, started);
        forget_gone(&mut warned, &world);
        let actions = reserving.plan(&world, &scope, &expected, ctx, &mut rng, started);
        let writes = actions.len();
        let Applied {
            done,
            failures,
            blocked,
        } = apply::apply(ctx, actions, &mut warned).await;
        let now = Instant::now();
        ctx.metrics
            .pass_duration
            .observe(now.duration_since(started).as_secs_f64());
        tracing::debug!(
            everything = scope == Scope::All,
            writes,
            failures,
            blocked,
            took_ms = now.duration_since(started).as_secs_f64() * 1e3,
            "pass done"
        );
        for done in done {
            expected.record(done, now);
        }
        waiting.note(&world, &scope, &expected);
        if scope == Scope::All || big || writes >= BIG_PASS {
            // A pass over thousands of pods, or with thousands of changes
            // or writes (and the watch events behind them), is a one-off
            // peak: hand what it freed back to the kernel.
            telemetry::memory::release_freed();
        }
        retry.after(failures, blocked, scope == Scope::All, now);
        let until_due = [
            reserving.until_due(now),
            expected
                .next_due()
                .map(|due| due.saturating_duration_since(now)),
        ]
        .into_iter()
        .flatten()
        .min();
        let retry_in = retry.due_in(now);
        everything = tokio::select! {
            () = tokio::time::sleep(until_due.unwrap_or_default()), if until_due.is_some() => true,
            // No delay: events that arrive during a pass wake the next one,
            // which takes them all.
            () = changes.changed() => {
                changes.take_since();
                false
            }
            _ = resync.tick() => true,
            () = tokio::time::sleep(retry_in.unwrap_or_default()), if retry_in.is_some() => true,
        };
    }
}

/// Starts the term's watches (in `watches`, so they end with it) and waits
/// for their complete lists: labelled pods, our Services and the others the
/// agents honour, beside the reservations' watch.
async fn watch_term(
    args: &ControllerArgs,
    ctx: &Arc<Context>,
    client: kube::Client,
    changes: &Arc<Changes>,
    dirty: &Arc<DirtyLog>,
    reservations: Store<LeaseView>,
    watches: &mut tokio::task::JoinSet<()>,
) -> anyhow::Result<Stores> {
    let noted = dirty.clone();
    let (pods, task): (Store<PodView>, _) = k8s::reflector::reflector_task(
        Api::<PodWire>::all(client.clone()),
        watcher::Config::default().labels(&format!(
            "{}={}",
            vocabulary::SSH,
            vocabulary::SSH_ENABLED
        )),
        PodView::from,
        "Pod",
        changes,
        &ctx.metrics.api_errors,
        move |event| noted.pod(event),
    );
    watches.spawn(task);
    // Services: ours, and the others the agents honour (they may hold a
    // port on the SSH IP). Nothing else in the cluster is read. With the
    // agents' default selector, which ours carry, one watch holds both, so
    // a rival older than one of ours is always seen before ours is: two
    // watches have no order between them, and a pass could announce a port
    // whose older holder the other watch has not delivered yet.
    let one_watch = args.selector.trim() == vocabulary::DEFAULT_SELECTOR;
    let managed = format!(
        "{}={}",
        vocabulary::MANAGED_BY_LABEL,
        vocabulary::CONTROLLER
    );
    let noted = dirty.clone();
    let (ours, task): (Store<Service>, _) = k8s::reflector::reflector_task(
        Api::all(client.clone()),
        watcher::Config::default().labels(if one_watch {
            vocabulary::DEFAULT_SELECTOR
        } else {
            &managed
        }),
        keep_service,
        "Service",
        changes,
        &ctx.metrics.api_errors,
        move |event| noted.service(event),
    );
    watches.spawn(task);
    let others = if one_watch {
        None
    } else {
        let noted = dirty.clone();
        let (others, task): (Store<Service>, _) = k8s::reflector::reflector_task(
            Api::all(client),
            watcher::Config::default().labels(&others_selector(&args.selector)),
            keep_service,
            "Service",
            changes,
            &ctx.metrics.api_errors,
            move |event| noted.service(event),
        );
        watches.spawn(task);
        Some(others)
    };
    tracing::info!("waiting for complete lists of labelled pods and of Services");
    pods.wait_until_ready().await?;
    ours.wait_until_ready().await?;
    if let Some(others) = &others {
        others.wait_until_ready().await?;
    }
    reservations.wait_until_ready().await?;
    Ok(Stores {
        pods,
        ours,
        others,
        leases: reservations,
        lease_namespace: args.lease_namespace.clone(),
    })
}

/// Warnings of pods no longer labelled (or gone) need not be remembered.
fn forget_gone(warned: &mut Warned, world: &World) {
    warned.retain(|(uid, _)| world.pod(uid).is_some());
}

/// The Services the agents honour that are not ours: `selector` (the
/// agents' `--selector`) and not managed by this controller.
fn others_selector(selector: &str) -> String {
    let not_ours = format!(
        "{}!={}",
        vocabulary::MANAGED_BY_LABEL,
        vocabulary::CONTROLLER
    );
    match selector.trim() {
        "" => not_ours,
        selector => format!("{selector},{not_ours}"),
    }
}

/// Keeps what the plan reads of a Service: identity, labels, owner, ports,
/// shape and load-balancer status, and every field the agents' rule
/// ([`crate::source::kubernetes::desired`]) weighs, or a Service they route
/// would look like one they ignore and its port be handed out twice.
pub(crate) fn prune_service(svc: &mut Service) {
    k8s::reflector::drop_managed_fields(svc);
    svc.metadata.annotations = None;
    if let Some(spec) = svc.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::ServiceSpec {
            type_: spec.type_.take(),
            ports: spec.ports.take(),
            external_ips: spec.external_ips.take(),
            load_balancer_class: spec.load_balancer_class.take(),
            allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports.take(),
            ..Default::default()
        };
    }
}

/// [`prune_service`] as the reflector takes it.
fn keep_service(mut svc: Service) -> Service {
    prune_service(&mut svc);
    svc
}

/// Renewal must stop when leading stops, also when `run` is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
