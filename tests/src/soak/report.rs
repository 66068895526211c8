//! What a soak saw, its verdict, and the one-screen summary. A failure
//! names the seed, the faults around it and where the logs are, so the
//! soak can be replayed (`cargo xtask soak --seed S`).

use std::{fmt::Write as _, path::PathBuf, time::Duration};

use super::{
    Scale,
    run::{Attempt, Records, Refusal, Refused},
    sample::Samples,
    schedule::Planned,
    tables::Tables,
    tally::{Logins, Sessions, Window},
};

/// What [`Report::new`] is made of.
pub struct Inputs {
    pub seed: u64,
    /// The length asked for (a replay asks for it again).
    pub length: Duration,
    pub scale: Scale,
    pub plan: Vec<Planned>,
    pub load: Duration,
    pub records: Records,
    pub baseline: [Tables; 2],
    pub after: [Tables; 2],
    pub settled: Option<Duration>,
    pub samples: Samples,
    pub exited: Vec<String>,
    pub logs: Vec<PathBuf>,
    pub dir: PathBuf,
    pub wall: Duration,
}

pub struct Report {
    pub inputs: Inputs,
    pub sessions: Sessions,
    /// Sessions that could not be opened, placed as logins are.
    pub session_opens: Logins,
    pub logins: Logins,
    pub scp: Logins,
}

fn tally(attempts: &[Attempt], windows: &[Window]) -> Logins {
    let mut t = Logins::default();
    for a in attempts {
        t.add(a.at, a.result.clone(), a.job_ended, windows);
    }
    t
}

impl Report {
    pub fn new(inputs: Inputs) -> Self {
        let windows = &inputs.records.windows;
        let mut sessions = Sessions::default();
        for end in &inputs.records.sessions {
            sessions.add(end, windows);
        }
        Self {
            session_opens: tally(&inputs.records.session_opens, windows),
            logins: tally(&inputs.records.logins, windows),
            scp: tally(&inputs.records.scp, windows),
            sessions,
            inputs,
        }
    }

    /// Every way the soak missed its goals; empty: it passed.
    pub fn failures(&self) -> Vec<String> {
        let r = &self.inputs.records;
        let mut out = Vec::new();
        for (at, why) in &self.sessions.lost {
            out.push(format!(
                "session lost at {} while a path existed: {why}",
                secs(*at)
            ));
        }
        for (at, why) in &self.logins.failed_outside {
            out.push(format!(
                "login failed at {} outside every fault window: {why}",
                secs(*at)
            ));
        }
        for (at, why) in &self.session_opens.failed_outside {
            out.push(format!(
                "session open failed at {} outside every fault window: {why}",
                secs(*at)
            ));
        }
        for (at, why) in &self.scp.failed_outside {
            out.push(format!(
                "scp failed at {} outside every fault window: {why}",
                secs(*at)
            ));
        }
        if r.bytes_corrupted > 0 {
            out.push(format!(
                "{} bytes of session echoes corrupted",
                r.bytes_corrupted
            ));
        }
        for (at, what) in &r.scp_differed {
            out.push(format!("scp at {} changed the data: {what}", secs(*at)));
        }
        for n in 0..2 {
            let (base, after) = (&self.inputs.baseline[n], &self.inputs.after[n]);
            if after.conns > base.conns {
                out.push(format!(
                    "node{n}: CONNS holds {} entries after the load, {} before (leak)",
                    after.conns, base.conns
                ));
            }
            for (client, n_held) in after.held() {
                out.push(format!(
                    "node{n}: SOURCES counts {n_held} for {client} after the load (leak)"
                ));
            }
        }
        for (role, series, v) in self.inputs.samples.counters() {
            if series.contains("pins_restored") || series.contains("reconcile_errors") {
                out.push(format!("{role}: {series} = {v}"));
            }
        }
        for (at, e) in r.fault_errors.iter().chain(&r.churn_errors) {
            out.push(format!("at {}: {e}", secs(*at)));
        }
        out.extend(self.inputs.exited.iter().cloned());
        out
    }

