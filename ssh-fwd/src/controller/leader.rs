//! What the elected replica does: watch, then reconcile on every change
//! and timer, until its term ends. Every replica, leading or not, serves
//! the webhook beside this ([`super::webhook`]).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use k8s_openapi::{
    api::core::v1::{ConfigMap, Service},
    jiff::Timestamp,
};
use kube::{
    Api,
    runtime::{reflector::Store, watcher},
};
use rand::SeedableRng as _;
use tokio::time::{MissedTickBehavior, interval};

use super::{
    ControllerArgs,
    activity::{self, Mirror, Mirroring},
    apply::{self, Applied, Context, Warned},
    expect::Expectations,
    plan::upkeep::Upkeep,
    plan::{
        self, Pass,
        scope::{Scope, Waiting},
    },
    pod::{PodView, PodWire},
    ports::Quarantine,
    reservation::LeaseView,
    retry,
    served::{Gate, PublishWhen, watch::Reports},
    world::{
        World,
        dirty::{DirtyLog, Stores},
    },
};
use crate::{
    k8s::{self, reflector::Changes},
    source::kubernetes::desired::Policy,
    telemetry, vocabulary,
};

/// What a term of leadership works with: made by `run` when the Lease is
/// won, and held by the term's watches and passes until it ends.
pub struct Leadership<'a> {
    pub args: &'a ControllerArgs,
    pub ctx: Arc<Context>,
    pub client: kube::Client,
    /// Wakes a pass when a watch delivers a change.
    pub changes: Arc<Changes>,
    /// What the watches changed since the last pass.
    pub dirty: Arc<DirtyLog>,
    /// The reservations' cache, kept from one term to the next.
    pub reservations: Store<LeaseView>,
}

/// How often the pods whose endpoint waits are planned for again without
/// a change: what they wait on also passes with time.
const AWAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes in one pass, or changed objects it took, past which its peak of
/// memory is handed back.
const BIG_PASS: usize = 256;

impl Leadership<'_> {
    /// The term: watch, then reconcile on every change and timer. A change is
    /// planned for around what it touched; the first pass of a term, a
    /// relist, the periodic resync, a retry after a failed write and a due
    /// reservation or expectation plan for everything. `upkeep` is kept from
    /// one term to the next.
    pub async fn lead(&self, upkeep: &mut Upkeep) -> anyhow::Result<()> {
        let Self {
            args,
            ctx,
            changes,
            dirty,
            ..
        } = self;
        // The term's watches: they end with it (a JoinSet aborts its tasks
        // when dropped).
        let mut watches = tokio::task::JoinSet::new();
        let stores = self.watch_term(&mut watches).await?;
        let mut mirror = self.watch_activity(&mut watches);
        let mut reports = (args.publish_when == PublishWhen::Served).then(|| {
            Reports::watch(
                self.client.clone(),
                &args.lease_namespace,
                changes,
                &ctx.metrics.api_errors,
                &mut watches,
            )
        });
        // Pods whose endpoint waits to be told (not Ready, or not yet
        // served): every pass plans for them again.
        let mut awaiting = std::collections::BTreeSet::new();
        tracing::info!(ssh_ip = %ctx.ssh_ips.published(), ports = %format!("{}-{}", ctx.range.start(), ctx.range.end()), "controller ready");
        let mut resync = interval(args.resync_interval);
        resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut expected = Expectations::default();
        let mut warned = Warned::new();
        let mut rng = rand::rngs::StdRng::from_os_rng();
        let mut world = World::new(ctx.policy.clone(), ctx.ssh_ips.published());
        let mut waiting = Waiting::default();
        let mut everything = true;
        let mut retry = retry::Retry::default();
        // The endpoint variable, when the webhook sets it: a pod that gets its
        // port only after admission is told it lacks it.
        let variable = (args.admission.webhook_addr).map(|_| args.admission.env_name.clone());
        loop {
            let started = Instant::now();
            let changed = dirty.take();
            let big = changed.len() >= BIG_PASS;
            let scope = if everything || changed.everything {
                rebuild(&mut world, &stores, &ctx.policy);
                Scope::All
            } else {
                let touched = stores.refresh(&mut world, &changed);
                let mut again = waiting.uids().clone();
                again.extend(awaiting.iter().cloned());
                Scope::around(&world, touched, &again)
            };
            expected.settle(&world, started);
            forget_gone(&mut warned, &world);
            upkeep.note(&world, &scope, &expected, started);
            let pass = Pass {
                world: &world,
                scope: &scope,
                expected: &expected,
                variable: variable.as_deref(),
                gate: Gate {
                    when: args.publish_when,
                    wait: args.publish_wait,
                    served: reports
                        .as_mut()
                        .map_or(&super::served::NONE, Reports::refresh),
                    now: std::time::SystemTime::now(),
                },
                quarantine: Quarantine {
                    after: args.port_reuse_after,
                    now: Timestamp::now(),
                },
            };
            let mut actions =
                plan::compute(&pass, &ctx.settings(), &ctx.range, &ctx.host, &mut rng);
            awaiting = actions
                .iter()
                .filter_map(plan::Action::awaiting)
                .map(str::to_owned)
                .collect();
            actions.retain(|a| !matches!(a, plan::Action::Await { .. }));
            ctx.metrics
                .pods_awaiting
                .set(i64::try_from(awaiting.len()).unwrap_or(i64::MAX));
            let wall = pass.quarantine.now;
            actions.extend(upkeep.actions(&world, &scope, &expected, &ctx.range, (started, wall)));
            let writes = actions.len();
            let Applied {
                done,
                failures,
                blocked,
            } = apply::apply(ctx, actions, &mut warned).await;
            if let Some(mirror) = &mut mirror {
                mirror.pass(&world, &ctx.client, scope == Scope::All).await;
            }
            let now = Instant::now();
            ctx.metrics
                .pass_duration
                .observe(now.duration_since(started).as_secs_f64());
            ctx.metrics
                .ports_used
                .set(i64::try_from(world.ports_used(&ctx.range)).unwrap_or(i64::MAX));
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
                upkeep.until_due(now),
                expected
                    .next_due()
                    .map(|due| due.saturating_duration_since(now)),
                mirror.as_ref().and_then(|m| m.until_due(now)),
            ]
            .into_iter()
            .flatten()
            .min();
            // A pod waits on time too (the reports' age, --publish-wait).
            let again_in = (!awaiting.is_empty()).then_some(AWAIT_POLL);
            everything =
                next_wake(changes, &mut resync, until_due, retry.due_in(now), again_in).await;
        }
    }

    /// Starts the term's watches (in `watches`, so they end with it) and waits
    /// for their complete lists: labelled pods, our Services and the others the
    /// agents honour, beside the reservations' watch.
    async fn watch_term(&self, watches: &mut tokio::task::JoinSet<()>) -> anyhow::Result<Stores> {
        let Self {
            args,
            ctx,
            client,
            changes,
            dirty,
            reservations,
        } = self;
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
        let ours = self.watch_services(
            if one_watch {
                vocabulary::DEFAULT_SELECTOR
            } else {
                &managed
            },
            watches,
        );
        let others =
            (!one_watch).then(|| self.watch_services(&others_selector(&args.selector), watches));
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
            leases: reservations.clone(),
            lease_namespace: args.lease_namespace.clone(),
        })
    }

    /// With `--activity-interval` above 0, a watch of the agents' activity
    /// ConfigMaps in the controller's namespace (in `watches`, so it ends
    /// with the term), and the mirror that reads it. Nothing waits for its
    /// list: activity only adds annotations.
    fn watch_activity(&self, watches: &mut tokio::task::JoinSet<()>) -> Option<Mirroring> {
        if self.args.activity_interval.is_zero() {
            return None;
        }
        let changed = Arc::new(AtomicBool::new(true));
        let noted = changed.clone();
        let (store, task) = k8s::reflector::reflector_task(
            Api::<ConfigMap>::namespaced(self.client.clone(), &self.args.lease_namespace),
            watcher::Config::default().labels(&format!(
                "{}={}",
                vocabulary::ACTIVITY,
                vocabulary::ACTIVITY_FROM
            )),
            activity::keep_config_map,
            "ConfigMap",
            &self.changes,
            &self.ctx.metrics.api_errors,
            move |_| noted.store(true, Ordering::Relaxed),
        );
        watches.spawn(task);
        Some(Mirroring {
            store,
            changed,
            mirror: Mirror::new(self.args.activity_interval),
        })
    }

    /// A watch of the Services `selector` picks, in `watches` (so it ends
    /// with the term), its events noted for the next pass.
    fn watch_services(
        &self,
        selector: &str,
        watches: &mut tokio::task::JoinSet<()>,
    ) -> Store<Service> {
        let noted = self.dirty.clone();
        let (store, task) = k8s::reflector::reflector_task(
            Api::all(self.client.clone()),
            watcher::Config::default().labels(selector),
            keep_service,
            "Service",
            &self.changes,
            &self.ctx.metrics.api_errors,
            move |event| noted.service(event),
        );
        watches.spawn(task);
        store
    }
}

