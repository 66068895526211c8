//! What the soak samples every few seconds while the load runs: each
//! agent's and controller's resident memory, and the counters on their
//! `/metrics` that should not move (`tables::WATCHED`). A counter starts
//! again at 0 with its process; the totals here add each process's last
//! value.

use std::{collections::BTreeMap, time::Duration};

use super::{
    bed::{AGENT_METRICS, Bed, CONTROLLER_METRICS},
    run::Run,
    tables::{rss_kib, watched_counters},
};

/// Resident memory of one role (an agent or a controller replica) over
/// the soak, across its restarts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rss {
    pub start_kib: u64,
    pub max_kib: u64,
    pub end_kib: u64,
}

impl Rss {
    fn add(&mut self, kib: u64) {
        if self.start_kib == 0 {
            self.start_kib = kib;
        }
        self.max_kib = self.max_kib.max(kib);
        self.end_kib = kib;
    }
}

/// A counter summed over the processes that served it.
#[derive(Clone, Copy, Debug, Default)]
struct Summed {
    before: f64,
    last: f64,
}

/// What the sampler found.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// By role: `agent node0`, `controller ctl1`, ...
    pub rss: BTreeMap<String, Rss>,
    summed: BTreeMap<(String, String), Summed>,
}

impl Samples {
    /// One sample of every process of `bed`.
    pub fn take(&mut self, bed: &Bed) {
        let (agents, controllers) = bed.pids();
        for (n, pid) in agents.iter().enumerate() {
            let role = format!("agent node{n}");
            if let Some(kib) = pid.and_then(rss_kib) {
                self.rss.entry(role.clone()).or_default().add(kib);
                self.count(&role, watched_counters(&bed.seg.nodes[n], AGENT_METRICS));
            }
        }
        for (n, pid) in controllers.iter().enumerate() {
            let role = format!("controller ctl{n}");
            if let Some(kib) = pid.and_then(rss_kib) {
                self.rss.entry(role.clone()).or_default().add(kib);
                self.count(
                    &role,
                    watched_counters(&bed.seg.nodes[n], CONTROLLER_METRICS),
                );
            }
        }
    }

    fn count(&mut self, role: &str, values: BTreeMap<String, f64>) {
        for (series, v) in values {
            let s = self.summed.entry((role.to_owned(), series)).or_default();
            if v < s.last {
                s.before += s.last;
            }
            s.last = v;
        }
    }

    /// Every watched counter that moved: role, series, total.
    pub fn counters(&self) -> Vec<(String, String, f64)> {
        (self.summed.iter())
            .map(|((role, series), s)| (role.clone(), series.clone(), s.before + s.last))
            .filter(|(_, _, v)| *v > 0.0)
            .collect()
    }
}

/// Samples every `every` until the soak stops, then once more.
pub fn keep(run: &Run<'_>, samples: &std::sync::Mutex<Samples>, every: Duration) {
    loop {
        super::bed::lock(samples).take(run.bed);
        if !run.pause(every) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_summed_over_the_processes_that_served_it() {
        let mut s = Samples::default();
        let one = |v: f64| BTreeMap::from([("ssh_fwd_api_errors_total".to_owned(), v)]);
        s.count("agent node0", one(0.0));
        s.count("agent node0", one(3.0));
        // The agent restarted: its counter starts again.
        s.count("agent node0", one(1.0));
        s.count("agent node0", one(2.0));
        assert_eq!(
            s.counters(),
            [(
                "agent node0".to_owned(),
                "ssh_fwd_api_errors_total".to_owned(),
                5.0
            )]
        );
    }

    #[test]
    fn resident_memory_keeps_its_first_its_highest_and_its_last_figure() {
        let mut r = Rss::default();
        for kib in [100, 300, 200] {
            r.add(kib);
        }
        assert_eq!(
            r,
            Rss {
                start_kib: 100,
                max_kib: 300,
                end_kib: 200
            }
        );
    }
}
