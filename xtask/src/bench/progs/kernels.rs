//! `cargo xtask bench progs --kernel 6.1 --kernel 6.12`: the same bench on
//! other kernels, each booted in a VM under emulation as `cargo xtask test
//! --kernel` boots it (`vm/boot.rs`), one release build measured on all.
//!
//! Emulation (QEMU's TCG: no KVM here) makes every instruction many times
//! slower, and not uniformly, so an emulated ns/packet says nothing next to
//! this machine's own. Two things compare: the verifier's figures of each
//! program (instructions processed, xlated and jited bytes), which depend
//! on the kernel and the build only; and the ratio of one kernel's
//! ns/packet to another's, both emulated alike. The kernels boot in turn,
//! round by round (the first kernel first in even rounds, last in odd
//! ones), each boot running the whole bench once; a ratio is the median
//! over the rounds of one round's medians divided, so a slow stretch of
//! this shared machine lands on both kernels of a round.

use std::path::Path;

use anyhow::{Context as _, bail, ensure};

use super::record::{Record, Verified, figure};
use crate::{bench::stats::Summary, vm::boot::Guest};

/// `ssh_fwd::datapath::PRETEND_MISSING_ENV`.
const PRETEND_MISSING: &str = "SSH_FWD_TEST_PRETEND_MISSING";

