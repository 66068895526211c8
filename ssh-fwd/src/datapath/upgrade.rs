//! Taking a node over from the data path of layout v3 (ssh-fwd before
//! connection tracking) without ending its sessions.
//!
//! v3 pinned the same maps (same key and value layouts for the mappings)
//! and the same links, but tracked no connection: the replies of a session
//! it forwarded find no entry here and would leave with the pod's address.
//! So the takeover, in order:
//! 1. reads v3's mappings and the per-connection frontends it kept for
//!    backends behind several frontends;
//! 2. after this layout's maps are loaded, and before any program of ours
//!    runs, writes those mappings into them (when they are fresh) and marks
//!    every v3 backend in [`LEGACY`] until the idle timeout: a reply of
//!    theirs without state gets its frontend back, until the client's
//!    segment claims the connection and the server confirms it, as any
//!    other;
//! 3. moves v3's pinned links into this layout, so that attaching swaps our
//!    programs into them (the kernel does it atomically: no packet goes
//!    unhandled);
//! 4. once everything is attached, removes v3's directory (its maps go with
//!    its programs).
//!
//! Every step can run again: an agent stopped half-way resumes the takeover
//! at its next start (the v3 directory stays until step 4).
//!
//! [`LEGACY`]: ssh_fwd_common::maps::LEGACY

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aya::maps::{Array, HashMap, Map, MapData};
use ssh_fwd_common::maps::{
    CONNS, ConnKey, Endpoint, FRONTENDS, MAPPING_NAMES, MappingName, NatTarget, REVERSE,
};

use super::{conntrack::ConnTables, maps::show, pins::PinLayout};

/// The layout this version takes over.
pub const FROM_VERSION: u32 = 3;

/// What v3 left pinned, read before anything changes.
pub struct Takeover {
    dir: PathBuf,
    frontends: Vec<(Endpoint, NatTarget)>,
    reverse: Vec<(Endpoint, NatTarget)>,
    names: Vec<(u32, MappingName)>,
    conns: Vec<(ConnKey, NatTarget)>,
}

impl Takeover {
    /// The directory of layout v3 under the same `--bpffs` root.
    pub fn dir(layout: &PinLayout) -> PathBuf {
        layout.root().join(format!("v{FROM_VERSION}"))
    }

    /// Reads v3's maps, if v3 left a data path here.
    pub fn find(layout: &PinLayout) -> anyhow::Result<Option<Self>> {
        let dir = Self::dir(layout);
        if !dir.exists() {
            return Ok(None);
        }
        let maps = dir.join("maps");
        let open = |name: &str| -> anyhow::Result<Map> {
            let path = maps.join(name);
            let data = MapData::from_pin(&path).with_context(|| {
                format!(
                    "cannot open {} of the ssh-fwd data path being upgraded; if that \
                     directory is a leftover, remove it with `ssh-fwd teardown --bpffs {}` \
                     (sessions through it end)",
                    path.display(),
                    layout.root().display()
                )
            })?;
            Ok(Map::from_map_data(data)?)
        };
        let hash = |name: &str| -> anyhow::Result<Vec<(Endpoint, NatTarget)>> {
            let map: HashMap<MapData, Endpoint, NatTarget> =
                HashMap::try_from(open(name)?).with_context(|| format!("v3 map {name}"))?;
            Ok(map.iter().filter_map(Result::ok).collect())
        };
        let frontends = hash(FRONTENDS)?;
        let reverse = hash(REVERSE)?;
        // v3's CONNS is an LRU; aya reads both kinds through one type.
        let conns: HashMap<MapData, ConnKey, NatTarget> =
            HashMap::try_from(open(CONNS)?).context("v3 map CONNS")?;
        let conns = conns.iter().filter_map(Result::ok).collect();
        let names: Array<MapData, MappingName> =
            Array::try_from(open(MAPPING_NAMES)?).context("v3 map MAPPING_NAMES")?;
        let slots: std::collections::BTreeSet<u32> =
            frontends.iter().map(|(_, t)| t.slot).collect();
        let names = slots
            .into_iter()
            .filter_map(|slot| Some((slot, names.get(&slot, 0).ok()?)))
            .collect();
        Ok(Some(Self {
            dir,
            frontends,
            reverse,
            names,
            conns,
        }))
    }

    /// The backends v3 was forwarding to.
    pub fn backends(&self) -> Vec<Endpoint> {
        self.reverse.iter().map(|(b, _)| *b).collect()
    }

    pub fn mappings(&self) -> usize {
        self.frontends.len()
    }

    /// Writes v3's mappings into this layout's fresh maps (an agent that
    /// already ran on this layout keeps what it wrote), and marks v3's
    /// backends until `until` (kernel clock). Returns how many recorded
    /// connection frontends were kept.
    pub fn seed(
        &self,
        layout: &PinLayout,
        fresh: bool,
        tables: &mut ConnTables,
        until: u64,
    ) -> anyhow::Result<usize> {
        if fresh {
            for (name, entries) in [(FRONTENDS, &self.frontends), (REVERSE, &self.reverse)] {
                let mut map: HashMap<MapData, Endpoint, NatTarget> =
                    HashMap::try_from(super::maps::open_pin(layout, name)?)?;
                for (key, value) in entries {
                    map.insert(key, value, 0)
                        .with_context(|| format!("writing {name} entry {}", show(key)))?;
                }
            }
            let mut names: Array<MapData, MappingName> =
                Array::try_from(super::maps::open_pin(layout, MAPPING_NAMES)?)?;
            for (slot, name) in &self.names {
                names
                    .set(*slot, name, 0)
                    .with_context(|| format!("writing {MAPPING_NAMES} slot {slot}"))?;
            }
        }
        tables.legacy().seed(&self.backends(), &self.conns, until)
    }

    /// Moves v3's pinned links (external interfaces and pods') into this
    /// layout, where attaching finds them and swaps our programs in. A link
    /// this layout already holds (a takeover resumed) wins: v3's is dropped.
    pub fn move_links(&self, layout: &PinLayout) -> anyhow::Result<usize> {
        let mut moved = move_children(&self.dir.join("pod-links"), &layout.pod_links_dir())?;
        let links = self.dir.join("links");
        for iface in read_dir(&links)? {
            let target = layout
                .links_dir()
                .join(iface.file_name().unwrap_or_default());
            std::fs::create_dir_all(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            moved += move_children(&iface, &target)?;
        }
        Ok(moved)
    }

    /// Removes v3's directory: its maps are unpinned and freed once its
    /// programs, replaced by now, are gone.
    pub fn finish(self) -> anyhow::Result<()> {
        super::pins::remove_tree(&self.dir)
    }
}

fn read_dir(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.flatten().map(|e| e.path()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

/// Renames every pin in `from` into `to` (same bpffs mount); returns how
/// many moved.
fn move_children(from: &Path, to: &Path) -> anyhow::Result<usize> {
    let mut moved = 0;
    for pin in read_dir(from)? {
        let target = to.join(pin.file_name().unwrap_or_default());
        if target.exists() {
            std::fs::remove_file(&pin).with_context(|| format!("removing {}", pin.display()))?;
            continue;
        }
        std::fs::rename(&pin, &target)
            .with_context(|| format!("moving {} to {}", pin.display(), target.display()))?;
        moved += 1;
    }
    Ok(moved)
}
