//! A container run with podman the way a kubelet runs a pod's container: a
//! [`Spec`] holds what the pod spec says (user, capabilities, seccomp,
//! mounts, environment, arguments, host network), and [`Container`] runs
//! it and removes it when dropped, also when a test fails.

use std::{
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::cmd;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// How long one podman command may take (a `run` includes starting runc).
const PODMAN_LIMIT: Duration = Duration::from_secs(60);

/// The seccomp filter of the container (`securityContext.seccompProfile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seccomp {
    /// The container runtime's own default profile (podman's, here).
    RuntimeDefault,
    Unconfined,
    /// A profile file on the host (`Localhost`).
    Profile(PathBuf),
}

/// A host path bound into the container.
#[derive(Debug, Clone)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
    /// `mountPropagation` as podman spells it (`rslave` for
    /// `HostToContainer`, `rshared` for `Bidirectional`); `None`: podman's
    /// default, private.
    pub propagation: Option<&'static str>,
}

/// What the pod spec says about one container, in podman's terms.
#[derive(Debug, Clone)]
pub struct Spec {
    pub image: String,
    /// `/run/netns/NAME`: the node's network namespace, as `hostNetwork`.
    pub netns: String,
    pub user: Option<u32>,
    pub drop_all_capabilities: bool,
    /// As Kubernetes spells them: `BPF`, `NET_ADMIN`.
    pub add_capabilities: Vec<String>,
    pub read_only_root: bool,
    pub no_new_privileges: bool,
    pub seccomp: Seccomp,
    pub memory_limit_bytes: Option<u64>,
    /// `--privileged`, as kind runs its nodes.
    pub privileged: bool,
    /// `--cgroupns=MODE` (`private`, `host`); `None`: podman's default.
    pub cgroupns: Option<&'static str>,
    pub mounts: Vec<Mount>,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

impl Spec {
    /// The arguments of `podman run` after `run`, for a container `name`.
    pub fn podman_args(&self, name: &str) -> Vec<String> {
        let mut a: Vec<String> = ["--detach", "--pull=never", "--name", name]
            .map(String::from)
            .into();
        a.push(format!("--network=ns:{}", self.netns));
        a.extend(resource_limits());
        if let Some(user) = self.user {
            a.push(format!("--user={user}:{user}"));
        }
        if self.drop_all_capabilities {
            a.push("--cap-drop=all".into());
        }
        for cap in &self.add_capabilities {
            a.push(format!("--cap-add=CAP_{cap}"));
        }
        if self.read_only_root {
            // Kubernetes adds no writable /tmp, /var/tmp or /run; podman
            // would, unless told not to.
            a.extend(["--read-only", "--read-only-tmpfs=false"].map(String::from));
        }
        if self.no_new_privileges {
            a.push("--security-opt=no-new-privileges".into());
        }
        match &self.seccomp {
            Seccomp::RuntimeDefault => {}
            Seccomp::Unconfined => a.push("--security-opt=seccomp=unconfined".into()),
            Seccomp::Profile(path) => a.push(format!("--security-opt=seccomp={}", path.display())),
        }
        if let Some(bytes) = self.memory_limit_bytes {
            a.push(format!("--memory={bytes}"));
        }
        if self.privileged {
            a.push("--privileged".into());
        }
        if let Some(mode) = self.cgroupns {
            a.push(format!("--cgroupns={mode}"));
        }
        for m in &self.mounts {
            let ro = if m.read_only { ",ro" } else { "" };
            let propagation = m
                .propagation
                .map(|p| format!(",bind-propagation={p}"))
                .unwrap_or_default();
            a.push(format!(
                "--mount=type=bind,source={},destination={}{ro}{propagation}",
                m.host.display(),
                m.container
            ));
        }
        for (key, value) in &self.env {
            a.push(format!("--env={key}={value}"));
        }
        a.push(self.image.clone());
        a.extend(self.args.iter().cloned());
        a
    }
}

/// `--ulimit` flags runc can apply. Unasked, podman gives containers more
/// open files than a sandboxed root may grant (its own hard limit, which
/// ours caps), and runc fails with EPERM; podman also caps its own process
/// limit below ours. The container gets this process's open-file limit and
/// 4096 processes; the agent needs a few hundred files and a dozen threads.
fn resource_limits() -> Vec<String> {
    let mut nofile = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let mut args = vec!["--ulimit=nproc=4096:4096".to_owned()];
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) } == 0
        && nofile.rlim_max != libc::RLIM_INFINITY
    {
        args.push(format!(
            "--ulimit=nofile={}:{}",
            nofile.rlim_cur, nofile.rlim_max
        ));
    }
    args
}

/// A running (or exited) container, removed on drop.
pub struct Container {
    name: String,
}

