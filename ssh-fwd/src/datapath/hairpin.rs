//! Hairpin: the cgroup v2 `connect4`/`connect6` and
//! `getpeername4`/`getpeername6` programs that let clients inside the
//! cluster dial `EXTERNAL_IP:PORT` (see `ssh_fwd_common::hairpin`).
//! Attached to one cgroup (`--cgroup-root`) through pinned links, so they
//! stay when the agent exits:
//!
//! ```text
//! <bpffs>/v<LAYOUT_VERSION>/hairpin/<cgroup path, escaped>/connect4
//! <bpffs>/v<LAYOUT_VERSION>/hairpin/<cgroup path, escaped>/getpeername4
//! <bpffs>/v<LAYOUT_VERSION>/hairpin/<cgroup path, escaped>/connect6
//! <bpffs>/v<LAYOUT_VERSION>/hairpin/<cgroup path, escaped>/getpeername6
//! ```
//!
//! A starting agent attaches its own programs anew and renames their pins
//! over the previous agent's, which detaches those: the two run side by side
//! for a moment, which is harmless, as each program leaves an address it
//! has already translated alone. Links to other cgroups (a changed
//! `--cgroup-root`, or `--hairpin off`) are removed once ours are in place.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use aya::{
    Ebpf,
    programs::{CgroupAttachMode, CgroupSockAddr, links::FdLink},
};

use super::{cgroup, pins::PinLayout};

/// Translates TCP connects to mapped frontends.
pub const PROG_CONNECT4: &str = "ssh_fwd_connect4";
/// Shows translated sockets their dialled frontend.
pub const PROG_GETPEERNAME4: &str = "ssh_fwd_getpeername4";

/// [`PROG_CONNECT4`] for IPv6 sockets.
pub const PROG_CONNECT6: &str = "ssh_fwd_connect6";
/// [`PROG_GETPEERNAME4`] for IPv6 sockets.
pub const PROG_GETPEERNAME6: &str = "ssh_fwd_getpeername6";

/// The programs and their pin names, each `getpeername` before its
/// `connect`: a socket translated from the first moment then shows the
/// right peer.
const PROGRAMS: [(&str, &str); 4] = [
    (PROG_GETPEERNAME4, "getpeername4"),
    (PROG_CONNECT4, "connect4"),
    (PROG_GETPEERNAME6, "getpeername6"),
    (PROG_CONNECT6, "connect6"),
];

/// `--hairpin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HairpinMode {
    /// Attach to the cgroup v2 hierarchy (`--cgroup-root`, or the one in
    /// /proc/mounts); without one, run without hairpin and say so.
    Auto,
    /// No hairpin; links a previous agent attached are removed.
    Off,
}

/// What the agent was asked for.
#[derive(Clone, Debug)]
pub struct Settings {
    pub mode: HairpinMode,
    /// `--cgroup-root`; `None`: the first cgroup v2 mount in /proc/mounts.
    pub cgroup_root: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            mode: HairpinMode::Off,
            cgroup_root: None,
        }
    }
}

/// Where the hairpin programs go: a checked cgroup v2 directory, or
/// nowhere. Decided before anything is changed.
pub fn resolve(settings: &Settings) -> anyhow::Result<Option<PathBuf>> {
    if settings.mode == HairpinMode::Off {
        tracing::info!("hairpin off (--hairpin off): in-cluster clients cannot use frontends");
        return Ok(None);
    }
    if let Some(root) = &settings.cgroup_root {
        let is_v2 = cgroup::is_cgroup2(root).with_context(|| {
            format!(
                "--cgroup-root {}: not found; pass the directory where cgroup v2 is mounted \
                 (in Kubernetes: a hostPath volume of the host's cgroup v2 mount)",
                root.display()
            )
        })?;
        if !is_v2 {
            bail!(
                "--cgroup-root {} is not a cgroup v2 directory; pass the cgroup2 mount \
                 (`grep cgroup2 /proc/mounts`), or --hairpin off",
                root.display()
            );
        }
        tracing::info!(cgroup = %root.display(), "hairpin: attaching to --cgroup-root");
        return Ok(Some(root.clone()));
    }
    match cgroup::default_root() {
        Some(root) => {
            tracing::info!(
                cgroup = %root.display(),
                "hairpin: attaching to the cgroup v2 hierarchy found in /proc/mounts"
            );
            Ok(Some(root))
        }
        None => {
            tracing::warn!(
                "hairpin off: no cgroup v2 hierarchy in /proc/mounts (a cgroup v1-only host); \
                 in-cluster clients cannot use frontends; mount one \
                 (`mount -t cgroup2 none /sys/fs/cgroup/unified`) and pass --cgroup-root"
            );
            Ok(None)
        }
    }
}

