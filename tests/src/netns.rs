//! A network namespace that is deleted when dropped.

use std::{
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::Context as _;

use crate::cmd;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A named network namespace (`ip netns`), unique to this process.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates `sfw<pid>-<n>-<role>` with loopback up.
    pub fn new(role: &str) -> anyhow::Result<Self> {
        crate::leftovers::sweep_once();
        let name = format!(
            "sfw{}-{}-{role}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        cmd::ip(&["netns", "add", &name]).with_context(|| format!("creating netns {name}"))?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`, for `nsenter --net=`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// `ip -n NAME ARGS...`
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        cmd::ip(&all)
    }

    /// A command run inside this namespace's network only (`nsenter --net`):
    /// unlike `ip netns exec` it keeps the host's mounts, so a bpffs the
    /// process mounts outlives it.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.path()))
            .arg("--")
            .arg(program);
        c
    }

    /// Moves the calling thread (only) into this namespace, for code that
    /// must run there in-process, such as BPF_PROG_TEST_RUN, whose route
    /// lookups see the caller's namespace. The thread should end with the test.
    pub fn enter_on_this_thread(&self) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd as _;
        let file =
            std::fs::File::open(self.path()).with_context(|| format!("opening {}", self.path()))?;
        // SAFETY: a valid namespace fd; CLONE_NEWNET affects only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            anyhow::bail!(
                "entering netns {}: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// Sets a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> anyhow::Result<()> {
        cmd::run(
            self.command("sysctl")
                .args(["-qw", &format!("{key}={value}")]),
        )
        .map(|_| ())
    }

    /// Creates a veth pair between two namespaces.
    pub fn veth(&self, name: &str, peer: &NetNs, peer_name: &str) -> anyhow::Result<()> {
        cmd::ip(&[
            "link", "add", name, "netns", &self.name, "type", "veth", "peer", "name", peer_name,
            "netns", &peer.name,
        ])?;
        self.ip(&["link", "set", name, "up"])?;
        peer.ip(&["link", "set", peer_name, "up"])
    }
}

/// Kills every process in, and deletes, every namespace this process made.
/// For signal handlers, where the guards' destructors will not run.
pub fn remove_all_of_this_process() {
    let prefix = format!("sfw{}-", std::process::id());
    let Ok(list) = cmd::run(Command::new("ip").args(["netns", "list"])) else {
        return;
    };
    for name in list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
    {
        kill_processes_in(name);
        let _ = cmd::ip(&["netns", "del", name]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // A process that left its group (sshd's session for each
        // connection calls setsid) outlives its parent's kill, and keeps
        // the namespace alive after `netns del`: every one goes first.
        kill_processes_in(&self.name);
        let _ = cmd::ip(&["netns", "del", &self.name]);
    }
}

/// SIGKILLs every process in the namespace `name`.
fn kill_processes_in(name: &str) {
    let Ok(pids) = cmd::run(Command::new("ip").args(["netns", "pids", name])) else {
        return;
    };
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: signalling a process inside a namespace we created.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs root and network namespaces: `cargo xtask test` runs it"]
    fn a_process_that_left_its_group_goes_with_its_namespace() {
        crate::privilege::require();
        let ns = NetNs::new("leak").unwrap();
        let child = ns
            .command("setsid")
            .args(["--fork", "sleep", "300"])
            .status()
            .unwrap();
        assert!(child.success());
        let name = ns.name().to_owned();
        let pids = || cmd::run(Command::new("ip").args(["netns", "pids", &name])).unwrap();
        assert!(
            !pids().trim().is_empty(),
            "the sleeper runs in the namespace"
        );
        let orphan: i32 = pids().split_whitespace().next().unwrap().parse().unwrap();
        drop(ns);
        // Reaped by init soon after the kill.
        let gone = cmd::wait_until(std::time::Duration::from_secs(5), || {
            // SAFETY: signal 0 only tests that the pid exists.
            let alive = unsafe { libc::kill(orphan, 0) } == 0;
            !alive
        });
        assert!(gone, "process {orphan} outlived its namespace");
    }
}
