//! Every map of the data path; names, capacities and layouts come from
//! `ssh_fwd_common::maps`, and a userspace test checks the object agrees.
//! All maps are pinned by name so they outlive the agent.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
};
use ssh_fwd_common::{
    maps::{
        AgentStatus, CONN_CAPACITY, ConnKey, Endpoint, MAX_IFACES, MAX_MAPPINGS, MappingCounters,
        MappingName, NatTarget,
    },
    outcome::Outcome,
};

/// Frontend (external IP, port) -> backend. The DNAT table.
#[map(name = "FRONTENDS")]
pub static FRONTENDS: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Backend (pod IP, port) -> primary frontend. The reverse-NAT table.
#[map(name = "REVERSE")]
pub static REVERSE: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// (client, backend) -> frontend used, for backends behind several frontends.
/// LRU: bounded, and evicts only under pressure, never on idle time.
#[map(name = "CONNS")]
pub static CONNS: LruHashMap<ConnKey, NatTarget> = LruHashMap::pinned(CONN_CAPACITY, 0);

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
/// interfaces are external (replies routed out of them get the reverse NAT)
/// and which are pods' veth ends (`bpf_redirect_peer` may target them).
#[map(name = "IFACES")]
pub static IFACES: HashMap<u32, u32> = HashMap::pinned(MAX_IFACES, 0);

/// What the agent says about itself for `ssh-fwd status`; pinned with the
/// other maps so it outlives the agent. Never read here.
#[map(name = "AGENT_STATUS")]
pub static AGENT_STATUS: Array<AgentStatus> = Array::pinned(1, 0);
