//! Every map of the data path; names, capacities and layouts come from
//! `ssh_fwd_common::maps`, and a userspace test checks the object agrees.
//! All maps are pinned by name so they outlive the agent.

use aya_ebpf::bindings::BPF_F_NO_COMMON_LRU;
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf},
};
use ssh_fwd_common::{
    maps::{
        AGENT_MACS_CAPACITY, ANNOUNCE_CAPACITY, Addr6, AgentStatus, AllowData, AllowData6,
        Announce, AnnounceKey, AnnounceKey6, Bucket, CONN_CAPACITY, CONN_EVENTS_BYTES, Claim,
        Claim6, ClaimKey, ClaimKey6, Conn, Conn6, ConnKey, ConnKey6, ConnStats, EVENT_KINDS,
        Endpoint, Endpoint6, Foreign, Guard, HALF_OPEN_CAPACITY, HalfOpen, HalfOpen6, HalfOpenKey,
        HalfOpenKey6, Heard, IFACE_MACS_CAPACITY, LEGACY_CONN_CAPACITY, LoadedSettings,
        MAX_ALLOW_PER_MAPPING, MAX_IFACES, MAX_MAPPINGS, MacKey, MappingConnCounters,
        MappingCounters, MappingName, NatTarget, NatTarget6, OWNERS_CAPACITY, Owner, RecordBudget,
        SCRATCH_LEN, SSH_IPS_CAPACITY, SYN_BUCKET_CAPACITY,
    },
    outcome::Outcome,
};

use crate::packet::Headers;

/// Frontend (external IP, port) -> backend. The DNAT table.
#[map(name = "FRONTENDS")]
pub static FRONTENDS: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Backend (pod IP, port) -> primary frontend: which addresses are
/// backends (the cheap test before any connection lookup).
#[map(name = "REVERSE")]
pub static REVERSE: HashMap<Endpoint, NatTarget> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Connections the server confirmed. A plain hash, not an LRU: nothing may
/// evict a live connection; entries end with their connection or by the
/// agent's idle sweep. The agent sets the capacity (`--conn-table-size`).
#[map(name = "CONNS")]
pub static CONNS: HashMap<ConnKey, Conn> = HashMap::pinned(CONN_CAPACITY, 0);

/// SYNs through a frontend, by 4-tuple and client ISN, until the server's
/// SYN-ACK. An LRU with a list per CPU (no lock shared by every insert): a
/// SYN flood churns it, and that is all it can do. The agent sets the
/// capacity (`--half-open-table-size`).
#[map(name = "HALF_OPEN")]
pub static HALF_OPEN: LruHashMap<HalfOpenKey, HalfOpen> =
    LruHashMap::pinned(HALF_OPEN_CAPACITY, BPF_F_NO_COMMON_LRU);

/// Claims: a client's segment through a frontend, until the server's
/// segment confirms it. An LRU with a list per CPU, as `HALF_OPEN`, and of
/// its capacity; no SYN ever writes it.
#[map(name = "CLAIMS")]
pub static CLAIMS: LruHashMap<ClaimKey, Claim> =
    LruHashMap::pinned(HALF_OPEN_CAPACITY, BPF_F_NO_COMMON_LRU);

/// Client address -> the confirmed connections it holds, for
/// `--conns-per-source`. The agent sets the capacity (that of `CONNS`) and
/// recounts it at every sweep.
#[map(name = "SOURCES")]
pub static SOURCES: HashMap<u32, u64> = HashMap::pinned(CONN_CAPACITY, 0);

/// Pod address -> the interfaces its packets may come in by. Written by
/// the agent.
#[map(name = "OWNERS")]
pub static OWNERS: HashMap<u32, Owner> = HashMap::pinned(OWNERS_CAPACITY, 0);

/// Per-mapping packet/byte counters, indexed by slot; shared by the CPUs
/// (`crate::counters` says why).
#[map(name = "MAPPING_STATS")]
pub static MAPPING_STATS: Array<MappingCounters> = Array::pinned(MAX_MAPPINGS, 0);

/// Per-mapping connection counters, indexed by slot; shared, as
/// `MAPPING_STATS`.
#[map(name = "MAPPING_CONNS")]
pub static MAPPING_CONNS: Array<MappingConnCounters> = Array::pinned(MAX_MAPPINGS, 0);

/// The buffer a segment is copied into to be summed (`crate::verify`).
/// Not pinned: nothing in it outlives a program run.
#[map(name = "SCRATCH")]
pub static SCRATCH: PerCpuArray<[u32; SCRATCH_LEN / 4]> = PerCpuArray::with_max_entries(1, 0);

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

