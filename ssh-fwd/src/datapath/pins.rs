//! Where the agent keeps its state on bpffs, and making sure bpffs is there.
//!
//! ```text
//! <bpffs>/v<LAYOUT_VERSION>/maps/<MAP NAME>
//! <bpffs>/v<LAYOUT_VERSION>/links/<iface>/<hook>
//! <bpffs>/v<LAYOUT_VERSION>/pod-links/<ifindex>
//! ```

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use ssh_fwd_common::maps::LAYOUT_VERSION;

/// Default `--bpffs` directory.
pub const DEFAULT_BPFFS: &str = "/sys/fs/bpf/ssh-fwd";

/// `--bpffs`, shared by every command that touches the pinned state.
#[derive(Clone, Debug, clap::Args)]
pub struct BpffsArg {
    /// Directory on a bpf filesystem for pinned maps and links; mounted if it
    /// is not on bpffs yet.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
}

/// The pinned-state layout under one `--bpffs` directory.
#[derive(Clone, Debug)]
pub struct PinLayout {
    root: PathBuf,
}

impl PinLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn version_dir(&self) -> PathBuf {
        self.root.join(format!("v{LAYOUT_VERSION}"))
    }

    pub fn maps_dir(&self) -> PathBuf {
        self.version_dir().join("maps")
    }

    pub fn links_dir(&self) -> PathBuf {
        self.version_dir().join("links")
    }

    /// The reply program's links on pods' interfaces, one per interface,
    /// named by interface index: pods' interface names are reused by the
    /// next pod, their indexes are not.
    pub fn pod_links_dir(&self) -> PathBuf {
        self.version_dir().join("pod-links")
    }

    /// Interface indexes with a pinned reply link, ascending.
    pub fn pod_links(&self) -> Vec<u32> {
        let mut out: Vec<u32> = std::fs::read_dir(self.pod_links_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        out.sort_unstable();
        out
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.maps_dir().join(name)
    }

    /// Directories of other layout versions here: an older (or newer)
    /// ssh-fwd's data path, possibly still attached.
    pub fn other_versions(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mine = format!("v{LAYOUT_VERSION}");
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name != mine
                    && name.len() > 1
                    && name.starts_with('v')
                    && name[1..].chars().all(|c| c.is_ascii_digit())
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        found
    }

    /// Whether a previous agent left maps here.
    pub fn has_maps(&self) -> bool {
        self.map(ssh_fwd_common::maps::FRONTENDS).exists()
    }

    /// Makes sure the root exists and is on bpffs (mounting one if not).
    pub fn prepare_root(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create --bpffs directory {}", self.root.display()))?;
        if !is_bpffs(&self.root)? {
            mount_bpffs(&self.root)?;
            tracing::info!(dir = %self.root.display(), "mounted a bpf filesystem");
        }
        Ok(())
    }

    /// [`PinLayout::prepare_root`], and the version directories.
    pub fn prepare(&self) -> anyhow::Result<()> {
        self.prepare_root()?;
        for dir in [self.maps_dir(), self.links_dir(), self.pod_links_dir()] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(())
    }
}

/// Creates `dir` for pins under a running agent, refusing when the root is
/// no longer on bpffs (unmounted under the agent, by `ssh-fwd teardown
/// --force` for one): directories made there would hold no pin.
pub fn create_pin_dir(layout: &PinLayout, dir: &Path) -> anyhow::Result<()> {
    if needs_mount(layout.root()) {
        bail!(
            "{} is no longer on a bpf filesystem (unmounted under the agent?), so nothing can be \
             pinned there; restart the agent, which mounts it again",
            layout.root().display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Whether preparing `path` needs a bpffs mount: not when it, or the nearest
/// ancestor that exists, is on bpffs already (a subdirectory is made there,
/// as in Kubernetes with the host's /sys/fs/bpf mounted into the pod).
pub fn needs_mount(path: &Path) -> bool {
    let Some(existing) = path.ancestors().find(|p| p.exists()) else {
        return true;
    };
    !is_bpffs(existing).unwrap_or(false)
}

/// Whether `path` is on a bpf filesystem.
pub fn is_bpffs(path: &Path) -> anyhow::Result<bool> {
    is_fs(path, libc::BPF_FS_MAGIC.into())
}

/// Whether `path` is on a filesystem whose `statfs` type is `magic`.
pub fn is_fs(path: &Path, magic: i128) -> anyhow::Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", path.display()))?;
    // SAFETY: a plain C struct of integers; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs writes into the struct we own; `c` outlives the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", path.display()));
    }
    // glibc's f_type is signed and musl's unsigned (the static image's
    // binary is built for musl); i128 holds both without a lossy cast.
    Ok(i128::from(st.f_type) == magic)
}

fn mount_bpffs(path: &Path) -> anyhow::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    let fstype = c"bpf";
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EPERM) {
            bail!(
                "{} is not on a bpf filesystem and mounting one there was refused (needs \
                 CAP_SYS_ADMIN); mount it first with `mount -t bpf bpf {}`, or pass a --bpffs \
                 directory that is already on bpffs (in Kubernetes: a hostPath volume of \
                 /sys/fs/bpf)",
                path.display(),
                path.display()
            );
        }
        return Err(err).with_context(|| format!("mount -t bpf bpf {}", path.display()));
    }
    Ok(())
}

/// Removes a directory tree on bpffs, unpinning every map and link in it.
pub fn remove_tree(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_pod_links_are_read_back_by_index() {
        let dir = tempfile::tempdir().unwrap();
        let layout = PinLayout::new(dir.path());
        assert!(layout.pod_links().is_empty(), "no directory yet");
        std::fs::create_dir_all(layout.pod_links_dir()).unwrap();
        for name in ["12", "7", "not-an-index"] {
            std::fs::write(layout.pod_links_dir().join(name), b"").unwrap();
        }
        assert_eq!(layout.pod_links(), [7, 12]);
    }

    #[test]
    fn other_layout_versions_are_found_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            format!("v{LAYOUT_VERSION}"),
            "v0".into(),
            "v999".into(),
            "vx".into(),
            "other".into(),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let layout = PinLayout::new(dir.path());
        assert_eq!(
            layout.other_versions(),
            [dir.path().join("v0"), dir.path().join("v999")]
        );
    }
}