    /// What the soak found beyond its goals: a client held back under its
    /// per-source quota, by a count of the kernel's above what the client
    /// holds (or below zero), or, outside every fault window, for no
    /// reason the soak can read. The soak fails on these.
    pub fn defects(&self) -> Vec<String> {
        let r = &self.inputs.records;
        let mut out = Vec::new();
        for refusal in self.hammer_refused_outside() {
            let Refusal {
                at,
                held,
                kernel,
                how,
            } = &refusal;
            let how = match how {
                Refused::Handshake(e) => format!("its handshake failed ({e})"),
                Refused::Silent => "its handshake completed and no banner came".to_owned(),
                Refused::ClosedBySshd => "sshd closed it".to_owned(),
                Refused::Reset => "it was reset before the banner".to_owned(),
            };
            out.push(format!(
                "the hammer was held back at {} holding {held} connections, under the quota: {how}{}",
                secs(*at),
                kernel.map_or(String::new(), |k| format!(
                    " (the kernel counted {} for it, holding {} open)",
                    k.counted, k.open
                ))
            ));
        }
        for Refusal {
            at, held, kernel, ..
        } in &r.hammer.refused_below_quota
        {
            if let Some(k) = kernel.filter(|k| k.counted > k.open) {
                out.push(format!(
                    "the kernel counted {} connections for the hammer at {} while it held {} open ({held} by the hammer's count): a per-source count above what the client holds",
                    k.counted,
                    secs(*at),
                    k.open
                ));
            }
        }
        out
    }

    /// The hammer's refusals below the quota outside every fault window
    /// that the data path may be to blame for. sshd closing a connection
    /// before its banner is its own limit (MaxStartups), counted in the
    /// summary; a count above the connections held is told apart; a count
    /// of the whole quota of connections still open is right (closes the
    /// hammer made that the pods had not answered yet).
    fn hammer_refused_outside(&self) -> Vec<Refusal> {
        let windows = &self.inputs.records.windows;
        let quota = u64::from(super::bed::CONNS_PER_SOURCE);
        (self.inputs.records.hammer.refused_below_quota.iter())
            .filter(|r| {
                super::tally::place(r.at, windows) == super::tally::Placed::Outside
                    && !r
                        .kernel
                        .is_some_and(|k| k.counted > k.open || k.open >= quota)
            })
            .cloned()
            .collect()
    }

