//! One reconcile: plan the desired set against what the maps hold, apply,
//! and record what happened (metrics, logs, the pinned status).

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    time::{Duration, Instant, SystemTime},
};

use ssh_fwd_common::{
    maps::{AgentStatus, put_text},
    outcome::Outcome,
};

use super::{audit::ClosedSender, metrics::AgentMetrics, served, source::Change, sweep};
use crate::{
    datapath::{
        Datapath,
        maps::Applied,
        plan::{self, Installed, Local, Plan},
        status::{StatusMap, unix_ms},
    },
    mapping::{Mapping, MappingSet, printable},
};

/// The `why` of the timer-driven reconcile, which re-reads the maps.
pub const RESYNC: &str = "periodic resync";

pub struct Reconciler {
    metrics: AgentMetrics,
    /// What the maps hold after our last successful apply. Reading 2 x N
    /// entries back from the kernel on every change would make each change
    /// cost O(N) syscalls; the maps are re-read at start-up, after a failed
    /// apply and on each periodic resync, which is what catches drift.
    cache: Option<Installed>,
    /// The cache holds the tables of the last desired set whole (nothing
    /// was left out), so a change that names its frontends can be planned
    /// on them alone ([`plan::plan_local`]).
    exact: bool,
    /// What `ssh-fwd status` reads, rewritten after each reconcile and on
    /// every heartbeat.
    status: AgentStatus,
    /// The connection log, told of the connections a retired mapping took
    /// with it.
    closed: ClosedSender,
    /// What the maps serve, for the controller.
    served: served::Board,
}

impl Reconciler {
    pub fn new(metrics: AgentMetrics, source: &str, closed: ClosedSender) -> Self {
        let mut status = AgentStatus::EMPTY;
        status.started_ms = unix_ms(SystemTime::now());
        status.pid = u64::from(std::process::id());
        put_text(&mut status.source, source);
        Self {
            metrics,
            cache: None,
            exact: false,
            status,
            closed,
            served: served::Board::default(),
        }
    }

    /// What the maps serve, kept as each apply succeeds.
    pub fn served(&self) -> served::Board {
        self.served.clone()
    }

    /// Makes the maps hold exactly `desired`; failures are logged and
    /// counted, and the next reconcile re-reads the maps and tries again.
    pub fn reconcile(&mut self, datapath: &mut Datapath, desired: &MappingSet, change: &Change) {
        let Change {
            why,
            since,
            ref touched,
        } = *change;
        let started = Instant::now();
        let result = self.apply(datapath, desired, touched.as_ref(), why);
        let took = started.elapsed();
        self.metrics.reconcile_duration.observe(took.as_secs_f64());
        match result {
            Ok(()) => self.succeeded(since, took),
            Err(e) => {
                self.metrics.reconcile_errors.inc();
                self.status.reconcile_errors += 1;
                self.status.last_error_ms = unix_ms(SystemTime::now());
                put_text(&mut self.status.last_error, &format!("{e:#}"));
                tracing::error!(
                    why,
                    error = format!("{e:#}"),
                    "reconcile failed; will retry at the next change or resync"
                );
            }
        }
        self.heartbeat(&mut datapath.status, None);
    }

    /// Records a reconcile that made the maps hold what the plan asked:
    /// the mappings counted are those installed (the cache), not those
    /// desired, which may have been more than fit.
    fn succeeded(&mut self, since: Instant, took: Duration) {
        let installed = self.cache.as_ref().map_or(0, |c| c.frontends.len());
        self.metrics.reconciles.inc();
        self.metrics
            .mappings
            .set(i64::try_from(installed).unwrap_or(i64::MAX));
        self.metrics
            .change_to_map
            .observe(since.elapsed().as_secs_f64());
        if !self.metrics.is_ready() {
            tracing::info!("agent ready: the maps hold the desired mappings");
            self.metrics.set_ready();
        }
        self.status.reconciles += 1;
        self.status.mappings = installed as u64;
        self.status.last_reconcile_ms = unix_ms(SystemTime::now());
        self.status.last_reconcile_micros = micros(took);
    }

    /// Rewrites the pinned status with the current time, and what the last
    /// connection sweep found.
    pub fn heartbeat(&mut self, status: &mut StatusMap, sweep: Option<&sweep::Report>) {
        if let Some(r) = sweep {
            self.status.last_sweep_ms = r.at_ms;
            self.status.conns_at_sweep = r.swept.conns;
            self.status.half_open_at_sweep = r.swept.half_open;
            self.status.half_open_churned = r.half_open_churned;
        }
        self.status.heartbeat_ms = unix_ms(SystemTime::now());
        if let Err(e) = status.write(&self.status) {
            tracing::debug!(error = format!("{e:#}"), "cannot write the agent status");
        }
    }