/// The world built whole from the watches' stores. The old world goes
/// first: both at once would double the peak of memory.
fn rebuild(world: &mut World, stores: &Stores, policy: &Policy) {
    let ip = world.ip();
    drop(std::mem::replace(world, World::new(policy.clone(), ip)));
    *world = stores.world(policy, ip);
}

/// Waits for what wakes the next pass: `true` when it is to plan for
/// everything (a reservation's grace or a remembered write running out
/// after `due`, the periodic resync, a retry after `retry_in`), `false`
/// for changes, which it plans around, and after `again_in` (the pods
/// waiting to be told, which every pass plans for). Changes wake it at
/// once: events that arrive during a pass wake the next one, which takes
/// them all.
async fn next_wake(
    changes: &Changes,
    resync: &mut tokio::time::Interval,
    due: Option<std::time::Duration>,
    retry_in: Option<std::time::Duration>,
    again_in: Option<std::time::Duration>,
) -> bool {
    tokio::select! {
        () = tokio::time::sleep(again_in.unwrap_or_default()), if again_in.is_some() => false,
        () = tokio::time::sleep(due.unwrap_or_default()), if due.is_some() => true,
        () = changes.changed() => {
            changes.take_since();
            false
        }
        _ = resync.tick() => true,
        () = tokio::time::sleep(retry_in.unwrap_or_default()), if retry_in.is_some() => true,
    }
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
/// selector, shape and status (the grant), and every field the agents' rule
/// ([`crate::source::kubernetes::desired`]) weighs, or a Service they route
/// would look like one they ignore and its port be handed out twice.
pub(crate) fn prune_service(svc: &mut Service) {
    k8s::reflector::drop_managed_fields(svc);
    svc.metadata.annotations = None;
    if let Some(spec) = svc.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::ServiceSpec {
            type_: spec.type_.take(),
            ports: spec.ports.take(),
            // Compared with what the controller made (`service::drift`).
            selector: spec.selector.take(),
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
