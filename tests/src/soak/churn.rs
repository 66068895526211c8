//! Pod churn: every few seconds a job ends (its sessions closed first,
//! then its Pod deleted and its namespace gone) and a new one starts in
//! its slot, on the same node (so each node keeps its share of jobs),
//! taking whatever port the controller hands out: freed ports come back
//! to new jobs.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use super::{jobs, run::Run};
use crate::flood::Rng;

/// How long a new job may take to get its port published.
pub const PUBLISH_LIMIT: Duration = Duration::from_secs(60);

/// Numbers pod addresses are drawn from (10.244.N.5).
const POD_NUMBERS: std::ops::RangeInclusive<usize> = 1..=250;

/// Starts the first job of every slot, alternating nodes.
pub fn fill(run: &Run<'_>) -> anyhow::Result<()> {
    for n in 0..run.slots.len() {
        start_in(run, n, n + 1, n % 2)?;
    }
    Ok(())
}

fn start_in(run: &Run<'_>, slot: usize, number: usize, node: usize) -> anyhow::Result<()> {
    let name = format!("job-{number}");
    let job = jobs::start(run.bed, &name, (number, node), PUBLISH_LIMIT, &|| {
        !run.stopped()
    })?;
    let mut s = run.slot(slot);
    s.job = Some(job);
    s.ending = Arc::default();
    s.talking = Arc::default();
    drop(s);
    run.records().jobs_started += 1;
    Ok(())
}

/// Ends a job and starts another every `every` until the soak stops.
pub fn keep(run: &Run<'_>, every: Duration) {
    let mut rng = Rng::new(run.seed ^ 0xc4a2);
    let mut number = run.slots.len();
    while run.pause(every) {
        let slot = (rng.draw() % run.slots.len() as u64) as usize;
        let node = run.slot(slot).job.as_ref().map_or(slot % 2, |j| j.pod.node);
        if let Err(e) = end_in(run, slot) {
            run.records()
                .churn_errors
                .push((run.now(), format!("ending slot {slot}'s job: {e:#}")));
            continue;
        }
        number = next_number(run, number);
        if let Err(e) = start_in(run, slot, number, node)
            && !run.stopped()
        {
            run.records()
                .churn_errors
                .push((run.now(), format!("starting job-{number}: {e:#}")));
        }
    }
}

/// Ends the job of `slot` once its sessions closed (at most 20 s).
fn end_in(run: &Run<'_>, slot: usize) -> anyhow::Result<()> {
    let (ending, talking) = {
        let s = run.slot(slot);
        if s.job.is_none() {
            return Ok(());
        }
        s.ending.store(true, Ordering::Relaxed);
        (s.ending.clone(), s.talking.clone())
    };
    let _ = ending;
    let closed = crate::cmd::wait_until(Duration::from_secs(20), || {
        talking.load(Ordering::Relaxed) == 0
    });
    anyhow::ensure!(closed, "its sessions did not close within 20 s");
    let Some(job) = run.slot(slot).job.take() else {
        return Ok(());
    };
    jobs::end(run.bed, job)?;
    run.records().jobs_ended += 1;
    Ok(())
}

/// The next pod number after `last` that no running job has.
fn next_number(run: &Run<'_>, last: usize) -> usize {
    let used: Vec<usize> = (0..run.slots.len())
        .filter_map(|n| run.slot(n).job.as_ref().map(|j| j.pod.number))
        .collect();
    let span = POD_NUMBERS.end() - POD_NUMBERS.start() + 1;
    (1..=span)
        .map(|k| POD_NUMBERS.start() + (last + k - POD_NUMBERS.start()) % span)
        .find(|n| !used.contains(n))
        .unwrap_or(last)
}
