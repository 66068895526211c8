//! One agent per `--bpffs` directory. Two agents on the same pins would
//! each rewrite the other's maps; `teardown` under a running agent would
//! leave it writing to maps nothing forwards with. So the agent holds an
//! exclusive `flock` on the directory for as long as it runs (bpffs holds
//! no regular files, but a directory can be locked), and the kernel drops
//! it when the agent exits, however it exits. `teardown` holds it for the
//! whole of its run, so no agent starts half way through.
//!
//! A lock is on a directory, not on its path: removed (`rm -rf`) and made
//! again, the path names a new, unlocked directory, where a second agent
//! could start beside the first. So the agent checks at each resync that
//! the directory it holds is still the one at the path ([`AgentLock::follow`]):
//! it locks the new one, or stops if another agent got there first. For the
//! same reason a lock just taken is checked to be on the directory the path
//! names (a teardown may have removed the one opened before it was locked),
//! and taken again if not.

use std::{
    fs::File,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::Path,
    time::SystemTime,
};

use anyhow::{Context as _, anyhow, bail};

use super::{
    pins::{self, PinLayout},
    status::{StatusMap, unix_ms},
};

/// The lock, held until dropped.
#[derive(Debug)]
pub struct AgentLock {
    /// The locked directory, open: the lock lives as long as this.
    dir: File,
    id: DirId,
}

/// A directory's identity, which its path does not keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirId {
    dev: u64,
    ino: u64,
}

/// Another process holds the lock on the directory now at the path: this
/// agent's directory was removed and made again, and another agent took
/// it. This agent must stop writing.
#[derive(Debug, thiserror::Error)]
#[error(
    "--bpffs {root} was removed and made again under this agent, and another ssh-fwd process \
     holds it now ({holder}); this agent stops and leaves the node to it (two agents would \
     overwrite each other's maps)"
)]
pub struct Lost {
    root: String,
    holder: Holder,
}

/// Why [`AgentLock::follow`] failed: what the caller does next differs.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// Another process holds the directory: this agent must stop.
    #[error(transparent)]
    Lost(#[from] Lost),
    /// The directory could not be made, locked or read (bpffs unmounted,
    /// removed again meanwhile): tried again at the next resync.
    #[error(transparent)]
    Retry(#[from] anyhow::Error),
}

/// How many times the lock is tried when the directory is removed between
/// opening it and locking it (a teardown finishing).
const ATTEMPTS: usize = 5;

/// One try at the lock on the directory at the path.
enum Attempt {
    Locked(AgentLock),
    Held(Holder),
    /// The path names another directory, or none, once the one opened was
    /// locked: it was removed in between, and its lock guards nothing.
    Moved,
}

impl AgentLock {
    /// Takes the lock on `layout`'s directory, made by `prepare` (again if
    /// it is removed under the agent meanwhile), or fails naming the
    /// process that holds it.
    pub fn take(
        layout: &PinLayout,
        prepare: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Self> {
        Self::take_with(layout, prepare, || {})
    }

    /// [`AgentLock::take`], running `between` after each open and before
    /// its lock (tests: a teardown removing the directory there).
    fn take_with(
        layout: &PinLayout,
        prepare: impl FnMut() -> anyhow::Result<()>,
        between: impl FnMut(),
    ) -> anyhow::Result<Self> {
        match Self::try_take_with(layout, prepare, between)? {
            Ok(lock) => Ok(lock),
            Err(holder) if holder.is_teardown() => bail!(
                "an ssh-fwd teardown is removing --bpffs {} ({holder}); start the agent \
                 again once it is done",
                layout.root().display()
            ),
            Err(holder) => bail!(
                "another ssh-fwd agent is running on --bpffs {} ({holder}): two agents \
                 would overwrite each other's maps. Stop that one first, or give this one \
                 another --bpffs directory",
                layout.root().display()
            ),
        }
    }

    /// Takes the lock if no one holds it; else says who does.
    pub fn try_take(layout: &PinLayout) -> anyhow::Result<Result<Self, Holder>> {
        Self::try_take_with(layout, || Ok(()), || {})
    }

    /// Locks the directory `prepare` makes, trying again while it is
    /// replaced under us; `Err(holder)` if a process holds it.
    fn try_take_with(
        layout: &PinLayout,
        mut prepare: impl FnMut() -> anyhow::Result<()>,
        mut between: impl FnMut(),
    ) -> anyhow::Result<Result<Self, Holder>> {
        for _ in 0..ATTEMPTS {
            prepare()?;
            match lock_at(layout, &mut between)? {
                Attempt::Locked(lock) => return Ok(Ok(lock)),
                Attempt::Held(holder) => return Ok(Err(holder)),
                Attempt::Moved => {}
            }
        }
        Err(moving(layout))
    }

    /// Makes sure the lock is on the directory now at the path (the
    /// resync's first step, before anything is pinned there). A directory
    /// removed under the agent is made again and locked; one made again by
    /// someone else is locked if no one holds it. `Ok(true)`: the lock
    /// moved.
    pub fn follow(&mut self, layout: &PinLayout) -> Result<bool, FollowError> {
        pins::create_pin_dir(layout, layout.root())?;
        self.follow_dir(layout)
    }

    /// [`AgentLock::follow`] once the directory is there.
    fn follow_dir(&mut self, layout: &PinLayout) -> Result<bool, FollowError> {
        let root = layout.root();
        // Removed, it has no links left: its inode number may be reused.
        let removed = self.dir.metadata().is_ok_and(|m| m.nlink() == 0);
        let now = path_id(root).with_context(|| format!("reading {}", root.display()))?;
        if now == Some(self.id) && !removed {
            return Ok(false);
        }
        match lock_at(layout, &mut || {})? {
            Attempt::Locked(lock) => *self = lock,
            Attempt::Held(holder) => {
                return Err(FollowError::Lost(Lost {
                    root: root.display().to_string(),
                    holder,
                }));
            }
            Attempt::Moved => {
                return Err(FollowError::Retry(anyhow!(
                    "--bpffs {} was removed again while the agent locked it; trying again at the \
                     next resync",
                    root.display()
                )));
            }
        }
        tracing::warn!(
            bpffs = %root.display(),
            "the --bpffs directory was removed and made again under the agent; it is locked \
             again, and the deleted pins are restored"
        );
        Ok(true)
    }
}

/// Opens the directory at `layout`'s root and locks it. The lock is on
/// the directory opened, not on the path: if a teardown removed it between
/// the open and the lock, the lock guards a deleted directory, so the
/// path is checked to name the locked one still.
fn lock_at(layout: &PinLayout, between: &mut dyn FnMut()) -> anyhow::Result<Attempt> {
    let root = layout.root();
    let dir = match File::open(root) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Attempt::Moved),
        Err(e) => return Err(e).with_context(|| format!("opening {}", root.display())),
    };
    let meta = dir.metadata();
    let id = id_of(&meta.with_context(|| format!("reading {}", root.display()))?);
    between();
    if !try_lock(&dir, root)? {
        return Ok(Attempt::Held(Holder::of(layout, id)));
    }
    let now = path_id(root).with_context(|| format!("reading {}", root.display()))?;
    let removed = dir.metadata().is_ok_and(|m| m.nlink() == 0);
    Ok(if now == Some(id) && !removed {
        Attempt::Locked(AgentLock { dir, id })
    } else {
        Attempt::Moved // dropped: unlocked
    })
}

