//! The static mappings file as the source of desired state: polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses)
//! and reloaded on SIGHUP.

use tokio::{
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};

use super::reconcile::Reconciler;
use crate::{cli::AgentArgs, mappings};

pub async fn watch(
    args: &AgentArgs,
    path: &std::path::Path,
    reconciler: &mut Reconciler,
    initial: mappings::MappingSet,
) -> anyhow::Result<()> {
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut watch = interval(args.watch_interval);
    watch.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut resync = interval(args.resync_interval);
    resync.set_missed_tick_behavior(MissedTickBehavior::Skip);
    resync.tick().await; // the first tick is immediate; start-up just reconciled

    let mut applied = initial;
    let mut last_text = std::fs::read(path).ok();
    tracing::info!(file = %path.display(), mappings = applied.len(), "watching the mappings file");
    loop {
        let why = tokio::select! {
            _ = terminate.recv() => { tracing::info!("SIGTERM received"); return Ok(()) }
            _ = interrupt.recv() => { tracing::info!("SIGINT received"); return Ok(()) }
            _ = hangup.recv() => "SIGHUP",
            _ = watch.tick() => {
                let text = std::fs::read(path).ok();
                if text == last_text { continue }
                last_text = text;
                "file changed"
            }
            _ = resync.tick() => {
                if let Err(e) = reconciler.reconcile(&applied, super::reconcile::RESYNC) {
                    tracing::error!(error = format!("{e:#}"), "resync failed; will retry");
                }
                continue;
            }
        };
        match mappings::load_file(path) {
            Ok(desired) => {
                if desired.is_empty() {
                    tracing::warn!(
                        "the mappings file lists no mappings: every frontend port closes"
                    );
                }
                // Even if applying fails, the resync retries this file, not the old one.
                applied = desired;
                if let Err(e) = reconciler.reconcile(&applied, why) {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "applying the mappings failed; will retry at the next resync"
                    );
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                "mappings file rejected; the running mappings stay as they are until it is fixed"
            ),
        }
    }
}
