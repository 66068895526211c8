//! What the connection log dropped, per kind of record and per stage (in
//! the programs, or in the log): counted in `/metrics`, and summed up in
//! one warning every [`REPORT_EVERY`] rather than a line per record.

use std::time::Duration;

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family},
};

use super::What;

/// How often what was dropped is told.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The message of that summary; the tests look for it.
pub const SUMMARY: &str = "connection records dropped since the last such line";

/// Where a record was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(
    non_camel_case_types,
    reason = "the variants are the label values, written as the metric writes them"
)]
pub enum Stage {
    /// Not written into the ring by the programs: over a CPU's budget of
    /// refused records or their share of the ring, or the ring was full.
    /// Read from `CONN_EVENTS_DROPPED` every [`REPORT_EVERY`].
    kernel,
    /// Read from the ring, not written out: over `--conn-log-rate` (its
    /// class's budget), or the sweep's removals found the log's queue
    /// full.
    log,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabel {
    pub kind: What,
    pub stage: Stage,
}

/// The dropped records, by kind and stage.
#[derive(Clone, Debug, Default)]
pub struct Dropped(Family<DropLabel, Counter>);

impl Dropped {
    /// The metric family, to register.
    pub fn family(&self) -> Family<DropLabel, Counter> {
        self.0.clone()
    }

    pub fn add(&self, kind: What, stage: Stage, n: u64) {
        self.0.get_or_create(&DropLabel { kind, stage }).inc_by(n);
    }

    /// Every stage's drops of `kind` so far.
    fn of(&self, kind: What) -> u64 {
        [Stage::kernel, Stage::log]
            .into_iter()
            .map(|stage| self.0.get_or_create(&DropLabel { kind, stage }).get())
            .sum()
    }
}

/// The programs' totals as last read, to count only what came since.
#[derive(Debug, Default)]
pub struct KernelTotals {
    last: [u64; What::ALL.len()],
}

impl KernelTotals {
    /// Adds to `dropped` what the programs dropped since the last call,
    /// from their totals `now`. The first call counts all they hold,
    /// records dropped while no agent read the ring included. A total
    /// below the last is a map made anew: counted from zero.
    pub fn update(&mut self, now: impl IntoIterator<Item = (What, u64)>, dropped: &Dropped) {
        for (kind, total) in now {
            let Some(i) = What::ALL.iter().position(|k| *k == kind) else {
                continue;
            };
            let since = if total >= self.last[i] {
                total - self.last[i]
            } else {
                total
            };
            self.last[i] = total;
            if since > 0 {
                dropped.add(kind, Stage::kernel, since);
            }
        }
    }
}

/// What the last summary counted, to tell only what came since.
#[derive(Debug, Default)]
pub struct Summary {
    told: [u64; What::ALL.len()],
}

impl Summary {
    /// Each kind's drops since the last call, in [`What::ALL`]'s order.
    pub fn since_last(&mut self, dropped: &Dropped) -> [u64; What::ALL.len()] {
        let mut new = [0; What::ALL.len()];
        for (i, kind) in What::ALL.into_iter().enumerate() {
            let now = dropped.of(kind);
            new[i] = now.saturating_sub(self.told[i]);
            self.told[i] = now;
        }
        new
    }

    /// One warning with each kind's drops since the last, if any.
    pub fn tell(&mut self, dropped: &Dropped, rate: u32) {
        let [accepted, denied, syn_limited, closed] = self.since_last(dropped);
        if accepted + denied + syn_limited + closed == 0 {
            return;
        }
        tracing::warn!(
            target: "ssh_fwd::connections",
            accepted, closed, denied, syn_limited, rate,
            hint = "refused SYNs (denied, syn_limited) over --conn-log-rate are expected under a \
                    flood; accepted or closed ones mean the agent did not keep up; \
                    ssh_fwd_connection_records_dropped_total has them by kind and stage",
            "{SUMMARY}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_drops_are_counted_once_and_a_new_map_from_zero() {
        let dropped = Dropped::default();
        let mut totals = KernelTotals::default();
        let mut summary = Summary::default();
        totals.update([(What::denied, 40), (What::accepted, 0)], &dropped);
        totals.update([(What::denied, 45), (What::accepted, 0)], &dropped);
        assert_eq!(summary.since_last(&dropped), [0, 45, 0, 0]);
        // Torn down and loaded again: 3 since.
        totals.update([(What::denied, 3)], &dropped);
        assert_eq!(summary.since_last(&dropped), [0, 3, 0, 0]);
        dropped.add(What::denied, Stage::log, 2);
        assert_eq!(summary.since_last(&dropped), [0, 2, 0, 0], "both stages");
    }

    #[test]
    fn each_summary_counts_only_what_came_since_the_last() {
        let dropped = Dropped::default();
        let mut summary = Summary::default();
        assert_eq!(summary.since_last(&dropped), [0; 4]);
        dropped.add(What::denied, Stage::log, 7);
        dropped.add(What::closed, Stage::log, 1);
        assert_eq!(summary.since_last(&dropped), [0, 7, 0, 1]);
        dropped.add(What::denied, Stage::log, 2);
        assert_eq!(summary.since_last(&dropped), [0, 2, 0, 0]);
        assert_eq!(summary.since_last(&dropped), [0; 4]);
    }
}
