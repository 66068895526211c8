//! Kubernetes as the source of desired state: wait for complete caches, then
//! reconcile on every change (coalesced) and on a timer.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use tokio::{
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use super::{health::Health, reconcile::Reconciler};
use crate::{
    cli::AgentArgs,
    k8s::{
        desired::{Note, Policy},
        selector::LabelSelector,
        source::KubeSource,
    },
};

pub fn policy(args: &AgentArgs) -> anyhow::Result<Policy> {
    Ok(Policy {
        ssh_ips: args.ssh_ips.iter().copied().collect(),
        ports: args.port_range.clone(),
        selector: LabelSelector::parse(&args.selector)?,
    })
}

pub async fn watch(
    args: &AgentArgs,
    reconciler: &mut Reconciler,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    let policy = policy(args)?;
    let source = KubeSource::start(crate::k8s::client::connect(args.kubeconfig.as_deref()).await?);
    let _ = health.api_errors.set(source.api_errors.clone());
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tracing::info!(
        "waiting for complete lists of Services and EndpointSlices; until then the maps stay as they are"
    );
    tokio::select! {
        ready = source.wait_until_ready() => ready?,
        _ = terminate.recv() => return Ok(()),
        _ = interrupt.recv() => return Ok(()),
    }
    let mut resync = interval(args.resync_interval);
    resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut seen_notes: BTreeSet<String> = BTreeSet::new();
    let mut why = "first complete list";
    loop {
        let desired = source.desired(&policy);
        report(&desired.notes, &mut seen_notes);
        if let Err(e) = reconciler.reconcile(&desired.mappings, why) {
            health
                .reconcile_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(error = format!("{e:#}"), "reconcile failed; will retry");
        }
        why = tokio::select! {
            _ = terminate.recv() => { tracing::info!("SIGTERM received"); return Ok(()) }
            _ = interrupt.recv() => { tracing::info!("SIGINT received"); return Ok(()) }
            _ = source.changed.notified() => {
                // Coalesce a burst of events into one reconcile.
                tokio::time::sleep(Duration::from_millis(20)).await;
                "cluster changed"
            }
            _ = resync.tick() => super::reconcile::RESYNC,
        };
    }
}

/// Logs each note once while it holds: conflicts and ambiguities as warnings,
/// ignored Services at debug level.
fn report(notes: &[Note], seen: &mut BTreeSet<String>) {
    let mut now = BTreeSet::new();
    for note in notes {
        let key = format!("{note:?}");
        if !seen.contains(&key) {
            match note {
                Note::Conflict {
                    frontend,
                    winner,
                    loser,
                } => {
                    tracing::warn!(%frontend, winner, loser, "two Services claim one frontend; the older one wins")
                }
                Note::ManyReadyEndpoints {
                    service,
                    chosen,
                    ready,
                } => {
                    tracing::warn!(service, %chosen, ready, "Service has several ready endpoints; an SSH Service should select one pod")
                }
                Note::NoReadyEndpoint { service } => tracing::info!(
                    service,
                    "no ready endpoint; its port stays closed until one is ready"
                ),
                other => tracing::debug!(note = ?other, "Service ignored"),
            }
        }
        now.insert(key);
    }
    *seen = now;
}
