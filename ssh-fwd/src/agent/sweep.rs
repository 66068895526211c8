//! The connection sweep, in the background: removes connections that closed
//! or went idle and handshakes that never completed, counts what it removed,
//! and reports what the tables hold (the half-open table is an LRU, so only
//! a walk can count it). A walk of a full table takes a fraction of a
//! second of syscalls, so it runs on the blocking pool with its own handles
//! to the pinned maps, never in the loop that applies mappings.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime},
};

use ssh_fwd_common::outcome::Outcome;

use crate::datapath::{
    conntrack::{ConnTables, Swept, Timeouts, clock_ns},
    maps::Maps,
    pins::PinLayout,
    status::unix_ms,
};

/// What the last sweep found, for the agent's status.
#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    pub at_ms: u64,
    pub swept: Swept,
    /// Half-open entries evicted or replaced since the agent started.
    pub half_open_churned: u64,
}

pub type Shared = Arc<Mutex<Report>>;

/// How often to sweep: often enough that a closed connection goes within
/// seconds of its close timeout, and idle ones within an eighth of theirs.
pub fn interval(t: &Timeouts) -> Duration {
    (t.idle / 8).clamp(Duration::from_secs(1), Timeouts::CLOSE)
}

/// Sweeps forever; a failure is logged and the next sweep tries again.
pub async fn run(layout: PinLayout, timeouts: Timeouts, report: Shared) {
    let mut tick = tokio::time::interval(interval(&timeouts));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut handles: Option<(ConnTables, Maps)> = None;
    let mut baseline: Option<u64> = None;
    loop {
        tick.tick().await;
        let opened = match handles.take() {
            Some(h) => Ok(h),
            None => {
                ConnTables::open_pinned(&layout).and_then(|t| Ok((t, Maps::open_pinned(&layout)?)))
            }
        };
        let (mut tables, mut maps) = match opened {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot open the connection tables to sweep them"
                );
                continue;
            }
        };
        let done = tokio::task::spawn_blocking(move || {
            let swept = sweep_once(&mut tables, &mut maps, &timeouts);
            (tables, maps, swept)
        })
        .await;
        let Ok((tables, maps, swept)) = done else {
            continue;
        };
        let churn = churned(&maps, &swept);
        let base = *baseline.get_or_insert(churn);
        *report.lock().unwrap_or_else(PoisonError::into_inner) = Report {
            at_ms: unix_ms(SystemTime::now()),
            swept,
            half_open_churned: churn.saturating_sub(base),
        };
        handles = Some((tables, maps));
    }
}

/// One sweep at the current time, with what it removed counted.
pub fn sweep_once(tables: &mut ConnTables, maps: &mut Maps, t: &Timeouts) -> Swept {
    let swept = tables.sweep(clock_ns(), t);
    for (outcome, n) in [
        (Outcome::ConnClosed, swept.closed),
        (Outcome::ConnExpired, swept.expired),
        (Outcome::HalfOpenExpired, swept.half_open_expired),
    ] {
        if let Err(e) = maps.count(outcome, n) {
            tracing::debug!(error = format!("{e:#}"), "cannot count swept entries");
        }
    }
    if swept.closed + swept.expired + swept.half_open_expired > 0 {
        tracing::debug!(?swept, "connection sweep");
    }
    swept
}

/// Half-open entries that left other than by completing, expiring or being
/// refused: evicted by the LRU (a SYN flood; a SYN never replaces a
/// handshake's entry). Derived from the counters and the walk's count, so
/// since the counters began.
fn churned(maps: &Maps, swept: &Swept) -> u64 {
    let Ok(counts) = maps.outcome_counters() else {
        return 0;
    };
    let get = |o: Outcome| counts.iter().find(|(k, _)| *k == o).map_or(0, |(_, n)| *n);
    get(Outcome::HalfOpened).saturating_sub(
        get(Outcome::ConnEstablished)
            + get(Outcome::HalfOpenRefused)
            + get(Outcome::HalfOpenExpired)
            + swept.half_open,
    )
}
