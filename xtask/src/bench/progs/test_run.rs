//! `xtask bench-helper test-run --plan FILE`: the test runs of one bench
//! run, back to back in one process inside the node's namespace (the route
//! lookups see its routes). A packet's single iteration timed right after
//! the untimed ones before it is a warm one, as on a node carrying traffic;
//! timed alone in a fresh process it costs tens of microseconds of cold
//! caches, which would drown what one iteration does.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Context as _;
use aya::programs::{SchedClassifier, TestRun as _, TestRunOptions};
use serde::{Deserialize, Serialize};

/// One test run: a pinned tc program, the frame, iterations.
#[derive(Debug, Deserialize, Serialize)]
pub struct Run {
    pub program: PathBuf,
    pub frame: Vec<u8>,
    pub repeat: u32,
}

/// What the kernel reported: the verdict of the last iteration, and the
/// average ns per iteration.
#[derive(Debug, Deserialize, Serialize)]
pub struct Outcome {
    pub verdict: u32,
    pub ns: u64,
}

/// Room for the largest frame a program may grow (the frontend option).
const DATA_OUT: usize = 4096;

/// Runs the plan's test runs in order; prints their outcomes as JSON.
pub fn serve(plan: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read(plan).with_context(|| format!("reading {}", plan.display()))?;
    let runs: Vec<Run> = serde_json::from_slice(&text).context("the test-run plan")?;
    let mut programs: BTreeMap<&PathBuf, SchedClassifier> = BTreeMap::new();
    for run in &runs {
        if !programs.contains_key(&run.program) {
            let program = SchedClassifier::from_pin(&run.program).with_context(|| {
                format!("opening the program pinned at {}", run.program.display())
            })?;
            programs.insert(&run.program, program);
        }
    }
    let mut out = vec![0u8; DATA_OUT];
    let mut outcomes = Vec::with_capacity(runs.len());
    for run in &runs {
        let program = programs
            .get(&run.program)
            .context("a program opened above")?;
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(&run.frame),
                data_out: Some(&mut out),
                repeat: run.repeat,
                ..TestRunOptions::new()
            })
            .with_context(|| format!("test run of {}", run.program.display()))?;
        outcomes.push(Outcome {
            verdict: result.return_value,
            ns: u64::try_from(result.duration.as_nanos())?,
        });
    }
    println!("{}", serde_json::to_string(&outcomes)?);
    Ok(())
}