impl Container {
    /// Starts `spec` detached with runc (crun cannot start containers on a
    /// host with hybrid cgroups).
    pub fn run(spec: &Spec) -> anyhow::Result<Self> {
        let name = format!(
            "sfw{}-{}-container",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // The guard first: a `run` that fails half-way may leave a container.
        let container = Self { name };
        cmd::run(
            cmd::bounded(PODMAN_LIMIT, "podman")
                .args(["--runtime", "runc", "run"])
                .args(spec.podman_args(&container.name)),
        )
        .with_context(|| format!("starting container {} from {}", container.name, spec.image))?;
        Ok(container)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn podman(&self, args: &[&str]) -> anyhow::Result<String> {
        cmd::run(cmd::bounded(PODMAN_LIMIT, "podman").args(args))
    }

    fn inspect(&self, format: &str) -> anyhow::Result<String> {
        Ok(self
            .podman(&[
                "inspect",
                "--type",
                "container",
                "--format",
                format,
                &self.name,
            ])?
            .trim()
            .to_owned())
    }

    /// What the container wrote to stdout and stderr.
    pub fn logs(&self) -> String {
        let out = cmd::bounded(PODMAN_LIMIT, "podman")
            .args(["logs", &self.name])
            .output();
        match out {
            Ok(o) => {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            }
            Err(e) => format!("(podman logs failed: {e})"),
        }
    }

    pub fn running(&self) -> anyhow::Result<bool> {
        Ok(self.inspect("{{.State.Running}}")? == "true")
    }

    /// The host's process id of the container's first process.
    pub fn pid(&self) -> anyhow::Result<u32> {
        let pid = self.inspect("{{.State.Pid}}")?;
        pid.parse()
            .ok()
            .filter(|p| *p != 0)
            .with_context(|| format!("container {} has no process (pid {pid:?})", self.name))
    }

    pub fn exit_code(&self) -> anyhow::Result<i32> {
        let code = self.inspect("{{.State.ExitCode}}")?;
        code.parse()
            .with_context(|| format!("exit code {code:?} of container {}", self.name))
    }

    /// Waits until the logs contain `needle`; fails early if the container
    /// exited.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let logs = self.logs();
            if logs.contains(needle) {
                return Ok(());
            }
            if !self.running()? {
                bail!(
                    "container {} exited ({}) before logging {needle:?}:\n{logs}",
                    self.name,
                    self.exit_code()?
                );
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "container {} did not log {needle:?} within {limit:?}:\n{logs}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the container has exited and returns its exit code.
    pub fn wait_for_exit(&self, limit: Duration) -> anyhow::Result<i32> {
        let exited = cmd::wait_until(limit, || matches!(self.running(), Ok(false)));
        if !exited {
            bail!(
                "container {} still runs after {limit:?}:\n{}",
                self.name,
                self.logs()
            );
        }
        self.exit_code()
    }

    /// `podman stop`: SIGTERM, as a kubelet stops a pod, and SIGKILL after
    /// `grace`. Returns the exit code.
    pub fn stop(&self, grace: Duration) -> anyhow::Result<i32> {
        let seconds = grace.as_secs().max(1).to_string();
        self.podman(&["stop", "--time", &seconds, &self.name])?;
        self.exit_code()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = cmd::bounded(PODMAN_LIMIT, "podman")
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
    }
}

/// Kubernetes memory quantities as bytes: `256Mi`, `1Gi`, `500M`, `1000`.
pub fn memory_bytes(quantity: &str) -> anyhow::Result<u64> {
    const UNITS: [(&str, u64); 6] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    let (digits, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| quantity.strip_suffix(unit).map(|d| (d, *scale)))
        .unwrap_or((quantity, 1));
    let n: u64 = digits.parse().with_context(|| {
        format!("memory quantity {quantity:?} is not an integer with a unit like Mi")
    })?;
    n.checked_mul(scale)
        .with_context(|| format!("memory quantity {quantity:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            image: "localhost/ssh-fwd-test:1".into(),
            netns: "/run/netns/node".into(),
            user: Some(0),
            drop_all_capabilities: true,
            add_capabilities: vec!["BPF".into(), "NET_ADMIN".into()],
            read_only_root: true,
            no_new_privileges: true,
            seccomp: Seccomp::Unconfined,
            memory_limit_bytes: Some(256 << 20),
            privileged: false,
            cgroupns: None,
            mounts: vec![Mount {
                host: "/tmp/x/bpffs".into(),
                container: "/sys/fs/bpf".into(),
                read_only: false,
                propagation: Some("rslave"),
            }],
            env: vec![("IFACE".into(), "ext0".into())],
            args: vec!["agent".into(), "--external-iface=ext0".into()],
        }
    }

    #[test]
    fn a_pod_spec_becomes_the_matching_podman_flags_with_the_image_and_args_last() {
        let args = spec().podman_args("c1");
        for flag in [
            "--network=ns:/run/netns/node",
            "--user=0:0",
            "--cap-drop=all",
            "--cap-add=CAP_BPF",
            "--cap-add=CAP_NET_ADMIN",
            "--read-only",
            "--read-only-tmpfs=false",
            "--security-opt=no-new-privileges",
            "--security-opt=seccomp=unconfined",
            "--memory=268435456",
            "--mount=type=bind,source=/tmp/x/bpffs,destination=/sys/fs/bpf,bind-propagation=rslave",
            "--env=IFACE=ext0",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{flag} missing from {args:?}"
            );
        }
        assert_eq!(
            args[args.len() - 3..],
            ["localhost/ssh-fwd-test:1", "agent", "--external-iface=ext0"]
        );
        let cap_drop = args.iter().position(|a| a == "--cap-drop=all");
        let cap_add = args.iter().position(|a| a == "--cap-add=CAP_BPF");
        assert!(cap_drop < cap_add, "drop all, then add: {args:?}");
    }

    #[test]
    fn the_runtime_default_profile_adds_no_seccomp_flag() {
        let mut s = spec();
        s.seccomp = Seccomp::RuntimeDefault;
        assert!(!s.podman_args("c").iter().any(|a| a.contains("seccomp")));
        s.seccomp = Seccomp::Profile("/p.json".into());
        assert!(
            s.podman_args("c")
                .iter()
                .any(|a| a == "--security-opt=seccomp=/p.json")
        );
    }

    #[test]
    fn memory_quantities_are_read_as_kubernetes_writes_them() {
        assert_eq!(memory_bytes("256Mi").unwrap(), 256 << 20);
        assert_eq!(memory_bytes("1Gi").unwrap(), 1 << 30);
        assert_eq!(memory_bytes("500M").unwrap(), 500_000_000);
        assert_eq!(memory_bytes("1000").unwrap(), 1000);
        assert!(memory_bytes("lots").is_err());
    }
}