/// The identity of the directory at `root`; `None` if there is none.
fn path_id(root: &Path) -> std::io::Result<Option<DirId>> {
    match std::fs::metadata(root) {
        Ok(meta) => Ok(Some(id_of(&meta))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn id_of(meta: &std::fs::Metadata) -> DirId {
    DirId {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

/// The error when the directory keeps being removed while it is locked.
fn moving(layout: &PinLayout) -> anyhow::Error {
    anyhow::anyhow!(
        "--bpffs {} was removed while it was being locked, {ATTEMPTS} times in a row (a \
         teardown running in a loop?); try again once it is done",
        layout.root().display()
    )
}

/// Locks `dir`; `false` if someone else holds the lock.
fn try_lock(dir: &File, root: &Path) -> anyhow::Result<bool> {
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(err).with_context(|| format!("locking {}", root.display()))
}

/// Who holds a lock: the process `/proc/locks` names, with what it runs,
/// and, if it is the agent whose status is pinned there, when it was last
/// heard from.
#[derive(Debug)]
pub struct Holder {
    pid: Option<u64>,
    /// `ssh-fwd agent`, `ssh-fwd teardown`.
    command: Option<String>,
    heard_seconds_ago: Option<u64>,
}

impl Holder {
    fn of(layout: &PinLayout, id: DirId) -> Self {
        let status = StatusMap::open_pinned(layout)
            .and_then(|m| m.read())
            .ok()
            .filter(|s| s.pid != 0);
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        // None: another pid namespace, where /proc/locks shows no pid.
        let pid = lock_owner(&locks, id).map(u64::from);
        let status = status.filter(|s| pid.is_none_or(|pid| pid == s.pid));
        Self {
            pid: pid.or(status.map(|s| s.pid)),
            command: pid.and_then(command_of),
            heard_seconds_ago: status
                .map(|s| unix_ms(SystemTime::now()).saturating_sub(s.heartbeat_ms) / 1000),
        }
    }

    fn is_teardown(&self) -> bool {
        self.command
            .as_deref()
            .is_some_and(|c| c.ends_with(" teardown"))
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(pid) = self.pid else {
            return f.write_str("an agent that has not written its status yet");
        };
        write!(f, "pid {pid}")?;
        if let Some(command) = &self.command {
            write!(f, ", {command}")?;
        }
        if let Some(age) = self.heard_seconds_ago {
            write!(f, ", heard from {age} s ago")?;
        }
        Ok(())
    }
}

/// The pid holding a `flock` on directory `id`, from `/proc/locks` text:
/// `1: FLOCK  ADVISORY  WRITE 4711 00:2d:1234 0 EOF` (pid, then device
/// major and minor in hex and the inode). Lines of waiters (`->`) are not
/// holders.
fn lock_owner(locks: &str, id: DirId) -> Option<u32> {
    let (major, minor) = (libc::major(id.dev), libc::minor(id.dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let mut place = fields.get(5)?.split(':');
        let dev_major = u32::from_str_radix(place.next()?, 16).ok()?;
        let dev_minor = u32::from_str_radix(place.next()?, 16).ok()?;
        let ino: u64 = place.next()?.parse().ok()?;
        let pid: u32 = fields.get(4)?.parse().ok()?;
        (dev_major == major && dev_minor == minor && ino == id.ino && pid > 0).then_some(pid)
    })
}

/// `ssh-fwd agent` or `ssh-fwd teardown` (the program's name and first
/// argument), from `/proc/PID/cmdline`.
fn command_of(pid: u64) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let program = args.next()?;
    let program = program.rsplit('/').next().unwrap_or(&program).to_owned();
    let command = match args.next() {
        Some(first) if !first.is_empty() => format!("{program} {first}"),
        _ => program,
    };
    Some(crate::mapping::printable(&command))
}

#[cfg(test)]
mod tests;
