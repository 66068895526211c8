//! One ssh-fwd build's data path, ready for test runs: a bench bed of its
//! own, with the build's agent run to load, attach and fill the maps, then
//! stopped. The data path stays pinned and needs no agent; with none, no
//! resync undoes what the bench adds to the maps (`self_map.rs`) and no
//! sweep ends its connections.
//!
//! The agent runs twice on one bpffs: first in XDP mode, for the XDP
//! ingress program, which the bench pins before the second run, in tc
//! mode, replaces its link; the second adopts the first's maps, so both
//! programs' test runs read and write the same tables (checked by the
//! maps' ids). Both runs get the IPv6 mappings beside the IPv4 ones (an
//! agent makes its IPv6 tables at full size only where IPv6 is served);
//! the first falls back to IPv4 only for a build without IPv6, which then
//! pins no `FRONTENDS6`, and the second gets the IPv4 ones alone.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use ssh_fwd_tests::{Bpffs, cmd, topology::EXT_IFACE};

use super::{
    agent::{self, Agent},
    bpftool::{link, pin_program, pinned_map_ids, version_dir},
    cases::{self, Established},
    packets::{Features, Layout, Program, Step},
    record::Verified,
    self_map, test_run,
};
use crate::bench::bed::{self, Bed, CLUSTER_IFACE, POD_IFACE};

pub struct Subject {
    pub label: &'static str,
    pub layout: Layout,
    /// What the build has beside its layout.
    pub features: Features,
    /// The tc programs are in clsact filters (a kernel without tcx): the
    /// pod's interface then has a qdisc, and a redirect into the pod is
    /// an ordinary one, never into its peer.
    pub clsact: bool,
    bin: PathBuf,
    /// The programs, pinned for the test runs, indexed by [`Program`]
    /// (none: the build's agent pinned no such link).
    pins: [Option<PathBuf>; 4],
    work: tempfile::TempDir,
    /// The pinned `CROSS_NODE_KEY` the bed writes the cluster's key to
    /// (none on builds without claims, which the bed gives no key).
    key_map: Option<PathBuf>,
    // Dropped in this order: the pins (teardown), then the namespaces.
    bpffs: Bpffs,
    bed: Bed,
}

/// The interfaces a step's packet arrived on and is on: the external one
/// for a packet from outside; the pod's for a reply (the data path
/// believes a pod's segments only from the pod's own interface), which the
/// reply program sees arrive there.
fn interfaces(step: &Step) -> (Option<&'static str>, Option<&'static str>) {
    match step.program {
        _ if step.from_outside => (Some(EXT_IFACE), None),
        _ if step.from_another_node => (Some(CLUSTER_IFACE), Some(CLUSTER_IFACE)),
        Program::Ingress | Program::IngressXdp => (None, None),
        Program::Reply => (Some(POD_IFACE), Some(POD_IFACE)),
        Program::Egress => (Some(POD_IFACE), None),
    }
}

impl Subject {
    pub fn new(label: &'static str, bin: &Path, args: &[String]) -> anyhow::Result<Self> {
        // The harness's `Bpffs` tears down with `SSH_FWD_BIN`: this build's
        // now, and again when it is dropped (see `Drop`).
        // SAFETY: the benchmark runs on one thread.
        unsafe { std::env::set_var("SSH_FWD_BIN", bin) };
        let bed = Bed::new()?;
        let bpffs = Bpffs::new()?;
        crate::bench::cleanup::remember_bpffs(bpffs.path());
        let work = tempfile::tempdir()?;
        let agent = Agent::new(&bed, &bpffs, bin, args, work.path())?;
        let mut features = Features {
            guard: agent.guarded(),
            ..Features::default()
        };
        let mut pins: [Option<PathBuf>; 4] = Default::default();
        let (xdp_pin, xdp_maps) = pin_xdp(&agent, label)?.unzip();
        pins[Program::IngressXdp as usize] = xdp_pin;
        features.xdp = pins[Program::IngressXdp as usize].is_some();
        let version_dir = version_dir(bpffs.path())?;
        let maps = version_dir.join("maps");
        features.ipv6 = maps.join("FRONTENDS6").exists();
        let mut mappings = agent::mappings4();
        let mut exchanges = vec![agent::echo_frontend()];
        if features.ipv6 {
            mappings.extend(agent::mappings6());
            exchanges.push(agent::echo_frontend6());
        }
        agent.run_once("tc", &mappings, &exchanges)?;
        // The XDP program holds the maps it was loaded with: the ones
        // pinned then, which the second agent must have adopted.
        let tc_maps = pinned_map_ids(&maps)?;
        for (name, id) in xdp_maps.iter().flatten() {
            ensure!(
                tc_maps.get(name) == Some(id),
                "{label}: the agent in tc mode pinned another {name} than the one the XDP \
                 program was loaded with: the XDP cases would not see the bench's state"
            );
        }
        let layout =
            layout(&version_dir).with_context(|| format!("{label} ({})", bin.display()))?;
        let clsact = link(&version_dir, Program::Ingress)?
            .to_string_lossy()
            .ends_with("-clsact");
        for program in [Program::Ingress, Program::Reply, Program::Egress] {
            let link = link(&version_dir, program)?;
            pins[program as usize] = Some(pin_program(&link, bpffs.path(), program)?);
        }
        let mut subject = Self {
            label,
            layout,
            features,
            clsact,
            bin: bin.to_owned(),
            pins,
            work,
            bpffs,
            bed,
            key_map: Some(maps.join("CROSS_NODE_KEY"))
                .filter(|m| maps.join("CLAIMS").exists() && m.exists()),
        };
        self_map::write(&subject.bed, &maps, features)?;
        subject.establish()?;
        if features.ipv6 {
            subject.features.cross_node6 = subject.learns_frontend6()?;
        }
        Ok(subject)
    }

