//! What test processes killed before their guards ran (a SIGKILL, a
//! `timeout`, a CI job cancelled) left on the machine: their network
//! namespaces and bpffs mounts. Each carries its owner's pid in its name;
//! the first guard a test process creates removes those of processes that
//! no longer run.

use std::{path::Path, sync::Once};

use crate::cmd;

/// The prefix of the harness's state directories (`tests/src/agent.rs`).
pub const STATE_PREFIX: &str = "ssh-fwd-state-";

static SWEPT: Once = Once::new();

/// Removes, once per process, what dead test processes left.
pub fn sweep_once() {
    SWEPT.call_once(|| {
        sweep_namespaces();
        sweep_state_dirs(&std::env::temp_dir());
    });
}

/// The pid a leftover's name carries after `prefix`, up to the next `-`.
fn owner(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.split('-').next()?.parse().ok()
}

fn dead(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn sweep_namespaces() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if owner(&name, "sfw").is_some_and(dead) {
            let _ = cmd::ip(&["netns", "del", &name]);
        }
    }
}

fn sweep_state_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !owner(&name, STATE_PREFIX).is_some_and(dead) {
            continue;
        }
        let mount = entry.path().join("bpffs");
        if let Ok(c) = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes()) {
            // SAFETY: a valid path; failing (not mounted) is fine.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftovers_owner_is_read_from_its_name() {
        assert_eq!(owner("sfw27523-37-progtest", "sfw"), Some(27523));
        assert_eq!(owner("ssh-fwd-state-4242-x1Yz", STATE_PREFIX), Some(4242));
        assert_eq!(owner("ssh-fwd-stateDbctHD", STATE_PREFIX), None);
        assert_eq!(owner("sfwhost", "sfw"), None);
    }

    #[test]
    fn a_dead_processes_state_dir_is_removed_and_a_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // No process has that pid (above pid_max); ours is alive.
        let gone = tmp.path().join(format!("{STATE_PREFIX}999999999-abc"));
        let live = tmp
            .path()
            .join(format!("{STATE_PREFIX}{}-abc", std::process::id()));
        for dir in [&gone, &live] {
            std::fs::create_dir_all(dir.join("bpffs")).unwrap();
        }
        sweep_state_dirs(tmp.path());
        assert!(!gone.exists(), "the dead process's directory is removed");
        assert!(live.exists(), "a running process's directory stays");
    }
}