/// The cluster's key (`ssh_fwd_common::maps::CROSS_NODE_KEY`).
#[map(name = "CROSS_NODE_KEY")]
pub static CROSS_NODE_KEY: Array<[u64; 2]> = Array::pinned(1, 0);

/// Backend -> until when its untracked replies may belong to a connection
/// an older data path forwarded. Written only by the agent (upgrades).
#[map(name = "LEGACY")]
pub static LEGACY: HashMap<Endpoint, u64> = HashMap::pinned(MAX_MAPPINGS, NO_PREALLOC);

/// `(client, backend)` -> the frontend an older data path recorded for a
/// connection. Written by the agent (upgrades), swept once its backend's
/// `LEGACY` time passes.
#[map(name = "LEGACY_CONNS")]
pub static LEGACY_CONNS: HashMap<ConnKey, NatTarget> =
    HashMap::pinned(LEGACY_CONN_CAPACITY, NO_PREALLOC);

/// `(slot, client range)` -> nothing: the mappings' source allowlists.
/// Written by the agent before the frontend's flag that makes them read.
/// Not preallocated (an LPM trie never is): empty costs nothing.
#[map(name = "ALLOWLIST")]
pub static ALLOWLIST: LpmTrie<AllowData, u8> =
    LpmTrie::pinned(MAX_MAPPINGS * MAX_ALLOW_PER_MAPPING, 0);

/// Slot -> the mapping's per-source rate of new connections. Written by
/// the agent before the frontend's flag that makes it read.
#[map(name = "GUARDS")]
pub static GUARDS: Array<Guard> = Array::pinned(MAX_MAPPINGS, 0);

/// Client address -> its bucket for the rate of new connections. An LRU
/// with a list per CPU, as `HALF_OPEN`: a flood of sources churns it. The
/// agent sets the capacity (`--syn-bucket-table-size`).
#[map(name = "SYN_BUCKETS")]
pub static SYN_BUCKETS: LruHashMap<u32, Bucket> =
    LruHashMap::pinned(SYN_BUCKET_CAPACITY, BPF_F_NO_COMMON_LRU);

/// The connection log (`ssh_fwd_common::maps::CONN_EVENTS`): accepted,
/// refused and closed connections, for the agent to write out.
#[map(name = "CONN_EVENTS")]
pub static CONN_EVENTS: RingBuf = RingBuf::pinned(CONN_EVENTS_BYTES, 0);

/// `(client, backend)` -> a connection's packets and bytes each way, kept
/// only with `--conn-log all`, from its confirmation to its removal. Not
/// preallocated: empty costs nothing.
#[map(name = "CONN_STATS")]
pub static CONN_STATS: HashMap<ConnKey, ConnStats> = HashMap::pinned(CONN_CAPACITY, NO_PREALLOC);

/// The connection log's records not written, per CPU and kind
/// (`ssh_fwd_common::maps::CONN_EVENTS_DROPPED`).
#[map(name = "CONN_EVENTS_DROPPED")]
pub static CONN_EVENTS_DROPPED: PerCpuArray<u64> = PerCpuArray::pinned(EVENT_KINDS, 0);

/// Each CPU's records of refused SYNs this second (`ssh_fwd_common::audit`).
/// Not pinned: a new program starts a new second.
#[map(name = "AUDIT_BUDGET")]
pub static AUDIT_BUDGET: PerCpuArray<RecordBudget> = PerCpuArray::with_max_entries(1, 0);

/// `(interface, SSH IP)` -> the MAC ARP requests for it are answered with
/// (`--announce l2`). Written by the agent.
#[map(name = "ANNOUNCE")]
pub static ANNOUNCE: HashMap<AnnounceKey, Announce> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// SSH IP -> the last other agent's MAC heard claiming it, and when.
/// Written here, read by the agent.
#[map(name = "ARP_HEARD")]
pub static ARP_HEARD: HashMap<u32, Heard> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// The IPv6 tables (`ssh_fwd_common::maps::FRONTENDS6` and the rest): each
/// the IPv6 twin of the map above of the same name without the `6`.
#[map(name = "FRONTENDS6")]
pub static FRONTENDS6: HashMap<Endpoint6, NatTarget6> = HashMap::pinned(MAX_MAPPINGS, 0);

#[map(name = "REVERSE6")]
pub static REVERSE6: HashMap<Endpoint6, NatTarget6> = HashMap::pinned(MAX_MAPPINGS, 0);

/// Not preallocated: a node without IPv6 connections pays nothing for it.
#[map(name = "CONNS6")]
pub static CONNS6: HashMap<ConnKey6, Conn6> = HashMap::pinned(CONN_CAPACITY, NO_PREALLOC);

