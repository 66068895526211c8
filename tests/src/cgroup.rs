//! A cgroup v2 of the test's own, for the hairpin programs: a private mount
//! of the cgroup2 hierarchy and a child cgroup in it. Only processes the
//! test starts through [`TestCgroup::command`] join it, so nothing else on
//! the machine is touched. Dropping it kills what is left in the child,
//! removes it and unmounts.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use anyhow::Context as _;

use crate::{NetNs, cmd};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct TestCgroup {
    mount: tempfile::TempDir,
    child: PathBuf,
}

impl TestCgroup {
    /// Mounts cgroup2 on a temporary directory and makes a child cgroup
    /// `ssh-fwd-test-<pid>-<n>` there.
    pub fn new() -> anyhow::Result<Self> {
        let mount = tempfile::Builder::new().prefix("ssh-fwd-cg").tempdir()?;
        cmd::run(
            Command::new("mount")
                .args(["-t", "cgroup2", "none"])
                .arg(mount.path()),
        )
        .context("mounting a private cgroup2 (needs a kernel with cgroup v2)")?;
        let child = mount.path().join(format!(
            "ssh-fwd-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let cgroup = Self { mount, child };
        std::fs::create_dir(&cgroup.child)
            .with_context(|| format!("creating cgroup {}", cgroup.child.display()))?;
        Ok(cgroup)
    }

    /// The child cgroup's directory: what `--cgroup-root` gets.
    pub fn path(&self) -> &Path {
        &self.child
    }

    /// `program` run in `ns`'s network (or this one's) as a member of the
    /// child cgroup: a shell joins it, then execs the program.
    pub fn command(&self, ns: Option<&NetNs>, program: &str) -> Command {
        let mut c = match ns {
            Some(ns) => ns.command("sh"),
            None => Command::new("sh"),
        };
        c.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.child.join("cgroup.procs"))
            .arg(program);
        c
    }

    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.child.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for pid in self.members() {
            // SAFETY: signalling a process in the cgroup this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        cmd::wait_until(Duration::from_secs(5), || self.members().is_empty());
        let _ = std::fs::remove_dir(&self.child);
        if let Ok(c) = std::ffi::CString::new(self.mount.path().as_os_str().as_encoded_bytes()) {
            // SAFETY: valid path; failing (not mounted) is fine.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}
