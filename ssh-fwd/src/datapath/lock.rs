//! One agent per `--bpffs` directory. Two agents on the same pins would
//! each rewrite the other's maps; `teardown` under a running agent would
//! leave it writing to maps nothing forwards with. So the agent holds an
//! exclusive `flock` on the directory for as long as it runs (bpffs holds
//! no regular files, but a directory can be locked), and the kernel drops
//! it when the agent exits, however it exits.

use std::{fs::File, os::fd::AsRawFd as _, time::SystemTime};

use anyhow::{Context as _, bail};

use super::{
    pins::PinLayout,
    status::{StatusMap, unix_ms},
};

/// The lock, held until dropped.
#[derive(Debug)]
pub struct AgentLock(#[allow(dead_code, reason = "held for its lock, never read")] File);

impl AgentLock {
    /// Takes the lock on `layout`'s directory, or fails naming the agent
    /// that holds it.
    pub fn take(layout: &PinLayout) -> anyhow::Result<Self> {
        match try_lock(layout)? {
            Some(file) => Ok(Self(file)),
            None => bail!(
                "another ssh-fwd agent is running on --bpffs {} ({}): two agents would \
                 overwrite each other's maps. Stop that one first, or give this one another \
                 --bpffs directory",
                layout.root().display(),
                holder(layout)
            ),
        }
    }

    /// Whether an agent holds the lock now; `Some` says which.
    pub fn held_by(layout: &PinLayout) -> anyhow::Result<Option<String>> {
        Ok(match try_lock(layout)? {
            Some(_) => None,
            None => Some(holder(layout)),
        })
    }
}

/// The directory, locked; `None` if someone else holds the lock.
fn try_lock(layout: &PinLayout) -> anyhow::Result<Option<File>> {
    let root = layout.root();
    let dir = File::open(root).with_context(|| format!("opening {}", root.display()))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(dir));
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(None);
    }
    Err(err).with_context(|| format!("locking {}", root.display()))
}

/// Who holds the lock, as the holder's pinned status tells.
fn holder(layout: &PinLayout) -> String {
    let Ok(status) = StatusMap::open_pinned(layout).and_then(|m| m.read()) else {
        return "an agent that has not written its status yet".into();
    };
    if status.pid == 0 {
        return "an agent that has not written its status yet".into();
    }
    let age = unix_ms(SystemTime::now()).saturating_sub(status.heartbeat_ms) / 1000;
    format!("pid {}, heard from {age} s ago", status.pid)
}