#[map(name = "HALF_OPEN6")]
pub static HALF_OPEN6: LruHashMap<HalfOpenKey6, HalfOpen6> =
    LruHashMap::pinned(HALF_OPEN_CAPACITY, BPF_F_NO_COMMON_LRU);

#[map(name = "CLAIMS6")]
pub static CLAIMS6: LruHashMap<ClaimKey6, Claim6> =
    LruHashMap::pinned(HALF_OPEN_CAPACITY, BPF_F_NO_COMMON_LRU);

/// A client's /64 (`ssh_fwd_common::conntrack::trust::source_key6`) -> the
/// confirmed connections it holds.
#[map(name = "SOURCES6")]
pub static SOURCES6: HashMap<u64, u64> = HashMap::pinned(CONN_CAPACITY, NO_PREALLOC);

#[map(name = "OWNERS6")]
pub static OWNERS6: HashMap<Addr6, Owner> = HashMap::pinned(OWNERS_CAPACITY, 0);

#[map(name = "ALLOWLIST6")]
pub static ALLOWLIST6: LpmTrie<AllowData6, u8> =
    LpmTrie::pinned(MAX_MAPPINGS * MAX_ALLOW_PER_MAPPING, 0);

/// A client's /64 -> its bucket for the rate of new connections.
#[map(name = "SYN_BUCKETS6")]
pub static SYN_BUCKETS6: LruHashMap<u64, Bucket> =
    LruHashMap::pinned(SYN_BUCKET_CAPACITY, BPF_F_NO_COMMON_LRU);

#[map(name = "CONN_STATS6")]
pub static CONN_STATS6: HashMap<ConnKey6, ConnStats> = HashMap::pinned(CONN_CAPACITY, NO_PREALLOC);

/// Where the IPv6 programs copy a `CONNS6` entry to decide on it: the BPF
/// stack (512 bytes for a call chain) has no room for it beside IPv6's
/// other state. Not pinned: nothing in it outlives a program run.
#[map(name = "CONN_COPY6")]
pub static CONN_COPY6: PerCpuArray<Conn6> = PerCpuArray::with_max_entries(1, 0);

/// Where XDP's IPv6 path keeps a packet's parsed headers: the stack has
/// no room for them beside either of its paths (`crate::ingress_xdp`).
/// Not pinned: nothing in it outlives a program run.
#[map(name = "HEADERS6")]
pub static HEADERS6: PerCpuArray<Headers<Addr6>> = PerCpuArray::with_max_entries(1, 0);

/// `(interface, IPv6 SSH IP)` -> the MAC neighbour solicitations for it
/// are answered with (`--announce l2`). Written by the agent.
#[map(name = "ANNOUNCE6")]
pub static ANNOUNCE6: HashMap<AnnounceKey6, Announce> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// IPv6 SSH IP -> the last other agent's MAC heard advertising it, and
/// when.
#[map(name = "NDP_HEARD")]
pub static NDP_HEARD: HashMap<Addr6, Heard> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// MAC -> another agent's, or this node's own: whom an entry flagged to
/// yield gives way to (`crate::claim`). Written by the agent; not
/// preallocated, as only the nodes' interfaces are in it.
#[map(name = "AGENT_MACS")]
pub static AGENT_MACS: HashMap<MacKey, u32> = HashMap::pinned(AGENT_MACS_CAPACITY, NO_PREALLOC);

/// SSH IP -> the claims of it from MACs no agent published. Written here,
/// read by the agent.
#[map(name = "ARP_FOREIGN")]
pub static ARP_FOREIGN: HashMap<u32, Foreign> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// [`ARP_FOREIGN`] for IPv6.
#[map(name = "NDP_FOREIGN")]
pub static NDP_FOREIGN: HashMap<Addr6, Foreign> = HashMap::pinned(ANNOUNCE_CAPACITY, 0);

/// SSH IP -> 0: the addresses that expose only their mapped ports
/// (`crate::exposure`). Written by the agent; not preallocated.
#[map(name = "SSH_IPS")]
pub static SSH_IPS: HashMap<u32, u32> = HashMap::pinned(SSH_IPS_CAPACITY, NO_PREALLOC);

/// [`SSH_IPS`] for IPv6.
#[map(name = "SSH_IPS6")]
pub static SSH_IPS6: HashMap<Addr6, u32> = HashMap::pinned(SSH_IPS_CAPACITY, NO_PREALLOC);

/// Interface index -> its own MAC: only frames for it are translated
/// (`crate::exposure`). Written by the agent.
#[map(name = "IFACE_MACS")]
pub static IFACE_MACS: HashMap<u32, MacKey> = HashMap::pinned(IFACE_MACS_CAPACITY, 0);
