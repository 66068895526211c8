//! A build's agent, run on the bench bed to load, attach and fill the maps,
//! then stopped: the mappings it is given, and how it is run.

use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use ssh_fwd_tests::{
    Bpffs, cmd,
    topology::{EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6},
};

use super::{
    cases::{self, GUARDED_FRONTEND_PORT, GUARDED_PORT, POD, POD6, UNROUTED, UNROUTED_PORT},
    packets::CLIENT,
};
use crate::bench::bed::{self, Bed, ECHO_FRONTEND_PORT, ECHO_PORT, IPERF_PORT};

/// One mapping of the bed: name, frontend, backend.
type Mapping = (&'static str, String, String);

/// The IPv4 mappings: the echo server, the unrouted backend, and the
/// pod's iperf port (the frontend a SYN from another node carries).
pub fn mappings4() -> Vec<Mapping> {
    vec![
        (
            "echo",
            format!("{EXTERNAL_IP}:{ECHO_FRONTEND_PORT}"),
            format!("{POD}:{ECHO_PORT}"),
        ),
        (
            "unrouted",
            format!("{EXTERNAL_IP}:{UNROUTED_PORT}"),
            format!("{UNROUTED}:{UNROUTED_PORT}"),
        ),
        (
            "cross-node",
            format!(
                "{}:{}",
                cases::CROSS_NODE_FRONTEND.0,
                cases::CROSS_NODE_FRONTEND.1
            ),
            format!("{POD}:{IPERF_PORT}"),
        ),
    ]
}

/// The IPv6 twins of the echo and cross-node mappings, on the SSH IP's
/// IPv6 twin and the pod's IPv6 address.
pub fn mappings6() -> Vec<Mapping> {
    vec![
        (
            "echo6",
            format!("[{EXTERNAL_IP6}]:{ECHO_FRONTEND_PORT}"),
            format!("[{POD6}]:{ECHO_PORT}"),
        ),
        (
            "cross-node6",
            format!(
                "[{}]:{}",
                cases::CROSS_NODE_FRONTEND6.0,
                cases::CROSS_NODE_FRONTEND6.1
            ),
            format!("[{POD6}]:{IPERF_PORT}"),
        ),
    ]
}

/// The echo server's frontend in each family, for a first exchange.
pub fn echo_frontend() -> String {
    format!("{EXTERNAL_IP}:{ECHO_FRONTEND_PORT}")
}

pub fn echo_frontend6() -> String {
    format!("[{EXTERNAL_IP6}]:{ECHO_FRONTEND_PORT}")
}

/// How to run one build's agent on one bed.
pub struct Agent<'a> {
    pub bed: &'a Bed,
    pub bpffs: &'a Bpffs,
    pub bin: &'a Path,
    /// Flags for every run (`--after-arg`).
    pub extra: &'a [String],
    pub work: &'a Path,
    /// `ssh-fwd agent --help`: which flags the build knows.
    pub help: String,
}

impl<'a> Agent<'a> {
    pub fn new(
        bed: &'a Bed,
        bpffs: &'a Bpffs,
        bin: &'a Path,
        extra: &'a [String],
        work: &'a Path,
    ) -> anyhow::Result<Self> {
        let help = cmd::run(Command::new(bin).args(["agent", "--help"]))?;
        Ok(Self {
            bed,
            bpffs,
            bin,
            extra,
            work,
            help,
        })
    }

    /// The build has the guard: the bed then gets a frontend whose
    /// allowlist is the client (`self_map::limit_syns` adds the rate).
    pub fn guarded(&self) -> bool {
        self.help.contains("--syn-rate")
    }

    /// Starts the agent on the bed with `--attach attach` and `mappings`,
    /// waits until it applied them, sends one exchange to each of
    /// `exchanges` through the path (which puts the neighbours in the
    /// node's tables, as on any node carrying traffic), and stops it with
    /// SIGTERM, which leaves the data path in place.
    pub fn run_once(
        &self,
        attach: &str,
        mappings: &[Mapping],
        exchanges: &[String],
    ) -> anyhow::Result<()> {
        let path = self.work.join("mappings.yaml");
        self.write_mappings(&path, mappings)?;
        let log_path = self.work.join(format!("agent-{attach}.log"));
        let log = std::fs::File::create(&log_path)?;
        let bin_str = self.bin.to_str().context("binary path is not UTF-8")?;
        let mut agent = self.bed.node.command(bin_str);
        agent
            .args(["agent", "--bpffs"])
            .arg(self.bpffs.path())
            .args([
                "--iface",
                EXT_IFACE,
                "--attach",
                attach,
                "--log-format",
                "json",
            ])
            .arg("--mappings")
            .arg(&path);
        // A build with hairpin attaches it to the machine's cgroup by
        // default: never from a benchmark. Older builds do not know the flag.
        if self.help.contains("--hairpin") {
            agent.args(["--hairpin", "off"]);
        }
        // Every one-iteration case confirms connections from the one client
        // address and never closes them: past the default quota, a later
        // case's handshakes would be held back. Raised, not turned off, so
        // the quota is still read as on a node.
        if self.help.contains("--conns-per-source") {
            agent.args(["--conns-per-source", "1000000"]);
        }
        agent.args(self.extra);
        let mut agent = AgentProcess(
            agent
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting {}", self.bin.display()))?,
        );
        let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let ready = cmd::wait_until(cmd::scaled(Duration::from_secs(20)), || {
            read_log().contains("agent ready") || agent.0.try_wait().ok().flatten().is_some()
        });
        ensure!(
            ready && read_log().contains("agent ready"),
            "the agent of {} (--attach {attach}) did not get ready:\n{}",
            self.bin.display(),
            read_log()
        );
        for to in exchanges {
            cmd::run(bed::helper(&self.bed.client)?.args(["ping-pong", "--to", to, "--secs", "1"]))
                .with_context(|| format!("a first exchange through the path, to {to}"))?;
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
        let exited = cmd::wait_until(cmd::scaled(Duration::from_secs(10)), || {
            agent.0.try_wait().ok().flatten().is_some()
        });
        ensure!(
            exited,
            "the agent of {} did not stop on SIGTERM",
            self.bin.display()
        );
        Ok(())
    }

    /// The mappings file, with the guarded frontend where the build has
    /// the guard.
    fn write_mappings(&self, path: &Path, mappings: &[Mapping]) -> anyhow::Result<()> {
        let entries: Vec<(&str, &str, &str)> = mappings
            .iter()
            .map(|(name, frontend, backend)| (*name, frontend.as_str(), backend.as_str()))
            .collect();
        ssh_fwd_tests::agent::write_mappings(path, &entries)?;
        if self.guarded() {
            let mut text = std::fs::read_to_string(path)?;
            text.push_str(&format!(
                "  - name: guarded\n    frontend: {EXTERNAL_IP}:{GUARDED_FRONTEND_PORT}\n    \
                 backend: {POD}:{GUARDED_PORT}\n    allow: [{CLIENT}/32]\n"
            ));
            std::fs::write(path, text)?;
        }
        Ok(())
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
