//! What one run of `bench progs` measured on one build, as JSON (`--record
//! FILE`): each case's runs, and each program as the kernel verified it.
//! The guests of `--kernel` write it into the directory they share with
//! the host, which reads it back.

use std::path::Path;

use anyhow::Context as _;
use aya::programs::ProgramInfo;
use serde::{Deserialize, Serialize};

use super::packets::Program;

#[derive(Debug, Deserialize, Serialize)]
pub struct Record {
    /// `uname -r` of the kernel that ran it.
    pub kernel: String,
    pub load_at_start: String,
    pub load_at_end: String,
    pub cases: Vec<CaseRuns>,
    pub programs: Vec<Verified>,
}

/// One case's ns per packet, run by run (none: skipped, and why).
#[derive(Debug, Deserialize, Serialize)]
pub struct CaseRuns {
    pub what: String,
    pub program: String,
    /// Iterations per test run (1: a batch of one-iteration test runs).
    pub repeat: u32,
    pub ns: Option<Vec<f64>>,
    pub skipped: Option<String>,
}

/// A program as the kernel's verifier left it: the figures that depend on
/// the kernel and the build, not on the machine's speed.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Verified {
    pub program: String,
    /// Instructions the verifier processed, over every path it walked
    /// (`verified_insns`, Linux 5.16+).
    pub insns_processed: Option<u32>,
    /// The program after the verifier's rewrites, in bytes.
    pub xlated_bytes: Option<u32>,
    /// The JIT's machine code, in bytes (every subprogram).
    pub jited_bytes: u32,
}

impl Verified {
    /// The figures of the program pinned at `pin` (a program, not a link).
    pub fn of(pin: &Path, program: Program) -> anyhow::Result<Self> {
        let info = ProgramInfo::from_pin(pin)
            .with_context(|| format!("the program pinned at {}", pin.display()))?;
        Ok(Self {
            program: program.label().to_owned(),
            insns_processed: info.verified_instruction_count(),
            xlated_bytes: info.size_translated(),
            jited_bytes: info.size_jitted(),
        })
    }
}

/// The verifier's figures of one build's programs, as a markdown table.
pub fn print_verified(label: &str, kernel: &str, programs: &[Verified]) {
    println!("{label}'s programs as loaded on {kernel}:");
    println!();
    println!("| program | instructions processed | xlated bytes | jited bytes |");
    println!("| --- | ---: | ---: | ---: |");
    for p in programs {
        println!(
            "| {} | {} | {} | {} |",
            p.program,
            figure(p.insns_processed),
            figure(p.xlated_bytes),
            p.jited_bytes
        );
    }
    println!();
}

/// A figure the kernel may not report: "-" then.
pub fn figure(value: Option<u32>) -> String {
    value.map_or("-".to_owned(), |v| v.to_string())
}

/// `uname -r`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
