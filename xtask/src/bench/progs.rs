//! `cargo xtask bench progs`: what each kernel program costs per packet, by
//! case, through BPF_PROG_TEST_RUN (`bpftool prog run ... repeat N`), run
//! inside a bench bed's node namespace so the route lookups see its routes
//! and neighbours - the Katran way of finding where a data path spends time.
//!
//! With `--before BIN`, an earlier build is measured beside this one in the
//! same run: each build gets a bed of its own (`progs/subject.rs`), and
//! every case runs alternately on the two, run by run, so the load of this
//! shared machine lands on both alike. The cases (`progs/cases.rs`) cover
//! both data-path layouts: before connection tracking (v3) and with it
//! (v4), both families, and the tc and XDP ingress programs; a case a
//! build does not have (by its layout, or a feature it lacks: IPv6, the
//! IPv6 frontend across nodes, the guard, an XDP program) is skipped on
//! that build, never timed: shown as "-", and listed with the reason under
//! the table.

mod agent;
mod bpftool;
mod cases;
mod kernels;
mod packets;
mod record;
mod self_map;
mod subject;
pub mod test_run;

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context as _, bail, ensure};

use self::{
    cases::Case,
    packets::{Program, Step},
    record::{CaseRuns, Record},
    subject::Subject,
};
use super::stats::Summary;

/// Instances of a one-iteration case timed per run.
const BATCH: usize = 20;
/// Fresh client ports the one-iteration cases may take (41000-65535).
const MAX_INSTANCES: usize = 24_000;

