//! `xtask bench-helper test-run --plan FILE`: the test runs of one bench
//! run, back to back in one process inside the node's namespace (the route
//! lookups see its routes), of tc and XDP programs alike. A packet's single iteration timed right after
//! the untimed ones before it is a warm one, as on a node carrying traffic;
//! timed alone in a fresh process it costs tens of microseconds of cold
//! caches, which would drown what one iteration does.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use aya::programs::{ProgramInfo, ProgramType, SchedClassifier, TestRun as _, TestRunOptions};
use serde::{Deserialize, Serialize};

/// One test run: a pinned tc or XDP program, the frame, iterations.
#[derive(Debug, Deserialize, Serialize)]
pub struct Run {
    pub program: PathBuf,
    /// The program is an XDP one (else tc).
    pub xdp: bool,
    pub frame: Vec<u8>,
    pub repeat: u32,
    /// The interface the packet arrived on (the skb's or the XDP frame's
    /// `ingress_ifindex`), by name in the node's namespace; none: 0.
    pub arrived_on: Option<String>,
    /// The interface a tc program runs on (the skb's `ifindex`: where a tc
    /// ingress program sees the packet arrive); none: `lo`.
    pub runs_on: Option<String>,
    /// The pinned `CROSS_NODE_KEY` and the key to write to it before the
    /// run (zeros: none), outside the timed part.
    pub cross_node_key: Option<(PathBuf, [u64; 2])>,
}

/// Opens the program pinned at `path` for test runs, once it is of the
/// type the plan says. aya 0.14 opens no XDP pin as `Xdp` from outside
/// (`Xdp::from_pin` takes an attach type the crate does not export), and
/// a test run is the same syscall on the program's fd whatever aya calls
/// the program: the kernel runs the test run of the program's own type
/// (an XDP program gets an `xdp_md` and an XDP frame). So every pin opens
/// as a `SchedClassifier`.
fn open(path: &Path, xdp: bool) -> anyhow::Result<SchedClassifier> {
    let opening = || format!("opening the program pinned at {}", path.display());
    let kind = if xdp {
        ProgramType::Xdp
    } else {
        ProgramType::SchedClassifier
    };
    let info = ProgramInfo::from_pin(path).with_context(opening)?;
    anyhow::ensure!(
        info.program_type() == kind.into(),
        "the program pinned at {} is not of type {kind:?}",
        path.display()
    );
    SchedClassifier::from_pin(path).with_context(opening)
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
pub fn serve(plan: &Path) -> anyhow::Result<()> {
    let text = std::fs::read(plan).with_context(|| format!("reading {}", plan.display()))?;
    let runs: Vec<Run> = serde_json::from_slice(&text).context("the test-run plan")?;
    let mut programs: BTreeMap<&PathBuf, SchedClassifier> = BTreeMap::new();
    for run in &runs {
        if !programs.contains_key(&run.program) {
            programs.insert(&run.program, open(&run.program, run.xdp)?);
        }
    }
    let mut contexts = Vec::with_capacity(runs.len());
    let index = |name: &Option<String>| name.as_deref().map_or(Ok(0), ifindex);
    for run in &runs {
        contexts.push(if run.xdp {
            xdp_ctx(run.frame.len(), index(&run.arrived_on)?)?.to_vec()
        } else {
            skb_ctx(index(&run.arrived_on)?, index(&run.runs_on)?).to_vec()
        });
    }
    let mut out = vec![0u8; DATA_OUT];
    let mut outcomes = Vec::with_capacity(runs.len());
    for (run, ctx) in runs.iter().zip(&contexts) {
        if let Some((map, key)) = &run.cross_node_key {
            write_key(map, *key)?;
        }
        let options = TestRunOptions {
            data_in: Some(&run.frame),
            data_out: Some(&mut out),
            ctx_in: Some(ctx),
            repeat: run.repeat,
            ..TestRunOptions::new()
        };
        let result = programs
            .get(&run.program)
            .context("a program opened above")?
            .test_run(options)
            .with_context(|| format!("test run of {}", run.program.display()))?;
        outcomes.push(Outcome {
            verdict: result.return_value,
            ns: u64::try_from(result.duration.as_nanos())?,
        });
    }
    println!("{}", serde_json::to_string(&outcomes)?);
    Ok(())
}

/// `struct xdp_md` for a frame of `len` bytes (`data_end`) that arrived on
/// the device `ingress_ifindex` (0: `lo`).
fn xdp_ctx(len: usize, ingress_ifindex: u32) -> anyhow::Result<[u8; 24]> {
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&u32::try_from(len)?.to_ne_bytes());
    ctx[12..16].copy_from_slice(&ingress_ifindex.to_ne_bytes());
    Ok(ctx)
}

/// `struct __sk_buff` up to `ifindex`, the part a test run may set: the
/// device the packet arrived on and the one it is on; `ifindex` 0 leaves
/// the skb on `lo`.
fn skb_ctx(ingress_ifindex: u32, ifindex: u32) -> [u8; 44] {
    let mut ctx = [0u8; 44];
    ctx[36..40].copy_from_slice(&ingress_ifindex.to_ne_bytes());
    ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    ctx
}

/// The index of interface `name` in this process's network namespace
/// (not sysfs: it shows the namespace it was mounted in).
fn ifindex(name: &str) -> anyhow::Result<u32> {
    let c_name = std::ffi::CString::new(name).context("an interface name with a NUL byte")?;
    // SAFETY: a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    anyhow::ensure!(
        index != 0,
        "no interface {name} in the node's namespace: {}",
        std::io::Error::last_os_error()
    );
    Ok(index)
}

/// Writes `key` to the pinned `CROSS_NODE_KEY` array at `map`.
fn write_key(map: &Path, key: [u64; 2]) -> anyhow::Result<()> {
    let data =
        aya::maps::MapData::from_pin(map).with_context(|| format!("opening {}", map.display()))?;
    let mut array: aya::maps::Array<_, [u64; 2]> =
        aya::maps::Array::try_from(aya::maps::Map::Array(data))
            .with_context(|| format!("{} as an array", map.display()))?;
    array
        .set(0, key, 0)
        .with_context(|| format!("writing {}", map.display()))
}
