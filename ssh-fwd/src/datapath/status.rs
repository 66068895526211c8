//! The agent's own account of itself ([`AgentStatus`]), kept in a pinned map
//! beside the data path so that `ssh-fwd status` can read it from the host,
//! a container or another agent's bpffs without asking the agent.

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{Array, Map, MapData},
};
use ssh_fwd_common::maps::{AGENT_STATUS, AgentStatus};

use super::pins::PinLayout;

/// Handle to [`AGENT_STATUS`].
pub struct StatusMap(Array<MapData, AgentStatus>);

impl StatusMap {
    /// Takes the map out of a freshly loaded object.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let map = ebpf
            .take_map(AGENT_STATUS)
            .ok_or_else(|| anyhow!("the eBPF object has no map {AGENT_STATUS}; rebuild ssh-fwd"))?;
        Ok(Self(Array::try_from(map).context(AGENT_STATUS)?))
    }

    /// Opens the map an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        let path = layout.map(AGENT_STATUS);
        let data = MapData::from_pin(&path).with_context(|| {
            format!(
                "cannot open pinned map {}; is an ssh-fwd agent running with --bpffs {}?",
                path.display(),
                layout.root().display()
            )
        })?;
        let map = Map::from_map_data(data).with_context(|| format!("map {}", path.display()))?;
        Ok(Self(Array::try_from(map).context(AGENT_STATUS)?))
    }

    pub fn read(&self) -> anyhow::Result<AgentStatus> {
        self.0.get(&0, 0).context("reading AGENT_STATUS")
    }

    pub fn write(&mut self, status: &AgentStatus) -> anyhow::Result<()> {
        self.0.set(0, status, 0).context("writing AGENT_STATUS")
    }
}

/// `t` in Unix milliseconds, the unit of [`AgentStatus`]'s times.
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
