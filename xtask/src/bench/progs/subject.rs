//! One ssh-fwd build's data path, ready for test runs: a bench bed of its
//! own, with the build's agent run once to load, attach and fill the maps,
//! then stopped. The data path stays pinned and needs no agent; with none,
//! no resync undoes what the bench adds to the maps and no sweep ends its
//! connections.
//!
//! A test run with `repeat` keeps each iteration's rewrite, so a DNATed
//! packet would miss from the second iteration on. The bench therefore
//! maps frontends to themselves: the agent refuses such a mapping (it would
//! loop on a real network), so the bed maps the external IP to the pod,
//! and the bench copies those entries under the backend's own address into
//! `FRONTENDS` and points `REVERSE` at the backend itself, with bpftool.
//! Every iteration then does the full lookup, rewrite, route and redirect,
//! byte for byte a real hit's work. Each iteration also decrements the
//! TTL: frames start at 255.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use ssh_fwd_common::maps::{FLAG_ALLOWLIST, FLAG_SYN_LIMIT, Guard, IFACE_CLUSTER, NatTarget};
use ssh_fwd_tests::{
    Bpffs, cmd,
    topology::{EXT_IFACE, EXTERNAL_IP},
};

use super::{
    bpftool::{endpoint_bytes, map_lookup, map_update, pin_programs, version_dir},
    cases::{self, GUARDED_FRONTEND_PORT, GUARDED_PORT, POD, UNROUTED, UNROUTED_PORT},
    packets::{CLIENT, Layout, Program, Step},
    test_run,
};
use crate::bench::bed::{
    self, Bed, CLUSTER_IFACE, ECHO_FRONTEND_PORT, ECHO_PORT, IPERF_PORT, POD_IFACE,
};

pub struct Subject {
    pub label: &'static str,
    pub layout: Layout,
    /// The build has the guard (allowlists and the SYN limit), and the bed
    /// a guarded frontend.
    pub guarded: bool,
    bin: PathBuf,
    /// The programs, pinned for the test runs, indexed by [`Program`].
    pins: [PathBuf; 3],
    work: tempfile::TempDir,
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
        Program::Ingress => (None, None),
        Program::Reply => (Some(POD_IFACE), Some(POD_IFACE)),
        Program::Egress => (Some(POD_IFACE), None),
    }
}

impl Subject {
    pub fn new(label: &'static str, bin: &Path, agent_args: &[String]) -> anyhow::Result<Self> {
        // The harness's `Bpffs` tears down with `SSH_FWD_BIN`: this build's
        // now, and again when it is dropped (see `Drop`).
        // SAFETY: the benchmark runs on one thread.
        unsafe { std::env::set_var("SSH_FWD_BIN", bin) };
        let bed = Bed::new()?;
        let bpffs = Bpffs::new()?;
        crate::bench::cleanup::remember_bpffs(bpffs.path());
        let work = tempfile::tempdir()?;
        let guarded = run_agent_once(&bed, &bpffs, bin, agent_args, work.path())?;
        let version_dir = version_dir(bpffs.path())?;
        let layout = match version_dir.file_name().and_then(|n| n.to_str()) {
            Some("v3") => Layout::V3,
            Some("v4") if version_dir.join("maps/CLAIMS").exists() => Layout::V4Confirmed,
            Some("v4") => Layout::V4,
            other => bail!(
                "{label} ({}) pinned layout {other:?}: bench progs knows v3 (before connection \
                 tracking) and v4",
                bin.display()
            ),
        };
        let subject = Self {
            label,
            layout,
            guarded,
            bin: bin.to_owned(),
            pins: pin_programs(&version_dir, bpffs.path())?,
            work,
            bpffs,
            bed,
        };
        subject.map_frontends_to_themselves(&version_dir.join("maps"))?;
        subject.establish()?;
        Ok(subject)
    }

