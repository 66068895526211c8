//! The real `ssh-fwd agent` in a node namespace, and its bpffs directory.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::{NetNs, cmd};

/// Path of the `ssh-fwd` binary under test: `SSH_FWD_BIN`, or the workspace's
/// debug build.
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("SSH_FWD_BIN") {
        return Ok(bin.into());
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or(workspace.join("target"), PathBuf::from);
    for profile in ["debug", "release"] {
        let bin = target.join(profile).join("ssh-fwd");
        if bin.is_file() {
            return Ok(bin);
        }
    }
    bail!(
        "ssh-fwd binary not found; build it with `cargo build -p ssh-fwd` or run `cargo xtask test`"
    )
}

/// Whether the binary under test's `agent` takes `flag`: benchmarks run
/// older builds through the same harness.
fn agent_knows(flag: &str) -> anyhow::Result<bool> {
    let binary = binary()?;
    let help = Command::new(&binary)
        .args(["agent", "--help"])
        .output()
        .with_context(|| format!("running {} agent --help", binary.display()))?;
    Ok(String::from_utf8_lossy(&help.stdout).contains(flag))
}

/// A directory for the agent's pinned state (the agent mounts bpffs on it)
/// and its logs. Dropping this runs `ssh-fwd teardown`, unmounts and removes it.
pub struct Bpffs {
    dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Bpffs {
    pub fn new() -> anyhow::Result<Self> {
        crate::leftovers::sweep_once();
        let prefix = format!("{}{}-", crate::leftovers::STATE_PREFIX, std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir()?;
        let mount = dir.path().join("bpffs");
        Ok(Self { dir, mount })
    }

    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Mounts a bpf filesystem on [`Bpffs::path`] now, as the host's
    /// /sys/fs/bpf is before the agent's pod starts.
    pub fn mount(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.mount)?;
        cmd::run(
            Command::new("mount")
                .args(["-t", "bpf", "bpf"])
                .arg(&self.mount),
        )?;
        Ok(())
    }

    /// [`Bpffs::mount`], then the mount made shared, as systemd mounts the
    /// host's: a container may then receive it (`rslave`, Kubernetes'
    /// `HostToContainer`) or share it (`rshared`, `Bidirectional`), which
    /// runc refuses for a private source.
    pub fn mount_shared(&self) -> anyhow::Result<()> {
        self.mount()?;
        cmd::run(Command::new("mount").arg("--make-shared").arg(&self.mount))?;
        Ok(())
    }

    /// Where agent logs go, beside the bpffs mount point: a new file for
    /// each agent, so that two on one node (or a restart) keep their own.
    pub fn log_path(&self, name: &str) -> PathBuf {
        std::iter::once(self.dir.path().join(format!("agent-{name}.log")))
            .chain((2..).map(|n| self.dir.path().join(format!("agent-{name}-{n}.log"))))
            .find(|path| !path.exists())
            .unwrap_or_default()
    }

    /// `ssh-fwd teardown`: the data path detached, its pins removed.
    pub fn teardown(&self) -> anyhow::Result<()> {
        cmd::run(
            Command::new(binary()?)
                .arg("teardown")
                .arg("--bpffs")
                .arg(self.path()),
        )
        .map(drop)
    }

    /// `ssh-fwd list WHAT -o json` against this directory.
    pub fn list_of(&self, what: &str) -> anyhow::Result<serde_json::Value> {
        let out = cmd::run(
            Command::new(binary()?)
                .args(["list", what, "-o", "json", "--bpffs"])
                .arg(self.path()),
        )?;
        Ok(serde_json::from_str(&out)?)
    }

    /// Everything `ssh-fwd list` shows, as one object: `mappings`,
    /// `counters` (packets by outcome name), `conns`,
    /// `tracked_connections` (the established and closing ones), `hooks`
    /// and `pod_interfaces` (the hooks on pods' interfaces).
    pub fn list(&self) -> anyhow::Result<serde_json::Value> {
        let mappings = self.list_of("mappings")?;
        let counters: serde_json::Map<String, serde_json::Value> = self
            .list_of("counters")?
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, row)| (name.clone(), row["packets"].clone()))
            .collect();
        let conns = self.list_of("conns")?;
        let hooks = self.list_of("hooks")?;
        let pods: Vec<serde_json::Value> = hooks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|h| h["target"] == "pod-interface")
            .map(|h| serde_json::json!({"index": h["ifindex"], "iface": h["iface"]}))
            .collect();
        Ok(serde_json::json!({
            "mappings": mappings,
            "counters": counters,
            "tracked_connections": conns.as_array().map_or(0, |rows| rows
                .iter()
                .filter(|r| r["state"] == "established" || r["state"] == "closing")
                .count()),
            "conns": conns,
            "hooks": hooks,
            "pod_interfaces": pods,
        }))
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        if let Ok(bin) = binary() {
            let _ = Command::new(bin)
                .arg("teardown")
                .arg("--bpffs")
                .arg(self.path())
                .stdout(Stdio::null())
                .status();
        }
        if let Ok(c) = std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()) {
            // SAFETY: valid path; failing (not mounted) is fine.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// A running `ssh-fwd agent` (or `ssh-fwd controller`). Dropping it sends
/// SIGTERM (an agent's data path stays). When it is stopped or dropped,
/// every line of its log must be one JSON event (the harness always asks
/// for `--log-format json`): a test fails on a line that is not, whatever
/// else it checks.
pub struct Agent {
    child: Option<Child>,
    log: PathBuf,
}

impl Agent {
    /// Starts the agent and waits until it has applied the file.
    pub fn start(
        node: &NetNs,
        ifaces: &[&str],
        mappings: &Path,
        bpffs: &Bpffs,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut args = vec!["--mappings".to_owned(), mappings.display().to_string()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Self::start_with(node, ifaces, bpffs, &args)
    }

    /// [`Agent::start`] with `env` (`NAME=VALUE` each) in the agent's
    /// environment: the test-only switches, such as
    /// `SSH_FWD_TEST_PRETEND_MISSING=tcx`.
    pub fn start_env(
        node: &NetNs,
        env: &[&str],
        ifaces: &[&str],
        mappings: &Path,
        bpffs: &Bpffs,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut args = vec!["--mappings".to_owned(), mappings.display().to_string()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let wrapper: Vec<&str> = std::iter::once("env").chain(env.iter().copied()).collect();
        let mut agent = Self::launch(node, &wrapper, ifaces, bpffs, &args)?;
        agent.wait_for_log("agent ready", cmd::scaled(Duration::from_secs(20)))?;
        Ok(agent)
    }

    /// Starts the agent with its source in `args` (`--mappings F` or
    /// `--kubernetes ...`) and waits for its first reconcile.
    pub fn start_with(
        node: &NetNs,
        ifaces: &[&str],
        bpffs: &Bpffs,
        args: &[String],
    ) -> anyhow::Result<Self> {
        let mut agent = Self::spawn(node, ifaces, bpffs, args)?;
        agent.wait_for_log("agent ready", cmd::scaled(Duration::from_secs(20)))?;
        Ok(agent)
    }

    /// Starts the agent without waiting for anything.
    pub fn spawn(
        node: &NetNs,
        ifaces: &[&str],
        bpffs: &Bpffs,
        args: &[String],
    ) -> anyhow::Result<Self> {
        Self::launch(node, &[], ifaces, bpffs, args)
    }

    /// Starts the agent with only `capabilities` (e.g. `["bpf", "net_admin"]`)
    /// left in its bounding set, as a container that drops all others gets,
    /// and waits for its first reconcile. The bpffs must be mounted already
    /// (see [`Bpffs::mount`]); `--bpffs` in `args` may point below it.
    pub fn start_with_capabilities(
        node: &NetNs,
        capabilities: &[&str],
        ifaces: &[&str],
        bpffs: &Bpffs,
        args: &[String],
    ) -> anyhow::Result<Self> {
        let keep: String = capabilities.iter().map(|c| format!(",+{c}")).collect();
        let bounding = format!("-all{keep}");
        let wrapper = [
            "setpriv",
            "--bounding-set",
            &bounding,
            "--inh-caps",
            "-all",
            "--",
        ];
        let mut agent = Self::launch(node, &wrapper, ifaces, bpffs, args)?;
        agent.wait_for_log("agent ready", cmd::scaled(Duration::from_secs(20)))?;
        Ok(agent)
    }

    fn launch(
        node: &NetNs,
        wrapper: &[&str],
        ifaces: &[&str],
        bpffs: &Bpffs,
        args: &[String],
    ) -> anyhow::Result<Self> {
        let mut argv: Vec<std::ffi::OsString> = vec!["agent".into()];
        if !args.iter().any(|a| a == "--bpffs") {
            argv.extend(["--bpffs".into(), bpffs.path().into()]);
        }
        argv.extend(["--watch-interval", "200ms", "--log-format", "json"].map(Into::into));
        // Hairpin attaches to a cgroup, by default the machine's: tests
        // never do that, only to a cgroup of their own (`--cgroup-root`).
        // A build from before hairpin (a benchmark's "before") has neither.
        if !args
            .iter()
            .any(|a| a == "--hairpin" || a == "--cgroup-root")
            && agent_knows("--hairpin")?
        {
            argv.extend(["--hairpin", "off"].map(Into::into));
        }
        // The tests' Services use ports of the former default range
        // (8000-16000) and the controller's come from the current one; the
        // well-known ports between them are not the test nodes'. A build
        // from before the check (a benchmark's "before") has no such flag.
        if args.iter().any(|a| a == "--kubernetes")
            && !args.iter().any(|a| a == "--port-range")
            && agent_knows("--allow-port-overlap")?
        {
            argv.extend(["--port-range", "8000-27999", "--allow-port-overlap"].map(Into::into));
        }
        // Its name since it was renamed from --iface; a build from before
        // (a benchmark's "before") knows only the old one.
        let iface_flag = if ifaces.is_empty() || agent_knows("--external-iface")? {
            "--external-iface"
        } else {
            "--iface"
        };
        for iface in ifaces {
            argv.extend([iface_flag.into(), (*iface).into()]);
        }
        argv.extend(args.iter().map(Into::into));
        Self::process(node, wrapper, &argv, bpffs.log_path(node.name()))
    }

    /// Starts `ssh-fwd controller ARGS` in `node`, logging to `log`, and
    /// waits until it leads and has its first complete lists.
    pub fn start_controller(node: &NetNs, log: PathBuf, args: &[String]) -> anyhow::Result<Self> {
        let mut controller = Self::spawn_controller(node, log, args)?;
        controller.wait_for_log("controller ready", Duration::from_secs(20))?;
        Ok(controller)
    }

    /// Starts `ssh-fwd controller ARGS` in `node`, logging to `log`,
    /// without waiting: a standby replica never logs that it is ready
    /// until it leads.
    pub fn spawn_controller(node: &NetNs, log: PathBuf, args: &[String]) -> anyhow::Result<Self> {
        let mut argv: Vec<std::ffi::OsString> =
            vec!["controller".into(), "--log-format".into(), "json".into()];
        argv.extend(args.iter().map(Into::into));
        Self::process(node, &[], &argv, log)
    }

    fn process(
        node: &NetNs,
        wrapper: &[&str],
        argv: &[std::ffi::OsString],
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let log_file = std::fs::File::create(&log)?;
        let binary = binary()?;
        let binary = binary.to_str().context("binary path is not UTF-8")?;
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = node.command(program);
                c.args(rest).arg(binary);
                c
            }
            None => node.command(binary),
        };
        c.args(argv);
        let child = c
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .context("starting ssh-fwd")?;
        Ok(Self {
            child: Some(child),
            log,
        })
    }

    /// The agent's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`; fails early if the agent died.
    pub fn wait_for_log(&mut self, needle: &str, limit: Duration) -> anyhow::Result<()> {
        self.wait_for_log_count(needle, 1, limit)
    }

    /// Waits until the log contains `needle` at least `count` times.
    pub fn wait_for_log_count(
        &mut self,
        needle: &str,
        count: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if self.count_in_log(needle) >= count {
                return Ok(());
            }
            if let Some(status) = self.exited()? {
                bail!(
                    "ssh-fwd exited ({status}) before logging {needle:?}:\n{}",
                    self.log()
                );
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "ssh-fwd did not log {needle:?} within {limit:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How the process ended, if it has.
    pub fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => Ok(child.try_wait()?),
            None => Ok(None),
        }
    }

    /// Number of times the log contains `needle`.
    pub fn count_in_log(&self, needle: &str) -> usize {
        self.log().matches(needle).count()
    }

    /// SIGTERM and wait (bounded) for a clean exit; then every line of the
    /// log must be one JSON event.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let status = self.end();
        self.check_json_log()?;
        let status = status?;
        if let Some(status) = status.filter(|s| !s.success()) {
            bail!("agent exited with {status}:\n{}", self.log());
        }
        Ok(())
    }

    /// SIGTERM and wait (bounded); `None` if it was ended before.
    fn end(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let exited = cmd::wait_until(Duration::from_secs(10), || {
            child.try_wait().ok().flatten().is_some()
        });
        if !exited {
            crate::ssh::kill_group(&mut child);
            bail!("agent did not exit within 10 s of SIGTERM");
        }
        Ok(Some(child.wait()?))
    }

    /// Every line of the log is one JSON event (`--log-format json` holds
    /// on every path: errors, panics, start-up failures).
    pub fn check_json_log(&self) -> anyhow::Result<()> {
        let log = self.log();
        for (i, line) in log.lines().enumerate() {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                bail!(
                    "line {} of {} is not a JSON event ({e}): {line:?}",
                    i + 1,
                    self.log.display()
                );
            }
        }
        Ok(())
    }

    /// SIGKILL, as a crash or the OOM killer ends it, and wait; its data
    /// path stays.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait()?;
        Ok(())
    }

    /// Sends SIGHUP (reload).
    pub fn hangup(&self) {
        if let Some(child) = &self.child {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.end();
        if let Err(e) = self.check_json_log()
            && !std::thread::panicking()
        {
            panic!("{e:#}");
        }
    }
}

/// Runs an agent command that is expected to fail and returns its stderr.
pub fn run_failing(node: &NetNs, args: &[&str]) -> anyhow::Result<String> {
    run_failing_as(node, binary()?.to_str().context("binary path")?, args)
}

/// Runs `program args` in `node`, expecting failure; returns its stderr.
pub fn run_failing_as(node: &NetNs, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = node
        .command(program)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        bail!("ssh-fwd {args:?} succeeded but was expected to fail");
    }
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

pub fn write_mappings(path: &Path, entries: &[(&str, &str, &str)]) -> anyhow::Result<()> {
    let mut text = String::from("mappings:\n");
    // Quoted: an IPv6 endpoint (`[2001:db8::10]:8022`) would read as a
    // YAML list.
    for (name, frontend, backend) in entries {
        text.push_str(&format!(
            "  - name: {name}\n    frontend: \"{frontend}\"\n    backend: \"{backend}\"\n"
        ));
    }
    if entries.is_empty() {
        text = "mappings: []\n".into();
    }
    // Write-then-rename, as a careful operator or a ConfigMap update does.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
