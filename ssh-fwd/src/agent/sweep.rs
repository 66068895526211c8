//! The connection sweep, in the background: removes connections that closed
//! or went idle, recounts what each client holds, counts what it removed,
//! reports what the tables hold (the half-open and claim tables are LRUs,
//! so only a walk can count them), and logs the clients the quota holds
//! back and the frontend options it ignored. A walk of a full table takes a fraction of a second of syscalls,
//! so it runs on the blocking pool with its own handles to the pinned
//! maps, never in the loop that applies mappings.

mod refusals;
mod throttle;

use std::{
    net::Ipv4Addr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

use ssh_fwd_common::outcome::Outcome;

use super::{activity::Board, audit::ClosedSender};
use crate::datapath::{
    conntrack::{
        Adder, ConnTables, Sweep, Swept, Timeouts, activity::Clock, clock_ns, half_open_churned,
    },
    maps::Maps,
    pins::PinLayout,
    status::unix_ms,
};

/// What the last sweep found, for the agent's status.
#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    pub at_ms: u64,
    pub swept: Swept,
    /// SYNs no client completed since the agent started.
    pub half_open_churned: u64,
}

pub type Shared = Arc<Mutex<Report>>;

/// How often to sweep: often enough that a closed connection goes within
/// seconds of its close timeout, and idle ones within an eighth of theirs.
pub fn interval(t: &Timeouts) -> Duration {
    (t.idle / 8).clamp(Duration::from_secs(1), Timeouts::CLOSE)
}

/// Sweeps forever; a failure is logged and the next sweep tries again.
/// `conns_per_source` is the quota the clients it names are held to;
/// `quota` counts what it removes off them.
/// What it removes goes to `closed`, the connection log; each sweep's walk
/// also tells `board` what every frontend's connections do.
pub async fn run(
    layout: PinLayout,
    quota: Adder,
    timeouts: Timeouts,
    conns_per_source: u32,
    report: Shared,
    closed: ClosedSender,
    board: Board,
) {
    let mut tick = tokio::time::interval(interval(&timeouts));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut handles: Option<(ConnTables, Maps)> = None;
    let mut baseline: Option<u64> = None;
    let mut refusals = refusals::RefusalLog::default();
    let mut options = IgnoredOptions::default();
    loop {
        tick.tick().await;
        let opened = match handles.take() {
            Some(h) => Ok(h),
            None => ConnTables::open_pinned(&layout)
                .and_then(|t| Ok((t.with_quota(quota.clone()), Maps::open_pinned(&layout)?))),
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
            let sweep = sweep_once(&mut tables, &mut maps, &timeouts);
            // After the walk: no entry it read is younger than this.
            let clock = Clock::now();
            (tables, maps, sweep, clock)
        })
        .await;
        let Ok((
            tables,
            maps,
            Sweep {
                swept,
                gone,
                activity,
            },
            clock,
        )) = done
        else {
            continue;
        };
        board.record(&clock, &activity);
        closed.send(gone);
        let counts = maps.outcome_counters().unwrap_or_default();
        let counter = |o: Outcome| counts.iter().find(|(k, _)| *k == o).map_or(0, |(_, n)| *n);
        log_refusals(
            &mut refusals,
            &tables,
            counter(Outcome::SourceLimited),
            conns_per_source,
        );
        options.log(&counter);
        let churn = half_open_churned(counter);
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
pub fn sweep_once(tables: &mut ConnTables, maps: &mut Maps, t: &Timeouts) -> Sweep {
    let sweep = tables.sweep_all(clock_ns(), t);
    let swept = &sweep.swept;
    for (outcome, n) in [
        (Outcome::ConnClosed, swept.closed),
        (Outcome::ConnExpired, swept.expired),
    ] {
        if let Err(e) = maps.count(outcome, n) {
            tracing::debug!(error = format!("{e:#}"), "cannot count swept entries");
        }
    }
    if swept.closed + swept.expired > 0 {
        tracing::debug!(?swept, "connection sweep");
    }
    sweep
}

/// Logs, at most once a minute, how many handshakes the quota held back
/// (`limited`, the counter) and which clients it holds.
fn log_refusals(log: &mut refusals::RefusalLog, tables: &ConnTables, limited: u64, limit: u32) {
    let sources: Vec<(Ipv4Addr, u64)> = tables
        .sources()
        .into_iter()
        .map(|(addr, n)| (Ipv4Addr::from(addr.to_ne_bytes()), n))
        .collect();
    if let Some(line) = log.due(Instant::now(), limited, &sources, limit) {
        let clients: Vec<String> = line
            .at_limit
            .iter()
            .map(|(addr, held)| format!("{addr} ({held})"))
            .collect();
        tracing::warn!(
            held_back = line.held_back,
            limit,
            clients = clients.join(", "),
            "handshakes held back: their clients hold --conns-per-source connections on this \
             node (counted as source_limited, per mapping too); raise --conns-per-source for \
             clients behind one NAT address, or block the addresses named"
        );
    }
}

/// The frontend options this node ignored, and the connection log's
/// records the kernel lost, told at most once a minute each: connections
/// another node translated to pods here, which get no frontend back from
/// this node when their option is ignored.
#[derive(Debug, Default)]
struct IgnoredOptions {
    untrusted: throttle::Throttle,
    forged: throttle::Throttle,
    records_lost: throttle::Throttle,
}

impl IgnoredOptions {
    fn log(&mut self, counter: &impl Fn(Outcome) -> u64) {
        let now = Instant::now();
        if let Some(n) = self.untrusted.rose(now, counter(Outcome::OptionUntrusted)) {
            tracing::warn!(
                syns = n,
                "SYNs carried a plain frontend option where anyone can send one (an external \
                 interface, or one that is not a --cluster-iface), or under --cross-node plain, \
                 and it was ignored (frontend_option_untrusted): if other nodes sent them, their \
                 clients get no answer through this node. Give every agent the same \
                 --cross-node-key, carry node-to-node traffic on a --cluster-iface, or run every \
                 agent with the same --cross-node"
            );
        }
        if let Some(n) = self.records_lost.rose(now, counter(Outcome::EventsLost)) {
            tracing::warn!(
                records = n,
                "connection log records lost in the kernel: its ring buffer was full \
                 (events_lost); the agent did not drain it in time (stopped, starved, or more \
                 connections than it keeps up with; refused SYNs fill at most half of it). The \
                 connections themselves are unaffected; ssh_fwd_connection_records_dropped_total \
                 has the records by kind"
            );
        }
        if let Some(n) = self.forged.rose(now, counter(Outcome::OptionForged)) {
            tracing::warn!(
                syns = n,
                "SYNs carried a sealed frontend option whose tag is wrong under this node's \
                 --cross-node-key, and it was ignored (frontend_option_forged): the nodes do not \
                 share one key, or someone forges them. Give every agent the same key"
            );
        }
    }
}