    /// The one-screen summary.
    pub fn summary(&self) -> String {
        let i = &self.inputs;
        let r = &i.records;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "soak: seed {} | load {} | wall {} | {} faults run of {} planned",
            i.seed,
            secs(i.load),
            secs(i.wall),
            r.windows.len(),
            i.plan.len()
        );
        let _ = writeln!(
            s,
            "sessions: {} opened, {} ended by the test, {} lost, {} lost in no-path windows; {} failed to open ({} outside windows)",
            self.sessions.opened,
            self.sessions.ended_by_test,
            self.sessions.lost.len(),
            self.sessions.lost_no_path.len(),
            self.session_opens.tried - self.session_opens.landed,
            self.session_opens.failed_outside.len(),
        );
        let _ = writeln!(
            s,
            "echo bytes: {} checked, {} corrupted",
            r.bytes_checked, r.bytes_corrupted
        );
        let _ = writeln!(
            s,
            "logins: {} tried, {} landed, {} failed inside fault windows, {} outside, {} to jobs the test ended",
            self.logins.tried,
            self.logins.landed,
            self.logins.failed_inside.len(),
            self.logins.failed_outside.len(),
            self.logins.job_ended
        );
        let _ = writeln!(
            s,
            "scp: {} copies, {} checksums equal ({} MiB each way), {} differed, {} failed inside windows, {} outside, {} to jobs the test ended",
            self.scp.tried,
            self.scp.landed - r.scp_differed.len() as u64,
            i.scale.scp_mib,
            r.scp_differed.len(),
            self.scp.failed_inside.len(),
            self.scp.failed_outside.len(),
            self.scp.job_ended
        );
        let h = &r.hammer;
        let _ = writeln!(
            s,
            "flood: {} spoofed SYNs | hammer: {} cycles, {} admitted, {} held at the quota, {} over it admitted, {} refused under it ({} closed by sshd, {} reset, {} silent, {} outside windows)",
            r.flood_sent,
            h.cycles,
            h.admitted,
            h.held_at_quota,
            h.admitted_over_quota,
            h.refused_below_quota.len(),
            (h.refused_below_quota.iter())
                .filter(|r| r.how == Refused::ClosedBySshd)
                .count(),
            (h.refused_below_quota.iter())
                .filter(|r| r.how == Refused::Reset)
                .count(),
            (h.refused_below_quota.iter())
                .filter(|r| r.how == Refused::Silent)
                .count(),
            self.hammer_refused_outside().len()
        );
        let mut inside: std::collections::BTreeMap<String, usize> = Default::default();
        for (_, _, w) in self
            .logins
            .failed_inside
            .iter()
            .chain(&self.scp.failed_inside)
            .chain(&self.session_opens.failed_inside)
        {
            *inside.entry(w.fault.name()).or_default() += 1;
        }
        if !inside.is_empty() {
            let by: Vec<String> = inside.iter().map(|(f, n)| format!("{f} {n}")).collect();
            let _ = writeln!(s, "failures inside windows, by fault: {}", by.join(", "));
        }
        let _ = writeln!(
            s,
            "jobs: {} started, {} ended by churn",
            r.jobs_started, r.jobs_ended
        );
        for (role, rss) in &i.samples.rss {
            let _ = writeln!(
                s,
                "rss {role}: start {} KiB, max {} KiB, end {} KiB",
                rss.start_kib, rss.max_kib, rss.end_kib
            );
        }
        for n in 0..2 {
            let (b, a) = (&i.baseline[n], &i.after[n]);
            let _ = writeln!(
                s,
                "node{n} tables before -> after (settled {}): CONNS {} -> {}, HALF_OPEN {} -> {}, CLAIMS {} -> {}, SOURCES {} -> {} entries, {} not 0",
                i.settled.map_or("never".into(), secs),
                b.conns,
                a.conns,
                b.half_open,
                a.half_open,
                b.claims,
                a.claims,
                b.sources.len(),
                a.sources.len(),
                a.held().len()
            );
        }
        let counters = i.samples.counters();
        if counters.is_empty() {
            let _ = writeln!(s, "watched counters: all 0");
        }
        for (role, series, v) in counters {
            let _ = writeln!(s, "counter {role}: {series} = {v}");
        }
        let failures = self.failures();
        let defects = self.defects();
        for d in &defects {
            let _ = writeln!(s, "DEFECT: {d}");
        }
        if failures.is_empty() {
            let _ = writeln!(
                s,
                "PASS: nothing lost, corrupted or leaked{}",
                if defects.is_empty() {
                    ""
                } else {
                    " (defects above)"
                }
            );
        } else {
            let _ = writeln!(
                s,
                "FAIL: {} problems (seed {}, replay: cargo xtask soak --seconds {} --seed {})",
                failures.len(),
                i.seed,
                i.length.as_secs(),
                i.seed
            );
            for f in failures.iter().take(20) {
                let _ = writeln!(s, "  - {f}");
            }
        }
        if !failures.is_empty() || !defects.is_empty() {
            let _ = writeln!(s, "faults as they ran:");
            for (at, note) in &r.notes {
                let _ = writeln!(s, "  {} {note}", secs(*at));
            }
            let _ = writeln!(s, "logs: {}", i.dir.display());
        }
        s
    }
}

/// `12.3 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
