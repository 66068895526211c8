//! Every map of the data path; names, capacities and layouts come from
//! `ssh_fwd_common::maps`, and a userspace test checks the object agrees.
//! All maps are pinned by name so they outlive the agent.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
};
use ssh_fwd_common::{
    maps::{
        AgentStatus, CONN_CAPACITY, Conn, ConnKey, Endpoint, HALF_OPEN_CAPACITY, HalfOpen,
        HalfOpenKey, LEGACY_CONN_CAPACITY, LoadedSettings, MAX_IFACES, MAX_MAPPINGS,
        MappingCounters, MappingName, NatTarget,
    },
    outcome::Outcome,
};

/// Frontend (external IP, port) -> backend. The DNAT table.
#[map(name = "FRONTENDS")]
pub static FRONTENDS: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Backend (pod IP, port) -> primary frontend: which addresses are
/// backends (the cheap test before any connection lookup).
#[map(name = "REVERSE")]
pub static REVERSE: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Established connections, created only by completed handshakes. A plain
/// hash, not an LRU: nothing may evict a live connection; entries end with
/// their connection or by the agent's idle sweep. The agent sets the
/// capacity (`--conn-table-size`).
#[map(name = "CONNS")]
pub static CONNS: HashMap<ConnKey, Conn> = HashMap::pinned(CONN_CAPACITY, 0);

/// Handshakes in progress, by 4-tuple and client ISN. An LRU: a SYN flood
/// churns it, and that is all it can do. The agent sets the capacity
/// (`--half-open-table-size`).
#[map(name = "HALF_OPEN")]
pub static HALF_OPEN: LruHashMap<HalfOpenKey, HalfOpen> = LruHashMap::pinned(HALF_OPEN_CAPACITY, 0);

/// Per-mapping packet/byte counters, indexed by slot.
#[map(name = "MAPPING_STATS")]
pub static MAPPING_STATS: PerCpuArray<MappingCounters> = PerCpuArray::pinned(MAX_MAPPINGS, 0);

/// Per-outcome counters, indexed by `Outcome`.
#[map(name = "GLOBAL_STATS")]
pub static GLOBAL_STATS: PerCpuArray<u64> = PerCpuArray::pinned(Outcome::COUNT, 0);

/// Mapping names for `ssh-fwd list`; written by the agent, never read here.
#[map(name = "MAPPING_NAMES")]
pub static MAPPING_NAMES: Array<MappingName> = Array::pinned(MAX_MAPPINGS, 0);

/// Interface index -> `IFACE_*` flags, written by the agent: which
/// interfaces are external and which are pods' veth ends
/// (`bpf_redirect_peer` may target them).
#[map(name = "IFACES")]
pub static IFACES: HashMap<u32, u32> = HashMap::pinned(MAX_IFACES, 0);

/// What the agent says about itself for `ssh-fwd status`; pinned with the
/// other maps so it outlives the agent. Never read here.
#[map(name = "AGENT_STATUS")]
pub static AGENT_STATUS: Array<AgentStatus> = Array::pinned(1, 0);

/// What the agent fixed in the programs when it loaded them (the settings
/// in `crate::config`), for `ssh-fwd status`. Never read here.
#[map(name = "LOADED_SETTINGS")]
pub static LOADED_SETTINGS: Array<LoadedSettings> = Array::pinned(1, 0);

/// `BPF_F_NO_PREALLOC`: the upgrade maps are empty on every node but one
/// being upgraded, so they take memory only for their entries.
const NO_PREALLOC: u32 = 1;

/// Backend -> until when its untracked replies may belong to a connection
/// an older data path forwarded. Written only by the agent (upgrades).
#[map(name = "LEGACY")]
pub static LEGACY: HashMap<Endpoint, u64> = HashMap::pinned(MAX_MAPPINGS, NO_PREALLOC);

/// `(client, backend)` -> the frontend an older data path recorded for a
/// connection. Written by the agent (upgrades); an entry is removed here
/// when its connection is adopted.
#[map(name = "LEGACY_CONNS")]
pub static LEGACY_CONNS: HashMap<ConnKey, NatTarget> =
    HashMap::pinned(LEGACY_CONN_CAPACITY, NO_PREALLOC);