    /// Runs each step through its program the given number of times on one
    /// skb, in one process, checks the verdicts this layout must give, and
    /// returns each step's ns per iteration.
    pub fn run(&self, steps: &[(Step, u32)]) -> anyhow::Result<Vec<f64>> {
        let plan: Vec<test_run::Run> = steps
            .iter()
            .map(|(step, repeat)| test_run::Run {
                program: self.pins[step.program as usize].clone(),
                frame: step.frame.build(),
                repeat: *repeat,
                arrived_on: interfaces(step).0.map(str::to_owned),
                runs_on: interfaces(step).1.map(str::to_owned),
            })
            .collect();
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

    /// `FRONTENDS[backend] = FRONTENDS[frontend]` for the echo and the
    /// unrouted mappings, and `REVERSE[backend]` pointed at the backend
    /// itself, so that replies too are rewritten to what they were (see the
    /// module comment). Both layouts key these maps by the same 8-byte
    /// endpoint and start their values with the endpoint to rewrite to.
    fn map_frontends_to_themselves(&self, maps: &Path) -> anyhow::Result<()> {
        let (frontends, reverse) = (maps.join("FRONTENDS"), maps.join("REVERSE"));
        let external: Ipv4Addr = EXTERNAL_IP.parse()?;
        let mut pairs = vec![
            ((external, ECHO_FRONTEND_PORT), (POD, ECHO_PORT)),
            ((external, UNROUTED_PORT), (UNROUTED, UNROUTED_PORT)),
        ];
        if self.guarded {
            pairs.push(((external, GUARDED_FRONTEND_PORT), (POD, GUARDED_PORT)));
        }
        for (frontend, backend) in pairs {
            let backend_key = endpoint_bytes(backend);
            let forward = map_lookup(&frontends, &endpoint_bytes(frontend))?;
            ensure!(
                forward.get(..8) == Some(&backend_key[..]),
                "FRONTENDS[{frontend:?}] = {forward:02x?} does not start with backend {backend:?}"
            );
            map_update(&frontends, &backend_key, &forward)?;
            let mut back = map_lookup(&reverse, &backend_key)?;
            ensure!(
                back.get(..8) == Some(&endpoint_bytes(frontend)[..]),
                "REVERSE[{backend:?}] = {back:02x?} does not start with frontend {frontend:?}"
            );
            back[..8].copy_from_slice(&backend_key);
            map_update(&reverse, &backend_key, &back)?;
        }
        if self.guarded {
            limit_syns(maps, (POD, GUARDED_PORT))?;
        }
        // The cluster interface (the agent finds none in the bed), and the
        // cluster's key, for the cases of SYNs from other nodes.
        let ifaces = maps.join("IFACES");
        if maps.join("CLAIMS").exists() {
            let index = self.bed.node_ifindex(CLUSTER_IFACE)?;
            map_update(&ifaces, &index.to_ne_bytes(), &IFACE_CLUSTER.to_ne_bytes())?;
            let key: Vec<u8> = cases::CROSS_NODE_KEY
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect();
            map_update(&maps.join("CROSS_NODE_KEY"), &0u32.to_ne_bytes(), &key)?;
        }
        // The data path believes a backend's segments only from the pod
        // interface that owns its address: the unrouted backend's replies
        // come in on the pod's, as the pod's own do.
        let owners = maps.join("OWNERS");
        if owners.exists() {
            let pod_index = self.bed.node_ifindex(POD_IFACE)?;
            let mut owner = pod_index.to_ne_bytes().to_vec();
            owner.extend_from_slice(&0u32.to_ne_bytes());
            map_update(&owners, &UNROUTED.octets(), &owner)?;
        }
        Ok(())
    }

    /// Runs the handshakes of the connections the cases use established,
    /// and with connection tracking checks that they are.
    fn establish(&self) -> anyhow::Result<()> {
        let conns = cases::established();
        let steps: Vec<(Step, u32)> = conns
            .iter()
            .flat_map(|(_, s)| s)
            .map(|s| (s.clone(), 1))
            .collect();
        self.run(&steps)?;
        if self.layout == Layout::V3 {
            return Ok(());
        }
        let rows = self.list("conns")?;
        for (conn, _) in &conns {
            let client = format!("{CLIENT}:{}", conn.client_port);
            let backend = format!("{}:{}", conn.backend.0, conn.backend.1);
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
}

impl Drop for Subject {
    fn drop(&mut self) {
        for pin in &self.pins {
            let _ = std::fs::remove_file(pin);
        }
        // SAFETY: the benchmark runs on one thread.
        unsafe { std::env::set_var("SSH_FWD_BIN", &self.bin) };
    }
}

/// The agent, killed if the bench fails before stopping it.
struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Adds the SYN limit to the self-mapped frontend `backend` (whose
/// allowlist the agent wrote): its flag, and a rate no bench run reaches
/// (a million a second, a second's burst), so every SYN is admitted and
/// pays for the lookup and the write of its source's bucket. The agent's
/// `--syn-rate` would limit every mapping, the plain SYN case's too.
fn limit_syns(maps: &Path, backend: (Ipv4Addr, u16)) -> anyhow::Result<()> {
    let frontends = maps.join("FRONTENDS");
    let key = endpoint_bytes(backend);
    let mut target = map_lookup(&frontends, &key)?;
    let at = |offset: usize| offset..offset + 4;
    let word = |bytes: &[u8], offset: usize| -> anyhow::Result<u32> {
        let b = bytes.get(at(offset)).context("FRONTENDS value too short")?;
        Ok(u32::from_ne_bytes(b.try_into()?))
    };
    let slot = word(&target, std::mem::offset_of!(NatTarget, slot))?;
    let flags_at = std::mem::offset_of!(NatTarget, flags);
    let flags = word(&target, flags_at)?;
    ensure!(
        flags & FLAG_ALLOWLIST != 0,
        "FRONTENDS[{backend:?}] has flags {flags:#x}: the agent wrote no allowlist"
    );
    let rate = Guard::new(1_000_000, 1_000_000);
    let mut guard = rate.interval_ns.to_ne_bytes().to_vec();
    guard.extend_from_slice(&rate.burst_ns.to_ne_bytes());
    map_update(&maps.join("GUARDS"), &slot.to_ne_bytes(), &guard)?;
    target[at(flags_at)].copy_from_slice(&(flags | FLAG_SYN_LIMIT).to_ne_bytes());
    map_update(&frontends, &key, &target)
}

/// Starts `bin`'s agent on the bed in tc mode, waits until it applied the
/// mappings, sends one exchange through the path (which puts both
/// neighbours in the node's tables, as on any node carrying traffic), and
/// stops it with SIGTERM, which leaves the data path in place. Whether the
/// build has the guard, and so the bed a guarded frontend.
fn run_agent_once(
    bed: &Bed,
    bpffs: &Bpffs,
    bin: &Path,
    extra: &[String],
    work: &Path,
) -> anyhow::Result<bool> {
    let echo_frontend = format!("{EXTERNAL_IP}:{ECHO_FRONTEND_PORT}");
    let mappings = work.join("mappings.yaml");
    ssh_fwd_tests::agent::write_mappings(
        &mappings,
        &[
            ("echo", &echo_frontend, &format!("{POD}:{ECHO_PORT}")),
            (
                "unrouted",
                &format!("{EXTERNAL_IP}:{UNROUTED_PORT}"),
                &format!("{UNROUTED}:{UNROUTED_PORT}"),
            ),
            (
                "cross-node",
                &format!(
                    "{}:{}",
                    cases::CROSS_NODE_FRONTEND.0,
                    cases::CROSS_NODE_FRONTEND.1
                ),
                &format!("{POD}:{IPERF_PORT}"),
            ),
        ],
    )?;
    // A build with the guard also gets a frontend whose allowlist is the
    // client (`limit_syns` adds the rate).
    let help = cmd::run(Command::new(bin).args(["agent", "--help"]))?;
    let guarded = help.contains("--syn-rate");
    if guarded {
        let mut text = std::fs::read_to_string(&mappings)?;
        text.push_str(&format!(
            "  - name: guarded\n    frontend: {EXTERNAL_IP}:{GUARDED_FRONTEND_PORT}\n    \
             backend: {POD}:{GUARDED_PORT}\n    allow: [{CLIENT}/32]\n"
        ));
        std::fs::write(&mappings, text)?;
    }
    let log_path = work.join("agent.log");
    let log = std::fs::File::create(&log_path)?;
    let bin_str = bin.to_str().context("binary path is not UTF-8")?;
    let mut agent = bed.node.command(bin_str);
    agent
        .args(["agent", "--bpffs"])
        .arg(bpffs.path())
        .args([
            "--iface",
            EXT_IFACE,
            "--attach",
            "tc",
            "--log-format",
            "json",
        ])
        .arg("--mappings")
        .arg(&mappings);
    // A build with hairpin attaches it to the machine's cgroup by default:
    // never from a benchmark. Older builds do not know the flag.
    if help.contains("--hairpin") {
        agent.args(["--hairpin", "off"]);
    }
    // Every one-iteration case confirms connections from the one client
    // address and never closes them: past the default quota, a later case's
    // handshakes would be held back. Raised, not turned off, so the quota
    // is still read as on a node.
    if help.contains("--conns-per-source") {
        agent.args(["--conns-per-source", "1000000"]);
    }
    agent.args(extra);
    let mut agent = AgentProcess(
        agent
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let ready = cmd::wait_until(Duration::from_secs(20), || {
        read_log().contains("agent ready") || agent.0.try_wait().ok().flatten().is_some()
    });
    ensure!(
        ready && read_log().contains("agent ready"),
        "the agent of {} did not get ready:\n{}",
        bin.display(),
        read_log()
    );
    cmd::run(bed::helper(&bed.client)?.args(["ping-pong", "--to", &echo_frontend, "--secs", "1"]))
        .context("a first exchange through the path")?;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
    let exited = cmd::wait_until(Duration::from_secs(10), || {
        agent.0.try_wait().ok().flatten().is_some()
    });
    ensure!(
        exited,
        "the agent of {} did not stop on SIGTERM",
        bin.display()
    );
    Ok(guarded)
}