/// Attaches the programs to `root` (or to nothing) and removes the links
/// of any other cgroup.
pub fn apply(ebpf: &mut Ebpf, layout: &PinLayout, root: Option<&Path>) -> anyhow::Result<()> {
    let keep = match root {
        Some(root) => {
            attach(ebpf, layout, root)?;
            Some(pin_dir(layout, root))
        }
        None => None,
    };
    for (dir, cgroup) in pinned(layout) {
        if Some(&dir) != keep.as_ref() {
            tracing::info!(cgroup = %cgroup.display(), "hairpin: detaching from a cgroup no longer used");
            super::pins::remove_tree(&dir)?;
        }
    }
    Ok(())
}

fn attach(ebpf: &mut Ebpf, layout: &PinLayout, root: &Path) -> anyhow::Result<()> {
    let dir = pin_dir(layout, root);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cgroup = open_cgroup(root)?;
    for (program, pin_name) in PROGRAMS {
        let prog = program_mut(ebpf, program)?;
        super::object::retrying(|| prog.load())
            .map_err(|e| super::object::verifier_to_debug(program, e))
            .with_context(|| format!("loading cgroup program {program}"))?;
        let link = attach_link(prog, program, &cgroup, root)?;
        let pin = dir.join(pin_name);
        let fresh = dir.join(format!("{pin_name}-new"));
        let replaced = pin.exists();
        // Left by an agent stopped between pinning and renaming.
        match std::fs::remove_file(&fresh) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", fresh.display()));
            }
            _ => {}
        }
        link.pin(&fresh)
            .with_context(|| format!("pinning link {}", fresh.display()))?;
        // The rename drops the previous agent's pin, which detaches its link.
        std::fs::rename(&fresh, &pin)
            .with_context(|| format!("renaming {} to {}", fresh.display(), pin.display()))?;
        tracing::debug!(program, replaced, "hairpin program attached");
    }
    Ok(())
}

/// Attaches again (the programs are loaded) the links to `root` whose pins
/// are gone, and returns their pins. The agent keeps no fd of a link, so a
/// missing pin means a detached program.
pub fn restore(ebpf: &mut Ebpf, layout: &PinLayout, root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = pin_dir(layout, root);
    let missing: Vec<(&str, PathBuf)> = PROGRAMS
        .iter()
        .map(|(program, pin_name)| (*program, dir.join(pin_name)))
        .filter(|(_, pin)| !pin.exists())
        .collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cgroup = open_cgroup(root)?;
    let mut restored = Vec::new();
    for (program, pin) in missing {
        attach_link(program_mut(ebpf, program)?, program, &cgroup, root)?
            .pin(&pin)
            .with_context(|| format!("pinning link {}", pin.display()))?;
        restored.push(pin);
    }
    Ok(restored)
}

fn open_cgroup(root: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::File::open(root).with_context(|| format!("opening cgroup {}", root.display()))
}