    /// Why this build skips a case of these steps; `None`: it runs it.
    pub fn skips(&self, steps: &[(Step, u32)]) -> Option<String> {
        steps.iter().find_map(|(step, _)| {
            if step.expect.on(self.layout).is_none() {
                return Some(format!("layout {:?} has no such case", self.layout));
            }
            self.features.lacking(&step.needs).map(str::to_owned)
        })
    }

    /// Runs each step through its program the given number of times on one
    /// skb, in one process, checks the verdicts this layout must give, and
    /// returns each step's ns per iteration.
    pub fn run(&self, steps: &[(Step, u32)]) -> anyhow::Result<Vec<f64>> {
        let outcomes = self.test_runs(steps)?;
        steps
            .iter()
            .zip(outcomes)
            .map(|((step, _), outcome)| {
                let effect = step.expect.on(self.layout).with_context(|| {
                    format!(
                        "layout {:?} has no expected effect for this packet",
                        self.layout
                    )
                })?;
                ensure!(
                    u64::from(outcome.verdict) == effect.verdict,
                    "{} ({}): {} answered {}, expected {} - the bed is not set up as the case \
                     assumes",
                    self.label,
                    self.bin.display(),
                    step.program.name(),
                    outcome.verdict,
                    effect.verdict
                );
                Ok(outcome.ns as f64)
            })
            .collect()
    }