pub fn run(options: super::ProgsOptions) -> anyhow::Result<()> {
    if !options.kernels.is_empty() {
        return kernels::run(options);
    }
    let super::ProgsOptions {
        runs,
        before,
        after,
        after_args,
        record,
        ..
    } = options;
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    ensure!(
        runs * (BATCH + 1) <= MAX_INSTANCES,
        "--runs {runs}: at most {} (the fresh client ports of the one-iteration cases run out)",
        MAX_INSTANCES / (BATCH + 1)
    );
    let after = match after {
        Some(bin) => bin,
        None => crate::build_ssh_fwd_profile(true)?,
    };
    let mut builds: Vec<(&'static str, PathBuf, Vec<String>)> = Vec::new();
    if let Some(before) = before {
        builds.push(("before", before, Vec::new()));
    }
    builds.push(("after", after, after_args));
    ctrlc::set_handler(|| {
        super::cleanup::after_interrupt();
        std::process::exit(130);
    })?;
    let load_at_start = load_average();
    let subjects = builds
        .iter()
        .map(|(label, bin, args)| {
            println!(
                "==> setting up {label}: {} {}",
                bin.display(),
                args.join(" ")
            );
            let s =
                Subject::new(label, bin, args).with_context(|| format!("setting up {label}"))?;
            println!("    {label}: layout {:?}; {}", s.layout, s.features);
            if s.clsact {
                println!(
                    "    {label}: tc through clsact (no tcx): redirects into the pod are \
                     ordinary ones, not into its peer"
                );
            }
            Ok(s)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    for case in cases::all() {
        println!("==> {}", case.what);
        rows.push(measure(&subjects, &case, runs)?);
    }
    // No agent drains the connection log's ring during the runs: a full
    // ring would time the cheaper path of a lost record.
    for s in &subjects {
        let lost = s.counters()?.get("events_lost").copied().unwrap_or(0);
        ensure!(
            lost == 0,
            "{}: {lost} connection-log records found the ring full: fewer --runs",
            s.label
        );
    }
    println!();
    for (s, (_, bin, args)) in subjects.iter().zip(&builds) {
        println!(
            "{}: {} {}(layout {:?})",
            s.label,
            bin.display(),
            args.iter().map(|a| format!("{a} ")).collect::<String>(),
            s.layout
        );
    }
    let load_at_end = load_average();
    println!("load average (1, 5, 15 min) at start: {load_at_start}; at end: {load_at_end}");
    println!();
    print_table(&subjects, &rows);
    let kernel = record::kernel_release();
    println!();
    let mut verified = Vec::new();
    for s in &subjects {
        verified = s.verified()?;
        record::print_verified(s.label, &kernel, &verified);
    }
    if let Some(path) = record {
        let record = Record {
            kernel,
            load_at_start,
            load_at_end,
            cases: rows.iter().map(|r| r.runs_of(subjects.len() - 1)).collect(),
            programs: verified,
        };
        std::fs::write(&path, serde_json::to_vec_pretty(&record)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// One case's ns per iteration on each build (`None`: not a case there).
struct Row {
    what: &'static str,
    program: Program,
    runs: usize,
    repeat: u32,
    ns: Vec<Option<Vec<f64>>>,
    /// Why a build skipped the case, by build.
    skipped: Vec<Option<String>>,
}

impl Row {
    /// The runs of build `i` (the last is "after").
    fn runs_of(&self, i: usize) -> CaseRuns {
        CaseRuns {
            what: self.what.to_owned(),
            program: self.program.label().to_owned(),
            repeat: self.repeat,
            ns: self.ns[i].clone(),
            skipped: self.skipped[i].clone(),
        }
    }
}

fn measure(subjects: &[Subject], case: &Case, runs: usize) -> anyhow::Result<Row> {
    let first = plan(case, 0)?;
    let program = first.steps[first.timed[0]].0.program;
    let skipped: Vec<Option<String>> = subjects.iter().map(|s| s.skips(&first.steps)).collect();
    for (s, why) in subjects.iter().zip(&skipped) {
        if let Some(why) = why {
            println!("    skipped on {}: {why}", s.label);
        }
    }
    let present: Vec<bool> = skipped.iter().map(Option::is_none).collect();
    let mut counters_before = Vec::new();
    for (s, _) in subjects.iter().zip(&present).filter(|(_, p)| **p) {
        counters_before.push(s.counters()?);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); subjects.len()];
    for run in 0..runs {
        let plan = plan(case, run)?;
        // Alternate which build goes first, so that neither always runs
        // right after the other.
        for k in 0..subjects.len() {
            let i = (run + k) % subjects.len();
            if !present[i] {
                continue;
            }
            let times = subjects[i].run(&plan.steps)?;
            let timed: Vec<f64> = plan.timed.iter().map(|&t| times[t]).collect();
            ns[i].push(Summary::of(&timed).context("no timed test run")?.median);
        }
    }
    let mut counted = counters_before.into_iter();
    for (s, _) in subjects.iter().zip(&present).filter(|(_, p)| **p) {
        let before = counted.next().unwrap_or_default();
        check_counters(s, &before, &s.counters()?, &first, runs)
            .with_context(|| format!("{}: {}", s.label, case.what))?;
    }
    Ok(Row {
        what: case.what,
        program,
        runs,
        repeat: case.repeat,
        ns: ns
            .into_iter()
            .zip(&present)
            .map(|(v, p)| p.then_some(v))
            .collect(),
        skipped,
    })
}

/// The test runs of one run of a case, all in one process, and which of
/// them are timed.
struct Plan {
    steps: Vec<(Step, u32)>,
    timed: Vec<usize>,
}

/// A case of `repeat` iterations: its setup packets, or else its own
/// packet once (either way its program and the maps it reads are warm, as
/// on a node carrying traffic), then the timed test run. A case of one
/// iteration: [`BATCH`] instances of it back to back, each with fresh
/// state, after one untimed; the run's figure is their median.
fn plan(case: &Case, run: usize) -> anyhow::Result<Plan> {
    let mut plan = Plan {
        steps: Vec::new(),
        timed: Vec::new(),
    };
    if case.repeat > 1 {
        let (setup, timed) = (case.packets)(u16::try_from(run)?);
        plan.steps.extend(setup.into_iter().map(|s| (s, 1)));
        if plan.steps.is_empty() {
            plan.steps.push((timed.clone(), 1));
        }
        plan.timed.push(plan.steps.len());
        plan.steps.push((timed, case.repeat));
        return Ok(plan);
    }
    for b in 0..=BATCH {
        let instance = u16::try_from(run * (BATCH + 1) + b)?;
        let (setup, timed) = (case.packets)(instance);
        plan.steps.extend(setup.into_iter().map(|s| (s, 1)));
        if b > 0 {
            plan.timed.push(plan.steps.len());
        }
        plan.steps.push((timed, 1));
    }
    Ok(plan)
}

/// Every counter the case's packets name grew by exactly one per packet
/// (`first` is one run's plan; every run's counts the same): the programs
/// took the branches the case says they take.
fn check_counters(
    subject: &Subject,
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    first: &Plan,
    runs: usize,
) -> anyhow::Result<()> {
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for (step, times) in &first.steps {
        let effect = step.expect.on(subject.layout).context("no effect")?;
        for &name in effect.counts {
            let name = match name {
                "redirected_peer" if subject.clsact => "redirected",
                other => other,
            };
            *expected.entry(name).or_default() += u64::from(*times) * runs as u64;
        }
    }
    for (name, want) in expected {
        let grown = after
            .get(name)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(name).copied().unwrap_or(0));
        ensure!(
            grown == want,
            "counter {name} grew by {grown}, expected {want}: a program took another branch \
             than the case measures"
        );
    }
    Ok(())
}

fn print_table(subjects: &[Subject], rows: &[Row]) {
    let paired = subjects.len() == 2;
    let mut header = String::from("| case | program | runs × iterations |");
    let mut align = String::from("| --- | --- | ---: |");
    for s in subjects {
        header.push_str(&format!(" {} ns/packet |", s.label));
        align.push_str(" ---: |");
    }
    if paired {
        header.push_str(" difference |");
        align.push_str(" ---: |");
    }
    println!("{header}\n{align}");
    for row in rows {
        let per_run = if row.repeat == 1 {
            format!("{BATCH} × 1")
        } else {
            row.repeat.to_string()
        };
        let mut line = format!(
            "| {} | {} | {} × {per_run} |",
            row.what,
            row.program.label(),
            row.runs
        );
        for ns in &row.ns {
            let cell = ns
                .as_deref()
                .and_then(Summary::of)
                .map_or("-".to_owned(), |s| {
                    format!("{:.0} ±{:.0}%", s.median, s.spread_pct())
                });
            line.push_str(&format!(" {cell} |"));
        }
        if paired {
            line.push_str(&format!(" {} |", difference(&row.ns[0], &row.ns[1])));
        }
        println!("{line}");
    }
    println!();
    println!(
        "ns/packet: median over the runs (±: half the min-max range); a run of R × 1 is the \
         median of R back-to-back test runs of one iteration, each on fresh state. Difference: \
         the median of the runs' paired differences (after - before) and ratios, each \
         before/after pair taken moments apart. -: skipped on that build, never measured."
    );
    let skips: Vec<String> = rows
        .iter()
        .flat_map(|row| {
            subjects.iter().zip(&row.skipped).filter_map(|(s, why)| {
                let why = why.as_deref()?;
                Some(format!(
                    "- {} skipped \"{}\" ({}): {why}",
                    s.label,
                    row.what,
                    row.program.label()
                ))
            })
        })
        .collect();
    if !skips.is_empty() {
        println!();
        println!("Skipped:");
        for line in skips {
            println!("{line}");
        }
    }
}

/// The median of the paired differences and ratios, or "-" when the case
/// exists in only one build.
fn difference(before: &Option<Vec<f64>>, after: &Option<Vec<f64>>) -> String {
    let (Some(before), Some(after)) = (before, after) else {
        return "-".to_owned();
    };
    let pairs = before.iter().zip(after);
    let diffs: Vec<f64> = pairs.clone().map(|(b, a)| a - b).collect();
    let ratios: Vec<f64> = pairs
        .filter(|(b, _)| **b > 0.0)
        .map(|(b, a)| a / b)
        .collect();
    match (Summary::of(&diffs), Summary::of(&ratios)) {
        (Some(d), Some(r)) => format!("{:+.0} ({:+.0}%)", d.median, (r.median - 1.0) * 100.0),
        _ => "-".to_owned(),
    }
}

/// `/proc/loadavg`'s three averages: the machine is shared.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
