//! `ssh-fwd teardown`: remove everything the agent installed.

use std::{ffi::CString, os::unix::ffi::OsStrExt as _, time::Duration};

use anyhow::{Context as _, bail};

use crate::datapath::{
    hairpin, hooks,
    lock::AgentLock,
    pins::{self, BpffsArg, PinLayout},
};

mod released;

/// How long the kernel may take to let go of the links once their pins
/// are removed (an RCU grace period and a work item; milliseconds unless
/// the machine is very busy).
const RELEASE_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct TeardownArgs {
    #[command(flatten)]
    pub bpffs: BpffsArg,
    /// Remove everything even while an agent runs on this directory (the
    /// directory itself stays: the agent holds its lock there). That agent
    /// puts the data path back at its next resync (it restores deleted
    /// pins), so stop it as well to remove the data path for good.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: TeardownArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    if !layout.root().exists() {
        println!(
            "nothing to remove: {} does not exist",
            layout.root().display()
        );
        return Ok(());
    }
    // Held to the end, so no agent starts half way through.
    let lock = match AgentLock::try_take(&layout)? {
        Ok(lock) => Some(lock),
        Err(holder) if !args.force => bail!(
            "an ssh-fwd agent is running on --bpffs {} ({holder}); stop it first (its \
             DaemonSet, or `systemctl stop`), then run teardown again; `--force` removes \
             the data path under it",
            layout.root().display()
        ),
        Err(holder) => {
            println!("removing the data path under a running agent ({holder}), as --force asks");
            None
        }
    };
    remove(&layout, lock.is_none())?;
    match lock {
        Some(lock) => unmount_if_own_mount(layout.root(), lock),
        None => {
            // Removed, a second agent could lock a new directory there
            // beside the running one.
            println!(
                "kept {}: the running agent holds its lock there",
                layout.root().display()
            );
            Ok(())
        }
    }
}

/// Removes every link and map pinned under `layout`, and our versioned
/// directories, and returns once the kernel has let go of the links and
/// detached their programs (under a running agent, `forced`, they stay
/// until it stops).
fn remove(layout: &PinLayout, forced: bool) -> anyhow::Result<()> {
    let pinned = released::pinned(layout.root());
    // Links first: unpinning them detaches the programs, then the maps go.
    for (iface, link) in hooks::attached(&layout.links_dir()) {
        println!("detaching {link} from {iface}");
    }
    // Filters on clsact qdiscs (kernels without tcx) are not held by their
    // pins: each is deleted from the slot its pin names.
    for (iface, hook) in hooks::detach_filters(layout)? {
        println!("deleting tc filter {hook} from {iface}");
    }
    pins::remove_tree(&layout.links_dir())?;
    let pods = layout.pod_links();
    if !pods.is_empty() {
        println!(
            "detaching the reply program from {} pod interface(s)",
            pods.len()
        );
    }
    pins::remove_tree(&layout.pod_links_dir())?;
    for (cgroup, link) in hairpin::attached(layout) {
        println!("detaching {link} from cgroup {}", cgroup.display());
    }
    hairpin::detach_all(layout)?;
    let entries = std::fs::read_dir(layout.root())
        .with_context(|| format!("listing {}", layout.root().display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only our versioned directories: never delete what we did not create.
        if name.starts_with('v') && name[1..].chars().all(|c| c.is_ascii_digit()) {
            pins::remove_tree(&entry.path())?;
            println!("removed {}", entry.path().display());
        }
    }
    if !released::can_list() {
        println!(
            "cannot list the kernel's links (that needs CAP_SYS_ADMIN): the programs detach a \
             moment after this returns, unchecked"
        );
        return Ok(());
    }
    match released::wait_gone(&pinned, !forced, RELEASE_LIMIT) {
        Ok(()) => Ok(()),
        Err(left) if forced => {
            println!(
                "link(s) {} stay attached while the running agent holds them; they go when it stops",
                ids(&left)
            );
            Ok(())
        }
        Err(left) => bail!(
            "the kernel still has link(s) {} attached {} s after their pins were removed: \
             another process holds them open; `bpftool link show id ID` names it (pids), \
             stop it and the programs detach",
            ids(&left),
            RELEASE_LIMIT.as_secs()
        ),
    }
}

fn ids(ids: &std::collections::BTreeSet<u32>) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    ids.join(", ")
}

/// If `root` is a bpffs mount of its own (the agent mounted it) and now
/// empty, unmount it and remove the directory; else remove it if empty.
/// Takes the lock, which only goes once the directory has.
fn unmount_if_own_mount(root: &std::path::Path, lock: AgentLock) -> anyhow::Result<()> {
    let parent_is_bpffs = root
        .parent()
        .map(|p| pins::is_bpffs(p).unwrap_or(false))
        .unwrap_or(false);
    let empty = std::fs::read_dir(root)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false);
    if pins::is_bpffs(root)? && !parent_is_bpffs && empty {
        let c = CString::new(root.as_os_str().as_bytes())?;
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            println!("unmounted {}", root.display());
            let _ = std::fs::remove_dir(root);
        }
    } else if empty {
        let _ = std::fs::remove_dir(root);
    }
    drop(lock);
    Ok(())
}
