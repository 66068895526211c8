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
//! (v4); a case one layout does not have is shown as "-".

mod bpftool;
mod cases;
mod packets;
mod subject;
pub mod test_run;

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context as _, bail, ensure};

use self::{
    cases::Case,
    packets::{Program, Step},
    subject::Subject,
};
use super::stats::Summary;

/// One-iteration cases run this many times more often: a single
/// iteration's time is noisier.
const ONE_ITERATION_RUNS: usize = 4;

pub fn run(runs: usize, before: Option<PathBuf>, after: Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    let after = match after {
        Some(bin) => bin,
        None => crate::build_ssh_fwd_profile(true)?,
    };
    let mut builds: Vec<(&'static str, PathBuf)> = Vec::new();
    if let Some(before) = before {
        builds.push(("before", before));
    }
    builds.push(("after", after));
    ctrlc::set_handler(|| {
        super::cleanup::after_interrupt();
        std::process::exit(130);
    })?;
    let load_at_start = load_average();
    let subjects = builds
        .iter()
        .map(|(label, bin)| {
            println!("==> setting up {label}: {}", bin.display());
            Subject::new(label, bin).with_context(|| format!("setting up {label}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    for case in cases::all() {
        println!("==> {}", case.what);
        rows.push(measure(&subjects, &case, runs)?);
    }
    println!();
    for (s, (_, bin)) in subjects.iter().zip(&builds) {
        println!("{}: {} (layout {:?})", s.label, bin.display(), s.layout);
    }
    println!(
        "load average (1, 5, 15 min) at start: {load_at_start}; at end: {}",
        load_average()
    );
    println!();
    print_table(&subjects, &rows);
    Ok(())
}

/// One case's ns per iteration on each build (`None`: not a case there).
struct Row {
    what: &'static str,
    program: Program,
    runs: usize,
    repeat: u32,
    ns: Vec<Option<Vec<f64>>>,
}

fn measure(subjects: &[Subject], case: &Case, runs: usize) -> anyhow::Result<Row> {
    let runs = if case.repeat == 1 {
        runs * ONE_ITERATION_RUNS
    } else {
        runs
    };
    let (setup, timed) = (case.packets)(0);
    let present: Vec<bool> = subjects
        .iter()
        .map(|s| timed.expect.on(s.layout).is_some())
        .collect();
    let mut counters_before = Vec::new();
    for (s, _) in subjects.iter().zip(&present).filter(|(_, p)| **p) {
        counters_before.push(s.counters()?);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); subjects.len()];
    for run in 0..runs {
        // Alternate which build goes first, so that neither always runs
        // right after the other.
        for k in 0..subjects.len() {
            let i = (run + k) % subjects.len();
            if !present[i] {
                continue;
            }
            let (setup, timed) = (case.packets)(u16::try_from(run)?);
            let steps = steps_of_a_run(&setup, &timed, case.repeat);
            let times = subjects[i].run(&steps)?;
            ns[i].push(times.last().copied().context("no test run")?);
        }
    }
    let mut counted = counters_before.into_iter();
    for (s, _) in subjects.iter().zip(&present).filter(|(_, p)| **p) {
        let before = counted.next().unwrap_or_default();
        check_counters(
            s,
            &before,
            &s.counters()?,
            &setup,
            &timed,
            runs,
            case.repeat,
        )
        .with_context(|| format!("{}: {}", s.label, case.what))?;
    }
    Ok(Row {
        what: case.what,
        program: timed.program,
        runs,
        repeat: case.repeat,
        ns: ns
            .into_iter()
            .zip(&present)
            .map(|(v, p)| p.then_some(v))
            .collect(),
    })
}

/// The test runs of one run of a case, the timed one last. Before it, the
/// case's setup packets, or else its own packet once: either way its
/// program and the maps it reads are warm, as on a node carrying traffic.
fn steps_of_a_run<'a>(setup: &'a [Step], timed: &'a Step, repeat: u32) -> Vec<(&'a Step, u32)> {
    let mut steps: Vec<(&Step, u32)> = setup.iter().map(|s| (s, 1)).collect();
    if steps.is_empty() {
        steps.push((timed, 1));
    }
    steps.push((timed, repeat));
    steps
}

/// Every counter the case's packets name grew by exactly one per packet:
/// the programs took the branches the case says they take.
fn check_counters(
    subject: &Subject,
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    setup: &[Step],
    timed: &Step,
    runs: usize,
    repeat: u32,
) -> anyhow::Result<()> {
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for (step, times) in steps_of_a_run(setup, timed, repeat) {
        let effect = step.expect.on(subject.layout).context("no effect")?;
        for name in effect.counts {
            *expected.entry(name).or_default() += u64::from(times) * runs as u64;
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
        let mut line = format!(
            "| {} | {} | {} × {} |",
            row.what,
            row.program.label(),
            row.runs,
            row.repeat
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
        "ns/packet: median over the runs (±: half the min-max range); difference: the median of \
         the runs' paired differences (after - before) and ratios, each before/after pair taken \
         moments apart."
    );
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