fn program_mut<'a>(ebpf: &'a mut Ebpf, program: &str) -> anyhow::Result<&'a mut CgroupSockAddr> {
    ebpf.program_mut(program)
        .ok_or_else(|| anyhow!("eBPF object lacks {program}; rebuild ssh-fwd"))?
        .try_into()
        .with_context(|| program.to_owned())
}

/// A new link of the loaded `prog` to the cgroup, not pinned yet.
fn attach_link(
    prog: &mut CgroupSockAddr,
    program: &str,
    cgroup: &std::fs::File,
    root: &Path,
) -> anyhow::Result<FdLink> {
    // A bpf_link always runs beside the cgroup's other programs (a CNI's,
    // systemd's), and the kernel refuses any flag with one (EINVAL):
    // `Single` is aya's "no flags".
    let id = prog
        .attach(cgroup, CgroupAttachMode::Single)
        .with_context(|| format!("attaching {program} to cgroup {}", root.display()))?;
    FdLink::try_from(prog.take_link(id)?)
        .map_err(|e| anyhow!("the {program} link cannot be pinned (needs Linux 5.7+): {e}"))
}

/// Every cgroup with pinned hairpin links, and their pin names.
pub fn attached(layout: &PinLayout) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for (dir, cgroup) in pinned(layout) {
        for link in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            out.push((
                cgroup.clone(),
                link.file_name().to_string_lossy().into_owned(),
            ));
        }
    }
    out.sort();
    out
}

/// Removes every hairpin link (for `teardown`).
pub fn detach_all(layout: &PinLayout) -> anyhow::Result<()> {
    super::pins::remove_tree(&hairpin_dir(layout))
}

fn hairpin_dir(layout: &PinLayout) -> PathBuf {
    layout.version_dir().join("hairpin")
}

fn pin_dir(layout: &PinLayout, cgroup: &Path) -> PathBuf {
    hairpin_dir(layout).join(escape(&cgroup.to_string_lossy()))
}

/// The pin directories under `hairpin/` and the cgroups they stand for.
fn pinned(layout: &PinLayout) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = std::fs::read_dir(hairpin_dir(layout))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let cgroup = PathBuf::from(unescape(&e.file_name().to_string_lossy()));
            (e.path(), cgroup)
        })
        .collect();
    out.sort();
    out
}

/// A cgroup path as one bpffs name: bpffs refuses dots in names, and a path
/// has slashes; `%`, `/` and `.` are percent-encoded, reversibly.
fn escape(path: &str) -> String {
    path.replace('%', "%25")
        .replace('/', "%2F")
        .replace('.', "%2E")
}

fn unescape(name: &str) -> String {
    name.replace("%2F", "/")
        .replace("%2E", ".")
        .replace("%25", "%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_become_bpffs_names_and_back() {
        for path in [
            "/sys/fs/cgroup/unified",
            "/tmp/.tmpX1/child.slice",
            "/odd/100%2F/name",
        ] {
            let name = escape(path);
            assert!(!name.contains('/') && !name.contains('.'), "{name}");
            assert_eq!(unescape(&name), path);
        }
    }

    #[test]
    fn hairpin_off_resolves_to_no_cgroup_without_looking() {
        let settings = Settings {
            mode: HairpinMode::Off,
            cgroup_root: Some("/nonexistent".into()),
        };
        assert_eq!(resolve(&settings).unwrap(), None);
    }

    #[test]
    fn a_cgroup_root_that_is_not_cgroup_v2_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            mode: HairpinMode::Auto,
            cgroup_root: Some(dir.path().into()),
        };
        let err = format!("{:#}", resolve(&settings).unwrap_err());
        assert!(err.contains("is not a cgroup v2 directory"), "{err}");
        assert!(err.contains("--hairpin off"), "{err}");
        let missing = Settings {
            cgroup_root: Some(dir.path().join("nope")),
            ..settings
        };
        let err = format!("{:#}", resolve(&missing).unwrap_err());
        assert!(err.contains("not found"), "{err}");
    }
}
