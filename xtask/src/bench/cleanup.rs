//! What a Ctrl-C during a benchmark must remove: the guards' destructors
//! do not run in a signal handler, so namespaces and bpffs mounts are
//! remembered here and removed by [`after_interrupt`].

use std::{path::PathBuf, sync::Mutex};

/// bpffs mounts of agents started so far.
static BPFFS_MOUNTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub fn remember_bpffs(path: &std::path::Path) {
    if let Ok(mut all) = BPFFS_MOUNTS.lock() {
        all.push(path.to_owned());
    }
}

/// Removes this process's namespaces and unmounts the remembered bpffs.
pub fn after_interrupt() {
    ssh_fwd_tests::netns::remove_all_of_this_process();
    if let Ok(all) = BPFFS_MOUNTS.lock() {
        for path in all.iter() {
            if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
                // SAFETY: a valid path; failing (already unmounted) is fine.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}