    /// Records a source rejected whole (a bad mappings file) as a failed
    /// reconcile: the running mappings stay.
    pub fn rejected(&mut self, status: &mut StatusMap, error: &str) {
        self.metrics.reconcile_errors.inc();
        self.status.reconcile_errors += 1;
        self.status.last_error_ms = unix_ms(SystemTime::now());
        put_text(&mut self.status.last_error, error);
        tracing::error!(error, "mappings file rejected");
        self.heartbeat(status, None);
    }

    /// Plans `desired` against the cache (or the maps) and applies it.
    /// `touched`: the frontends that changed since the last apply, when the
    /// source knows; then only they are planned.
    fn apply(
        &mut self,
        datapath: &mut Datapath,
        desired: &MappingSet,
        touched: Option<&BTreeSet<SocketAddr>>,
        why: &str,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        if why == RESYNC {
            self.cache = None;
        }
        let exact = std::mem::take(&mut self.exact);
        let installed = match self.cache.take() {
            Some(cached) => cached,
            None => datapath.maps.read_installed()?,
        };
        let local = touched.filter(|_| exact).and_then(|touched| {
            plan::plan_local(&installed, desired, touched, datapath.maps.capacity())
        });
        let (steps, after) = match local {
            Some(mut local) => (std::mem::take(&mut local.steps), After::Local(local)),
            None => {
                let capacity = datapath.maps.capacity();
                let planned = plan::plan_steps(&installed, desired, capacity);
                report_left_out(&planned.left_out, capacity);
                let left_out = planned.left_out.len();
                (planned.steps, After::Whole(planned.tables, left_out))
            }
        };
        // Its frontends' addresses are SSH IPs before they go live.
        let frontend_ips = || desired.iter().map(|m| m.frontend.ip());
        datapath.ssh_ips.widen(frontend_ips())?;
        let mappings = desired.len()
            - match &after {
                After::Whole(_, left_out) => *left_out,
                After::Local(_) => 0,
            };
        if steps.iter().all(Plan::is_empty) {
            tracing::debug!(why, mappings = desired.len(), "maps already match");
            self.keep(installed, after);
            return datapath.ssh_ips.sync(frontend_ips());
        }
        log_changes(&installed, desired, &steps);
        let mut applied = Applied::default();
        let mut purged = 0;
        for step in steps.iter().filter(|s| !s.is_empty()) {
            // On error the cache stays empty, so the next reconcile re-reads.
            let done = match datapath.maps.apply(step) {
                Ok(done) => done,
                Err(e) => {
                    remove_stale(datapath, desired, &self.closed);
                    return Err(e);
                }
            };
            applied.added_or_changed += done.added_or_changed;
            applied.removed += done.removed;
            // Connections through retired frontends go: their backend
            // address may be given to another pod next, and their slot to
            // another mapping in the next step.
            let gone = datapath
                .conns
                .purge(&step.retired.iter().copied().collect());
            purged += gone.len() as u64;
            self.closed.send(gone);
        }
        self.keep(installed, after);
        // Once the frontends that left are gone.
        datapath.ssh_ips.sync(frontend_ips())?;
        datapath.maps.count(Outcome::ConnPurged, purged)?;
        tracing::info!(
            why,
            mappings,
            added_or_changed = applied.added_or_changed,
            removed = applied.removed,
            connections_purged = purged,
            took_ms = started.elapsed().as_secs_f64() * 1000.0,
            "maps reconciled"
        );
        Ok(())
    }
}

/// What the cache becomes once a plan's steps are applied.
enum After {
    /// The whole tables, and how many desired mappings were left out.
    Whole(Installed, usize),
    /// The part a plan of the touched frontends rewrites.
    Local(Local),
}

impl Reconciler {
    /// Keeps the tables the maps hold after a successful apply.
    fn keep(&mut self, installed: Installed, after: After) {
        let (tables, exact) = match after {
            After::Whole(mut tables, left_out) => {
                tables.pack();
                let backends = tables.frontends.iter().map(|(f, t)| (*f, t.endpoint));
                self.served.replace(backends);
                (tables, left_out == 0)
            }
            After::Local(local) => {
                let touched = local.frontends();
                let mut tables = installed;
                local.commit(&mut tables);
                let now = |f: &SocketAddr| tables.frontends.get(f).map(|t| (*f, t.endpoint));
                self.served.apply(
                    touched.iter().filter_map(now),
                    touched
                        .iter()
                        .filter(|f| !tables.frontends.contains_key(f))
                        .copied(),
                );
                (tables, true)
            }
        };
        self.cache = Some(tables);
        self.exact = exact;
    }
}

/// Changes past which a reconcile logs one summary line at info and each
/// change at debug: a start with 10,000 mappings would otherwise write
/// 10,000 lines (and spend a sixth of its start-up writing them).
const LOGGED_ONE_BY_ONE: usize = 64;

