//! What a layout directory holds, read straight from bpffs with no code
//! of the agent's: which maps and links are pinned, and what is in the
//! connection tables and counters.

use std::{collections::BTreeMap, path::Path};

use aya::{
    maps::{HashMap, Map, MapData, MapInfo, PerCpuArray},
    programs::links::{FdLink, PinnedLink},
};
use ssh_fwd_common::maps::{CONNS, Conn, ConnKey, MAPPING_STATS, MappingCounters, SOURCES};

/// A pinned map: which one (its id) and its definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
}

/// The maps pinned in `dir/maps`, by name; the links in `dir/links/*` and
/// `dir/pod-links`, by path under `dir`, each with its id and the id of
/// the program it runs.
#[derive(Debug)]
pub struct Pins {
    pub maps: BTreeMap<String, Pinned>,
    pub links: BTreeMap<String, (u32, u32)>,
}

impl Pins {
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let mut maps = BTreeMap::new();
        for entry in std::fs::read_dir(dir.join("maps"))? {
            let path = entry?.path();
            let info = MapInfo::from_pin(&path)?;
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let pinned = Pinned {
                id: info.id(),
                key_size: info.key_size(),
                value_size: info.value_size(),
                max_entries: info.max_entries(),
                flags: info.map_flags(),
            };
            maps.insert(name, pinned);
        }
        let mut dirs = vec![dir.join("pod-links")];
        for entry in std::fs::read_dir(dir.join("links"))? {
            dirs.push(entry?.path());
        }
        let mut links = BTreeMap::new();
        for parent in dirs {
            for entry in std::fs::read_dir(parent)? {
                let path = entry?.path();
                let info = FdLink::from(PinnedLink::from_pin(&path)?).info()?;
                let name = path.strip_prefix(dir)?.display().to_string();
                links.insert(name, (info.id(), info.program_id()));
            }
        }
        Ok(Self { maps, links })
    }

    pub fn map_names(&self) -> Vec<&str> {
        self.maps.keys().map(String::as_str).collect()
    }
}

fn open(dir: &Path, name: &str) -> anyhow::Result<Map> {
    Ok(Map::from_map_data(MapData::from_pin(
        dir.join("maps").join(name),
    )?)?)
}

/// The connections in `CONNS`.
pub fn conns(dir: &Path) -> anyhow::Result<BTreeMap<ConnKey, Conn>> {
    let conns: HashMap<_, ConnKey, Conn> = HashMap::try_from(open(dir, CONNS)?)?;
    Ok(conns.iter().collect::<Result<_, _>>()?)
}

/// What `SOURCES` says `client_addr` (raw, as keyed) holds.
pub fn held_by(dir: &Path, client_addr: u32) -> anyhow::Result<u64> {
    let sources: HashMap<_, u32, u64> = HashMap::try_from(open(dir, SOURCES)?)?;
    Ok(sources.get(&client_addr, 0).unwrap_or(0))
}

/// Packets client -> pod counted for the mapping in slot 0, all CPUs.
pub fn packets_in(dir: &Path) -> anyhow::Result<u64> {
    let stats: PerCpuArray<_, MappingCounters> = PerCpuArray::try_from(open(dir, MAPPING_STATS)?)?;
    Ok(stats.get(&0, 0)?.iter().map(|c| c.packets_in).sum())
}
