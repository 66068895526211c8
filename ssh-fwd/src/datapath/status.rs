//! The agent's own account of itself ([`AgentStatus`]) and of the settings
//! it loaded the programs with ([`LoadedSettings`]), kept in pinned maps
//! beside the data path so that `ssh-fwd status` can read them from the
//! host, a container or another agent's bpffs without asking the agent.

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf, Pod,
    maps::{Array, MapData},
};
use ssh_fwd_common::maps::{AGENT_STATUS, AgentStatus, LOADED_SETTINGS, LoadedSettings};

use super::pins::PinLayout;

/// Handle to [`AGENT_STATUS`].
pub struct StatusMap(Array<MapData, AgentStatus>);

impl StatusMap {
    /// Takes the map out of a freshly loaded object.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        take(ebpf, AGENT_STATUS).map(Self)
    }

    /// Opens the map an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        open(layout, AGENT_STATUS).map(Self)
    }

    pub fn read(&self) -> anyhow::Result<AgentStatus> {
        self.0.get(&0, 0).context("reading AGENT_STATUS")
    }

    pub fn write(&mut self, status: &AgentStatus) -> anyhow::Result<()> {
        self.0.set(0, status, 0).context("writing AGENT_STATUS")
    }
}

/// Handle to [`LOADED_SETTINGS`].
pub struct SettingsMap(Array<MapData, LoadedSettings>);

impl SettingsMap {
    /// Takes the map out of a freshly loaded object.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        take(ebpf, LOADED_SETTINGS).map(Self)
    }

    /// Opens the map an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        open(layout, LOADED_SETTINGS).map(Self)
    }

    /// What the last agent recorded (all zero, the defaults, if none did).
    pub fn read(&self) -> anyhow::Result<LoadedSettings> {
        self.0.get(&0, 0).context("reading LOADED_SETTINGS")
    }

    pub fn write(&mut self, settings: LoadedSettings) -> anyhow::Result<()> {
        self.0
            .set(0, settings, 0)
            .context("writing LOADED_SETTINGS")
    }
}

fn take<T: Pod>(ebpf: &mut Ebpf, name: &str) -> anyhow::Result<Array<MapData, T>> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))?;
    Array::try_from(map).with_context(|| name.to_owned())
}

pub(super) fn open<T: Pod>(layout: &PinLayout, name: &str) -> anyhow::Result<Array<MapData, T>> {
    let map = super::maps::open_pin(layout, name)?;
    Array::try_from(map).with_context(|| name.to_owned())
}

/// `t` in Unix milliseconds, the unit of [`AgentStatus`]'s times.
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