pub fn run(options: crate::bench::ProgsOptions) -> anyhow::Result<()> {
    let crate::bench::ProgsOptions {
        runs,
        after,
        after_args,
        kernels,
        boots,
        ..
    } = options;
    ensure!(boots > 0, "--boots 0: nothing would be measured");
    let guests = kernels
        .iter()
        .map(|k| Guest::new(k, "bench-progs"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bin = match after {
        Some(bin) => bin,
        None => crate::build_ssh_fwd_profile(true)?,
    };
    // The guest's working directory is not this one.
    let bin = std::fs::canonicalize(&bin).with_context(|| format!("{}", bin.display()))?;
    let xtask = std::env::current_exe().context("locating the xtask binary")?;
    let mut records: Vec<Vec<Record>> = kernels.iter().map(|_| Vec::new()).collect();
    for round in 0..boots {
        for k in 0..guests.len() {
            let i = if round % 2 == 0 {
                k
            } else {
                guests.len() - 1 - k
            };
            let guest = &guests[i];
            println!(
                "==> boot {}/{boots} of {} (emulated): bench progs --runs {runs}",
                round + 1,
                kernels[i]
            );
            let record = boot_once(guest, &xtask, &bin, &after_args, runs, round)
                .with_context(|| format!("kernel {}, boot {}", kernels[i], round + 1))?;
            println!(
                "    {}: load average at start {}, at end {}",
                record.kernel, record.load_at_start, record.load_at_end
            );
            records[i].push(record);
        }
    }
    println!();
    println!("build: {}", bin.display());
    print_verified(&records)?;
    print_ratios(&records, runs);
    Ok(())
}

/// Boots `guest` once to run the bench, and reads back what it recorded.
fn boot_once(
    guest: &Guest,
    xtask: &Path,
    bin: &Path,
    after_args: &[String],
    runs: usize,
    round: usize,
) -> anyhow::Result<Record> {
    let out = &guest.out;
    let json = out.join(format!("boot-{round}.json"));
    let text = out.join(format!("boot-{round}.txt"));
    let args: String = after_args
        .iter()
        .map(|a| format!(" '--after-arg={a}'"))
        .collect();
    // The agent's test-only way to take features as missing (`tcx`: tc
    // through clsact on a kernel that has tcx), passed on into the guest.
    let pretend = std::env::var(PRETEND_MISSING)
        .map(|names| format!("{PRETEND_MISSING}={names} "))
        .unwrap_or_default();
    let status = guest.boot(&format!(
        "{pretend}SSH_FWD_TEST_TIME_SCALE=6 {xtask} bench progs --runs {runs} --after {bin}{args} \
         --record {json} > {text} 2>&1\n",
        xtask = xtask.display(),
        bin = bin.display(),
        json = json.display(),
        text = text.display(),
    ))?;
    let uname = guest.uname()?;
    let Ok(bytes) = std::fs::read(&json) else {
        let said = std::fs::read_to_string(&text).unwrap_or_default();
        let tail: Vec<&str> = said.lines().rev().take(15).collect();
        bail!(
            "the bench on {uname} recorded nothing (vng: {status}); the end of {}:\n{}",
            text.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    };
    serde_json::from_slice(&bytes).with_context(|| format!("reading {}", json.display()))
}

/// The verifier's figures, one column per kernel; they must not differ
/// from boot to boot of one kernel.
fn print_verified(records: &[Vec<Record>]) -> anyhow::Result<()> {
    let first: Vec<&Record> = records.iter().filter_map(|r| r.first()).collect();
    for boots in records {
        for later in boots.iter().skip(1) {
            ensure!(
                later.programs == boots[0].programs,
                "{}: the verifier's figures differ from boot to boot: {:?} against {:?}",
                later.kernel,
                later.programs,
                boots[0].programs
            );
        }
    }
    let kernels: String = first.iter().map(|r| format!(" {} |", r.kernel)).collect();
    let align: String = first.iter().map(|_| " ---: |").collect();
    println!();
    println!("Instructions processed by the verifier / xlated bytes / jited bytes:");
    println!();
    println!("| program |{kernels}");
    println!("| --- |{align}");
    let programs: Vec<&str> = first
        .iter()
        .flat_map(|r| r.programs.iter().map(|p| p.program.as_str()))
        .fold(Vec::new(), |mut names, p| {
            if !names.contains(&p) {
                names.push(p);
            }
            names
        });
    for program in programs {
        let cells: String = first
            .iter()
            .map(|r| {
                let cell = r
                    .programs
                    .iter()
                    .find(|p| p.program == program)
                    .map_or("-".to_owned(), cell);
                format!(" {cell} |")
            })
            .collect();
        println!("| {program} |{cells}");
    }
    Ok(())
}

fn cell(p: &Verified) -> String {
    format!(
        "{} / {} / {}",
        figure(p.insns_processed),
        figure(p.xlated_bytes),
        p.jited_bytes
    )
}

/// Each case's emulated ns/packet on each kernel, and its ratio to the
/// last kernel's.
fn print_ratios(records: &[Vec<Record>], runs: usize) {
    let Some(last) = records.last().and_then(|r| r.first()) else {
        return;
    };
    let names: Vec<&str> = records.iter().map(|r| r[0].kernel.as_str()).collect();
    let base = names.last().copied().unwrap_or_default();
    let mut header = String::from("| case | program |");
    let mut align = String::from("| --- | --- |");
    for name in &names {
        header.push_str(&format!(" {name} ns (emulated) |"));
        align.push_str(" ---: |");
    }
    for name in &names[..names.len() - 1] {
        header.push_str(&format!(" {name} / {base} |"));
        align.push_str(" ---: |");
    }
    println!();
    println!("{header}\n{align}");
    for (c, case) in last.cases.iter().enumerate() {
        // Each boot's median over its runs, by kernel.
        let medians: Vec<Vec<f64>> = records
            .iter()
            .map(|boots| {
                boots
                    .iter()
                    .filter_map(|r| r.cases.get(c)?.ns.as_deref().and_then(Summary::of))
                    .map(|s| s.median)
                    .collect()
            })
            .collect();
        let mut line = format!("| {} | {} |", case.what, case.program);
        for m in &medians {
            let cell = Summary::of(m).map_or("-".to_owned(), |s| {
                format!("{:.0} ±{:.0}%", s.median, s.spread_pct())
            });
            line.push_str(&format!(" {cell} |"));
        }
        let base_medians = medians.last().cloned().unwrap_or_default();
        for m in &medians[..medians.len() - 1] {
            let ratios: Vec<f64> = m
                .iter()
                .zip(&base_medians)
                .filter(|(_, b)| **b > 0.0)
                .map(|(a, b)| a / b)
                .collect();
            let cell = Summary::of(&ratios).map_or("-".to_owned(), |s| {
                format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max)
            });
            line.push_str(&format!(" {cell} |"));
        }
        println!("{line}");
    }
    println!();
    println!(
        "ns (emulated): the median over the boots of each boot's median of {runs} runs (±: half \
         the min-max range of the boots' medians); under emulation, comparable only with each \
         other. Ratio: the median over the rounds of one round's medians divided (in \
         parentheses: the lowest and highest round)."
    );
}