fn log_changes(installed: &Installed, desired: &MappingSet, steps: &[Plan]) {
    let upserts = || steps.iter().flat_map(|s| &s.frontend_upserts);
    let deletes = || steps.iter().flat_map(|s| &s.frontend_deletes);
    let one_by_one = upserts().count() + deletes().count() <= LOGGED_ONE_BY_ONE;
    let (mut added, mut changed) = (0, 0);
    for (frontend, target) in upserts() {
        let old = installed.frontends.get(frontend);
        match old {
            None => added += 1,
            Some(_) => changed += 1,
        }
        if !one_by_one && !tracing::enabled!(tracing::Level::DEBUG) {
            continue;
        }
        let name = desired
            .get(frontend)
            .map_or(String::new(), |m| printable(&m.name));
        let (frontend, backend) = (frontend.to_string(), target.endpoint.to_string());
        match (old, one_by_one) {
            (None, true) => tracing::info!(name, frontend, backend, "mapping added"),
            (None, false) => tracing::debug!(name, frontend, backend, "mapping added"),
            (Some(old), true) => {
                let old_backend = old.endpoint.to_string();
                tracing::info!(name, frontend, backend, old_backend, "mapping changed");
            }
            (Some(old), false) => {
                let old_backend = old.endpoint.to_string();
                tracing::debug!(name, frontend, backend, old_backend, "mapping changed");
            }
        }
    }
    for frontend in deletes() {
        match one_by_one {
            true => tracing::info!(%frontend, "mapping removed"),
            false => tracing::debug!(%frontend, "mapping removed"),
        }
    }
    if !one_by_one {
        let removed = deletes().count();
        tracing::info!(
            added,
            changed,
            removed,
            "mappings changed (each one is logged with --log debug)"
        );
    }
}

/// After a failed write: every installed mapping whose backend is not the
/// desired one is removed, whatever else failed, so no frontend keeps
/// pointing at an address Kubernetes may give to another pod.
fn remove_stale(datapath: &mut Datapath, desired: &MappingSet, closed: &ClosedSender) {
    let result = datapath.maps.read_installed().and_then(|installed| {
        let plan = plan::stale_removal(&installed, desired, datapath.maps.capacity());
        datapath.maps.apply(&plan)?;
        closed.send(
            datapath
                .conns
                .purge(&plan.retired.iter().copied().collect()),
        );
        Ok(plan.frontend_deletes.len())
    });
    match result {
        Ok(removed) => tracing::warn!(
            removed,
            "after the failed write, stale mappings were removed"
        ),
        Err(e) => tracing::error!(
            error = format!("{e:#}"),
            "cannot remove stale mappings either"
        ),
    }
}

/// Mappings that do not fit, named (the sources cap what they produce, so
/// this is a last resort).
fn report_left_out(left_out: &[Mapping], capacity: usize) {
    if left_out.is_empty() {
        return;
    }
    const SHOWN: usize = 20;
    let named: Vec<String> = left_out
        .iter()
        .take(SHOWN)
        .map(|m| format!("{} ({})", m.frontend, printable(&m.name)))
        .collect();
    tracing::warn!(
        excess = left_out.len(),
        left_out = named.join(", "),
        more = left_out.len().saturating_sub(SHOWN),
        "more mappings than this node holds (--max-mappings {capacity}); these are not installed: remove mappings, narrow the port range, or raise --max-mappings (after `ssh-fwd teardown`)"
    );
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::maps::MAX_MAPPINGS;

    use std::net::SocketAddrV4;

    use super::*;

    #[test]
    fn mappings_left_out_over_capacity_are_not_counted_as_installed() {
        let over = MAX_MAPPINGS as usize + 3;
        let desired = MappingSet::from_unique((0..over).map(|i| {
            Mapping {
                guard: Default::default(),
                name: format!("m{i}").into(),
                frontend: SocketAddrV4::new(
                    [198, 18, (i / 250) as u8, (i % 250) as u8 + 1].into(),
                    8022,
                )
                .into(),
                backend: "10.244.1.5:22".parse().unwrap(),
            }
        }));
        let planned = plan::plan_steps(&Installed::default(), &desired, MAX_MAPPINGS as usize);
        assert_eq!(planned.left_out.len(), 3);
        let mut reconciler = Reconciler::new(AgentMetrics::new(), "test", ClosedSender::none());
        reconciler.keep(
            Installed::default(),
            After::Whole(planned.tables, planned.left_out.len()),
        );
        reconciler.succeeded(Instant::now(), Duration::ZERO);
        assert_eq!(reconciler.status.mappings, u64::from(MAX_MAPPINGS));
        assert_eq!(reconciler.metrics.mappings.get(), i64::from(MAX_MAPPINGS));
    }
}
