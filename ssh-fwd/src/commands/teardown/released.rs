//! Waiting for unpinned links to leave their hooks. Removing a link's pin
//! drops the pin's reference only after an RCU grace period, and the last
//! reference detaches the program from a work item after that: under load,
//! a program could still be forwarding when `teardown` said it was gone.
//! The kernel forgets the link's id before it detaches the program
//! (`bpf_link_free` frees the id, then releases the link), so a link
//! missing from the list may still be attached for a moment; its program is
//! put only by that release, so once no agent holds the programs, their
//! going is the detach itself.

use std::{
    collections::BTreeSet,
    path::Path,
    time::{Duration, Instant},
};

use aya::programs::{
    links::{FdLink, LinkError, PinnedLink},
    loaded_links, loaded_programs,
};

/// The kernel ids of the links pinned under a directory, and of their
/// programs.
#[derive(Debug, Default)]
pub struct Pinned {
    pub links: BTreeSet<u32>,
    pub programs: BTreeSet<u32>,
}

/// The links pinned anywhere under `dir`. The fds opened to read them are
/// closed again, so only the pins hold the links.
pub fn pinned(dir: &Path) -> Pinned {
    let mut found = Pinned::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            let below = pinned(&path);
            found.links.extend(below.links);
            found.programs.extend(below.programs);
        } else if let Some((link, program)) = link_ids(&path) {
            found.links.insert(link);
            found.programs.insert(program);
        }
    }
    found
}

/// The link's id and its program's; `None` for a pin that is not a link
/// (a map's).
fn link_ids(pin: &Path) -> Option<(u32, u32)> {
    let link = FdLink::from(PinnedLink::from_pin(pin).ok()?);
    link.info().ok().map(|info| (info.id(), info.program_id()))
}

/// Waits until the kernel has none of the links any more and, with
/// `programs_too` (no agent holds them), none of their programs, up to
/// `limit`; `Err` with the links left then. Programs still loaded at the
/// limit once their links are gone are held by another process: their
/// links' release has long detached them.
pub fn wait_gone(
    pinned: &Pinned,
    programs_too: bool,
    limit: Duration,
) -> Result<(), BTreeSet<u32>> {
    let deadline = Instant::now() + limit;
    loop {
        let links = still_loaded(&pinned.links, loaded_link_ids());
        let programs = if programs_too {
            still_loaded(&pinned.programs, loaded_program_ids())
        } else {
            BTreeSet::new()
        };
        match settled(links, &programs, Instant::now() >= deadline) {
            Some(result) => return result,
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Whether waiting is over: done once neither links nor programs are
/// left; at the deadline, an error only for links left.
fn settled(
    links: BTreeSet<u32>,
    programs: &BTreeSet<u32>,
    past_deadline: bool,
) -> Option<Result<(), BTreeSet<u32>>> {
    match (links.is_empty(), programs.is_empty(), past_deadline) {
        (true, true, _) => Some(Ok(())),
        (true, false, true) => Some(Ok(())),
        (false, _, true) => Some(Err(links)),
        (_, _, false) => None,
    }
}

fn still_loaded(ids: &BTreeSet<u32>, loaded: impl Iterator<Item = u32>) -> BTreeSet<u32> {
    loaded.filter(|id| ids.contains(id)).collect()
}

/// Whether this process may list the kernel's links (it needs
/// CAP_SYS_ADMIN): without, [`wait_gone`] would find none left at once.
/// Only a refusal says so: a link of another process that goes between
/// being listed and being opened fails too (ENOENT), and says nothing.
pub fn can_list() -> bool {
    !loaded_links().any(|r| r.is_err_and(|e| denied(&e)))
}

/// Whether the kernel refused a link syscall for want of a capability.
fn denied(e: &LinkError) -> bool {
    matches!(e, LinkError::SyscallError(s) if s.io_error.kind() == std::io::ErrorKind::PermissionDenied)
}

fn loaded_link_ids() -> impl Iterator<Item = u32> {
    loaded_links().filter_map(Result::ok).map(|info| info.id())
}

fn loaded_program_ids() -> impl Iterator<Item = u32> {
    loaded_programs()
        .filter_map(Result::ok)
        .map(|info| info.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syscall_error(errno: i32) -> LinkError {
        LinkError::SyscallError(aya::sys::SyscallError {
            call: "bpf_link_get_fd_by_id",
            io_error: std::io::Error::from_raw_os_error(errno),
        })
    }

    /// A link freed by another process between the listing and the open
    /// (ENOENT) is no sign of missing privilege; EPERM is.
    #[test]
    fn only_a_refusal_means_the_links_cannot_be_listed() {
        assert!(denied(&syscall_error(libc::EPERM)));
        assert!(!denied(&syscall_error(libc::ENOENT)));
        assert!(!denied(&LinkError::UnknownLinkType(99)));
    }

    fn ids(list: &[u32]) -> BTreeSet<u32> {
        list.iter().copied().collect()
    }

    /// A link gone from the kernel's list whose program is still loaded
    /// may still be attached: teardown waits on, and only links left at
    /// the deadline are an error.
    #[test]
    fn teardown_waits_for_the_programs_after_their_links_until_the_deadline() {
        assert_eq!(settled(ids(&[]), &ids(&[]), false), Some(Ok(())));
        assert_eq!(settled(ids(&[]), &ids(&[7]), false), None);
        assert_eq!(settled(ids(&[]), &ids(&[7]), true), Some(Ok(())));
        assert_eq!(settled(ids(&[3]), &ids(&[]), false), None);
        assert_eq!(settled(ids(&[3]), &ids(&[7]), true), Some(Err(ids(&[3]))));
    }
}