    /// The test runs of `steps`, whatever their verdicts.
    fn test_runs(&self, steps: &[(Step, u32)]) -> anyhow::Result<Vec<test_run::Outcome>> {
        let plan = steps
            .iter()
            .map(|(step, repeat)| {
                let program = self.pins[step.program as usize].clone().with_context(|| {
                    format!("{}: no {} pinned", self.label, step.program.name())
                })?;
                Ok(test_run::Run {
                    program,
                    xdp: step.program.is_xdp(),
                    frame: step.frame.clone(),
                    repeat: *repeat,
                    arrived_on: interfaces(step).0.map(str::to_owned),
                    runs_on: interfaces(step).1.map(str::to_owned),
                    cross_node_key: self.key_map.clone().map(|map| {
                        let key = if step.keyless {
                            [0, 0]
                        } else {
                            cases::CROSS_NODE_KEY
                        };
                        (map, key)
                    }),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let plan_path = self.work.path().join("plan.json");
        std::fs::write(&plan_path, serde_json::to_vec(&plan)?)?;
        let text = cmd::run(
            bed::helper(&self.bed.node)?
                .args(["test-run", "--plan"])
                .arg(&plan_path),
        )?;
        let outcomes: Vec<test_run::Outcome> =
            serde_json::from_str(&text).with_context(|| format!("the test runs said {text:?}"))?;
        ensure!(
            outcomes.len() == steps.len(),
            "{} test runs for {} steps",
            outcomes.len(),
            steps.len()
        );
        Ok(outcomes)
    }

    /// Each pinned program as the kernel's verifier left it.
    pub fn verified(&self) -> anyhow::Result<Vec<Verified>> {
        [
            Program::Ingress,
            Program::Reply,
            Program::Egress,
            Program::IngressXdp,
        ]
        .into_iter()
        .filter_map(|p| Some((self.pins[p as usize].as_ref()?, p)))
        .map(|(pin, p)| Verified::of(pin, p))
        .collect()
    }

    /// The data path's outcome counters, by name (`ssh-fwd list counters`).
    pub fn counters(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let all = self.list("counters")?;
        let rows = all
            .as_object()
            .context("`list counters` is not a JSON object")?;
        Ok(rows
            .iter()
            .map(|(name, row)| (name.clone(), row["packets"].as_u64().unwrap_or(0)))
            .collect())
    }

    fn list(&self, what: &str) -> anyhow::Result<Value> {
        let text = cmd::run(
            Command::new(&self.bin)
                .args(["list", what, "-o", "json", "--bpffs"])
                .arg(self.bpffs.path()),
        )?;
        serde_json::from_str(&text).with_context(|| format!("`ssh-fwd list {what}` said {text:?}"))
    }

    /// Runs the handshakes of the connections the cases use (those this
    /// build has) established, and with connection tracking checks that
    /// they are.
    fn establish(&self) -> anyhow::Result<()> {
        let conns: Vec<Established> = cases::established()
            .into_iter()
            .filter(|c| {
                let steps: Vec<(Step, u32)> = c.steps.iter().map(|s| (s.clone(), 1)).collect();
                self.skips(&steps).is_none()
            })
            .collect();
        let steps: Vec<(Step, u32)> = conns
            .iter()
            .flat_map(|c| &c.steps)
            .map(|s| (s.clone(), 1))
            .collect();
        self.run(&steps)?;
        if self.layout == Layout::V3 {
            return Ok(());
        }
        let rows = self.list("conns")?;
        for conn in &conns {
            let (client, backend) = (conn.client.to_string(), conn.backend.to_string());
            let found = rows.as_array().into_iter().flatten().any(|r| {
                r["state"] == "established" && r["client"] == client && r["backend"] == backend
            });
            ensure!(
                found,
                "{}: the handshake {client} -> {backend} did not establish: {rows}",
                self.label
            );
        }
        Ok(())
    }

    /// Whether the build learns an IPv6 frontend from a Destination
    /// Options header (3f04f10): one SYN carrying it through tc ingress,
    /// and the counter that says so. An older build passes it on without.
    fn learns_frontend6(&self) -> anyhow::Result<bool> {
        let before = self.counters()?;
        self.test_runs(&[(cases::probe6(), 1)])?;
        let after = self.counters()?;
        let learned = |c: &BTreeMap<String, u64>| c.get("frontend_option_learned").copied();
        Ok(learned(&after).unwrap_or(0) > learned(&before).unwrap_or(0))
    }
}

/// Runs the agent in XDP mode, and pins its XDP program with the ids of
/// the maps it was loaded with. `None`: a build whose agent cannot run in
/// XDP mode (said here) or pins no XDP link skips the XDP cases; the rest
/// are measured all the same.
fn pin_xdp(
    agent: &Agent<'_>,
    label: &str,
) -> anyhow::Result<Option<(PathBuf, BTreeMap<String, u32>)>> {
    // With the IPv6 mappings too where the build takes them: an agent
    // makes the IPv6 tables at full size only where IPv6 is served, and
    // the second run's would otherwise replace them under the XDP program.
    let both: Vec<_> = agent::mappings4()
        .into_iter()
        .chain(agent::mappings6())
        .collect();
    if agent.run_once("xdp-generic", &both, &[]).is_err()
        && let Err(e) = agent.run_once("xdp-generic", &agent::mappings4(), &[])
    {
        println!("    {label}: the agent in XDP mode failed, no XDP cases: {e:#}");
        return Ok(None);
    }
    let version_dir = version_dir(agent.bpffs.path())?;
    let xdp_link = link(&version_dir, Program::IngressXdp)?;
    if !xdp_link.exists() {
        return Ok(None);
    }
    let pin = pin_program(&xdp_link, agent.bpffs.path(), Program::IngressXdp)?;
    Ok(Some((pin, pinned_map_ids(&version_dir.join("maps"))?)))
}

/// The data path a build has, by the layout directory its agent made.
fn layout(version_dir: &Path) -> anyhow::Result<Layout> {
    Ok(match version_dir.file_name().and_then(|n| n.to_str()) {
        Some("v3") => Layout::V3,
        Some("v4") if version_dir.join("maps/CLAIMS").exists() => Layout::V4Confirmed,
        Some("v4") => Layout::V4,
        other => bail!(
            "pinned layout {other:?}: bench progs knows v3 (before connection tracking) and v4"
        ),
    })
}

impl Drop for Subject {
    fn drop(&mut self) {
        for pin in self.pins.iter().flatten() {
            let _ = std::fs::remove_file(pin);
        }
        // SAFETY: the benchmark runs on one thread.
        unsafe { std::env::set_var("SSH_FWD_BIN", &self.bin) };
    }
}
