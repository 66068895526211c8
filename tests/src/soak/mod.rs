//! The soak: the cluster of [`bed`] under every kind of load at once
//! (long sessions checking every echo, new logins, scp with checksums, a
//! spoofed SYN flood, a client hammering the per-source quota, pod churn)
//! while the faults of a seeded [`schedule`] overlap; then, once the load
//! stopped and the close timeout passed, the kernel's tables read against
//! their baseline. [`report::Report`] holds what was seen and what failed.
//!
//! `cargo xtask soak` runs it for minutes and writes the report;
//! `tests/tests/soak.rs` runs a minute of it in CI.

pub mod attack;
pub mod bed;
pub mod churn;
pub mod faults;
pub mod jobs;
pub mod logins;
pub mod report;
pub mod run;
pub mod sample;
pub mod schedule;
pub mod scp;
pub mod sessions;
pub mod tables;
pub mod tally;

use std::{
    path::PathBuf,
    sync::{Mutex, atomic::Ordering},
    time::{Duration, Instant},
};

use self::{
    bed::{Bed, Size},
    report::Report,
    run::Run,
    schedule::{Fault, Shape},
    tables::Tables,
};

/// How much of each load a soak runs: the figures scaled to a
/// machine of two cores shared with other work (docs/testing.md says by
/// how much).
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub jobs: usize,
    pub sessions: usize,
    pub logins_per_second: f64,
    pub scp_every: Duration,
    pub scp_mib: u64,
    pub flood_per_second: u32,
    pub churn_every: Duration,
    pub fault_gap: Duration,
}

impl Scale {
    /// The figures for a soak of `length`: a short one (CI's minute)
    /// packs every kind of fault in; a long one spaces them.
    pub fn for_length(length: Duration) -> Self {
        let short = length <= Duration::from_secs(120);
        Self {
            jobs: if short { 6 } else { 8 },
            sessions: if short { 12 } else { 16 },
            logins_per_second: 2.0,
            scp_every: if short {
                Duration::from_secs(15)
            } else {
                Duration::from_secs(60)
            },
            scp_mib: if short { 4 } else { 16 },
            flood_per_second: 2_000,
            churn_every: if short {
                Duration::from_secs(8)
            } else {
                Duration::from_secs(10)
            },
            fault_gap: if short {
                // Every kind of fault once in the minute.
                (length.saturating_sub(Duration::from_secs(16))) / Fault::ALL.len() as u32
            } else {
                Duration::from_secs(8)
            },
        }
    }
}

/// The shape of the fault schedule of a soak of `length`.
fn shape(length: Duration, scale: &Scale) -> Shape {
    Shape {
        length,
        calm: Duration::from_secs(5),
        mean_gap: scale.fault_gap,
        shortest: Duration::from_secs(2),
        longest: Duration::from_secs(6),
    }
}

/// One soak's settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub length: Duration,
    pub seed: u64,
    /// Where logs and scratch files go (kept).
    pub dir: PathBuf,
}

/// How long the tables may take to come back to their baseline once the
/// load stopped: the close timeout (10 s), two sweeps, and margin.
const SETTLE_LIMIT: Duration = Duration::from_secs(40);

/// Runs the soak; `Err` only if the bed could not be built. A soak that
/// ran returns its report, failed or not.
pub fn run(options: &Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    let scale = Scale::for_length(options.length);
    let plan = schedule::plan(options.seed, shape(options.length, &scale));
    std::fs::create_dir_all(&options.dir)?;
    let bed = Bed::start(Size { jobs: scale.jobs }, &options.dir)?;
    let run = Run::new(&bed, scale.jobs, options.seed, &options.dir);
    churn::fill(&run)?;
    let baseline = read_tables(&bed)?;
    let samples = Mutex::default();
    let locks = faults::Locks::default();
    let load_started = Instant::now();
    std::thread::scope(|s| {
        let run = &run;
        // Bounded: every thread ends once `stop` is set, within its own
        // timeouts (an echo's deadline, a login's 15 s, a copy's 120 s).
        for id in 0..scale.sessions {
            s.spawn(move || sessions::keep(run, id, id % scale.jobs));
        }
        for w in 0..2 {
            s.spawn(move || logins::keep(run, w, 2, scale.logins_per_second));
        }
        s.spawn(move || scp::keep(run, scale.scp_every, scale.scp_mib));
        s.spawn(move || {
            attack::flood(
                run,
                scale.flood_per_second,
                options.length + Duration::from_secs(5),
            )
        });
        s.spawn(move || attack::hammer(run));
        s.spawn(move || churn::keep(run, scale.churn_every));
        let samples = &samples;
        s.spawn(move || sample::keep(run, samples, Duration::from_secs(2)));
        faults::run_all(s, run, &locks, &plan);
        // The load's length: this paces the run, it waits for nothing.
        std::thread::sleep(options.length.saturating_sub(run.now()));
        run.stop.store(true, Ordering::Relaxed);
    });
    let load = load_started.elapsed();
    let (after, settled) = settle(&bed, &baseline);
    let mut samples: sample::Samples = bed::lock(&samples).clone();
    samples.take(&bed);
    let exited = exited(&bed);
    let records = std::mem::take(&mut *run.records());
    drop(run);
    let logs = bed.keep_logs();
    drop(bed);
    Ok(Report::new(report::Inputs {
        seed: options.seed,
        length: options.length,
        scale,
        plan,
        load,
        records,
        baseline,
        after,
        settled,
        samples,
        exited,
        logs,
        dir: options.dir.clone(),
        wall: started.elapsed(),
    }))
}

fn read_tables(bed: &Bed) -> anyhow::Result<[Tables; 2]> {
    Ok([
        Tables::read(bed.bpffs[0].path())?,
        Tables::read(bed.bpffs[1].path())?,
    ])
}

/// Waits (at most [`SETTLE_LIMIT`]) until both nodes' tables are back to
/// `baseline`: as many connection entries, no client holding any. The
/// tables last read, and how long that took (`None`: they never were).
fn settle(bed: &Bed, baseline: &[Tables; 2]) -> ([Tables; 2], Option<Duration>) {
    let from = Instant::now();
    let back =
        |t: &[Tables; 2]| (0..2).all(|n| t[n].conns <= baseline[n].conns && t[n].held().is_empty());
    let mut last = [Tables::default(), Tables::default()];
    while from.elapsed() < SETTLE_LIMIT {
        if let Ok(t) = read_tables(bed) {
            last = t;
            if back(&last) {
                return (last, Some(from.elapsed()));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    (last, None)
}

/// Agents or controllers that ended on their own: who, and how.
fn exited(bed: &Bed) -> Vec<String> {
    let mut out = Vec::new();
    for (role, list) in [
        ("agent node", &bed.agents),
        ("controller ctl", &bed.controllers),
    ] {
        for (n, m) in list.iter().enumerate() {
            let mut guard = bed::lock(m);
            match guard.as_mut().map(crate::Agent::exited) {
                Some(Ok(Some(status))) => out.push(format!("{role}{n} exited ({status})")),
                None => out.push(format!("{role}{n} not running at the end")),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ci_minute_holds_every_kind_of_fault_whatever_the_seed() {
        let length = Duration::from_secs(60);
        let scale = Scale::for_length(length);
        for seed in 0..500 {
            let plan = schedule::plan(seed, shape(length, &scale));
            let missing: Vec<Fault> = (Fault::ALL.iter())
                .filter(|f| !plan.iter().any(|p| p.fault == **f))
                .copied()
                .collect();
            assert!(
                missing.is_empty(),
                "seed {seed}: no {missing:?} in {plan:?}"
            );
        }
    }
}
