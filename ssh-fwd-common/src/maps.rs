//! Every BPF map of ssh-fwd: its name, its capacity and its key/value layout.
//!
//! Userspace uses only these constants; a test loads the compiled eBPF object and
//! checks it agrees with them.

mod addr;
mod announce;
mod conn;
mod counters;
mod endpoint;
mod event;
mod guard;
mod quota;
mod status;

pub use addr::*;
pub use announce::*;
pub use conn::*;
pub use counters::*;
pub use endpoint::*;
pub use event::*;
pub use guard::*;
pub use quota::*;
pub use status::*;

/// Default number of mappings (frontends) one node can hold
/// (`--max-mappings`): the default 20000-27999 port range on two SSH IPs. The
/// capacity of [`FRONTENDS`], [`REVERSE`], [`MAPPING_NAMES`],
/// [`MAPPING_STATS`] and [`MAPPING_CONNS`] in the object; the agent sets it
/// at load. Each mapping costs about 380 bytes of kernel memory (620 where
/// IPv6 is served), whatever the CPU count.
pub const MAX_MAPPINGS: u32 = 16_384;

/// The most `--max-mappings` may ask for: every port of four SSH IPs.
pub const MAPPINGS_LIMIT: u32 = 262_144;

/// Default capacity of [`CONNS`], the confirmed connections
/// (`--conn-table-size`), and of [`SOURCES`]. Only a connection the server
/// confirmed takes an entry, and a client address holds at most
/// `--conns-per-source` of them.
pub const CONN_CAPACITY: u32 = 262_144;

/// Default capacity of [`HALF_OPEN`] and of [`CLAIMS`]
/// (`--half-open-table-size`). A flood churns them, by design: a
/// half-open entry is needed only from a SYN to the server's SYN-ACK, a
/// claim only from the client's ACK to the server's next segment, both the
/// pod's own answer time.
pub const HALF_OPEN_CAPACITY: u32 = 65_536;

/// Default of `--conns-per-source`: the connections one client address may
/// hold on a node at once.
pub const CONNS_PER_SOURCE: u32 = 512;

/// Frontend `(external IP, port)` -> backend and mapping slot. Read by ingress.
pub const FRONTENDS: &str = "FRONTENDS";
/// Backend `(pod IP, port)` -> primary frontend and slot. Read by egress.
pub const REVERSE: &str = "REVERSE";
/// `(client, backend)` -> the connection: the frontend it was opened
/// through and its TCP state. Written only when the server's segment
/// confirms a claim (see `conntrack`).
pub const CONNS: &str = "CONNS";
/// `(client, backend, client ISN)` -> a SYN through a frontend: which
/// frontend, until the server's SYN-ACK needs it.
pub const HALF_OPEN: &str = "HALF_OPEN";
/// `(client, backend, the server sequence number the client acknowledged)`
/// -> the frontend the client's segment came through: a connection the
/// server has yet to confirm.
pub const CLAIMS: &str = "CLAIMS";
/// Client IPv4 address -> how many [`CONNS`] entries it holds (the quota
/// of `--conns-per-source`). Written by the kernel only: counted up on
/// confirmation, down on a close or reset, and down by the agent's sweep
/// for what it removes, through [`PROG_QUOTA`].
pub const SOURCES: &str = "SOURCES";
/// Pod IPv4 address -> its [`Owner`]: the only interfaces its packets may
/// come in by. Written by the agent from the pods' own interfaces.
pub const OWNERS: &str = "OWNERS";
/// Packet and byte counters, indexed by mapping slot; one copy shared by
/// the CPUs, added to atomically.
pub const MAPPING_STATS: &str = "MAPPING_STATS";
/// Connection counters ([`MappingConnCounters`]), shared as
/// [`MAPPING_STATS`], indexed by
/// mapping slot.
pub const MAPPING_CONNS: &str = "MAPPING_CONNS";
/// Per-CPU counters indexed by [`crate::outcome::Outcome`].
pub const GLOBAL_STATS: &str = "GLOBAL_STATS";
/// One per-CPU buffer of [`SCRATCH_LEN`] bytes the programs copy a segment
/// into to sum it (the BPF stack has no room for it). Not pinned: it holds
/// nothing between two runs.
pub const SCRATCH: &str = "SCRATCH";
/// The size of [`SCRATCH`]'s buffer: the longest segment whose checksum
/// the programs check themselves (a power of two: indexes into it are
/// masked).
pub const SCRATCH_LEN: usize = 256;
/// Mapping names, indexed by slot. Written by the agent, read by `ssh-fwd list`.
pub const MAPPING_NAMES: &str = "MAPPING_NAMES";
/// Interface index -> `IFACE_*` flags: what the agent knows about the
/// interfaces a redirect may target. Written by the agent.
pub const IFACES: &str = "IFACES";

/// What the running agent says about itself, for `ssh-fwd status`: one
/// [`AgentStatus`], written by the agent, never read by the programs.
pub const AGENT_STATUS: &str = "AGENT_STATUS";

/// What the agent fixed in the running programs when it loaded them
/// (`--redirect`), for `ssh-fwd status` and the next agent: one
/// [`LoadedSettings`], written by the agent, never read by the programs
/// (which have these as constants).
pub const LOADED_SETTINGS: &str = "LOADED_SETTINGS";

/// The cluster's SipHash key that seals the frontend option
/// (`crate::ipopt`), `[0, 0]` for none: one entry, written by the agent
/// (`--cross-node-key`, or the Secret it keeps in Kubernetes mode), read by
/// the programs at each translated SYN. A map rather than a constant, so a
/// new key needs no reload, and a restarted agent that cannot reach the
/// API server yet keeps the one in force.
pub const CROSS_NODE_KEY: &str = "CROSS_NODE_KEY";

/// Backend -> until when (`bpf_ktime_get_coarse_ns`) its replies without
/// tracked state may still belong to a connection an older data path
/// forwarded (layout v3 tracked nothing): written only by the agent, when
/// it upgrades a node, and swept when the time passes.
pub const LEGACY: &str = "LEGACY";
/// `(client, backend)` -> the frontend the older data path recorded for a
/// connection to a backend behind several frontends: written only by the
/// agent when it upgrades a node; swept once its backend's [`LEGACY`]
/// time passes.
pub const LEGACY_CONNS: &str = "LEGACY_CONNS";
/// Capacity of [`LEGACY_CONNS`] (not preallocated: empty costs nothing).
pub const LEGACY_CONN_CAPACITY: u32 = 65_536;

/// Socket cookie -> the frontend a socket dialled and the backend it was
/// sent to instead ([`HairpinSock`]). Written by `connect4`, read by
/// `getpeername4`. An LRU: sockets are never reported closed to these
/// programs, so old entries go by eviction; cookies are never reused, so a
/// stale entry matches nothing.
pub const HAIRPIN_SOCKS: &str = "HAIRPIN_SOCKS";

/// Socket cookie -> [`HairpinSock6`]: [`HAIRPIN_SOCKS`] for IPv6 sockets,
/// written by `connect6`, read by `getpeername6`, of the same capacity.
pub const HAIRPIN_SOCKS6: &str = "HAIRPIN_SOCKS6";

/// Capacity of [`HAIRPIN_SOCKS`]: translated sockets remembered at once.
/// An evicted entry costs only the dialled address in `getpeername` (the
/// backend's shows instead); the connection itself is unaffected.
pub const HAIRPIN_SOCKS_CAPACITY: u32 = 65_536;

/// `(slot, client range)` -> nothing: the source allowlists, an LPM trie
/// keyed by [`AllowData`]. Read on a SYN to a frontend carrying
/// [`FLAG_ALLOWLIST`]; written by the agent before it sets the flag.
pub const ALLOWLIST: &str = "ALLOWLIST";
/// The most ranges one mapping's allowlist may hold.
pub const MAX_ALLOW_PER_MAPPING: u32 = 64;
/// Slot -> [`Guard`]: the mapping's per-source rate of new connections,
/// read on a SYN to a frontend carrying [`FLAG_SYN_LIMIT`].
pub const GUARDS: &str = "GUARDS";
/// Client IPv4 address -> its [`Bucket`] for `--syn-rate`. An LRU with a
/// list per CPU: a flood of spoofed sources churns it, which hands a fresh
/// bucket only to sources quiet for as long as the churn takes (see
/// `docs/guard.md`).
pub const SYN_BUCKETS: &str = "SYN_BUCKETS";
/// Default capacity of [`SYN_BUCKETS`] (`--syn-bucket-table-size`).
pub const SYN_BUCKET_CAPACITY: u32 = 262_144;

/// The connection log: a ring buffer of [`ConnEvent`]s (accepted,
/// refused and closed connections) the agent drains into its log. A full
/// buffer loses the newest (counted as `events_lost`), never slows a
/// packet.
pub const CONN_EVENTS: &str = "CONN_EVENTS";
/// The size of [`CONN_EVENTS`] in bytes (a power of two pages): about
/// 3,000 records between two reads of the agent.
pub const CONN_EVENTS_BYTES: u32 = 256 * 1024;
/// `(client, backend)` -> the packets and bytes of a [`CONNS`] connection
/// ([`ConnStats`]), for the record of its close. Counted only with
/// `--conn-log all`; created with the connection, removed with it. Not
/// preallocated: without `--conn-log all` it is empty and costs nothing.
pub const CONN_STATS: &str = "CONN_STATS";
/// The connection log's records the programs did not write, per CPU, by
/// [`EventKind`] (the index; [`EVENT_KINDS`] entries): over a CPU's
/// budget of refused ones, refused ones past their share of
/// [`CONN_EVENTS`], or any kind the full ring had no room for. Read by the
/// agent for `ssh_fwd_connection_records_dropped_total`.
pub const CONN_EVENTS_DROPPED: &str = "CONN_EVENTS_DROPPED";

/// `(interface, SSH IP)` -> the MAC to answer ARP requests for it with
/// ([`Announce`]): `--announce l2`. Written by the agent, read by the
/// ingress programs on every ARP frame.
pub const ANNOUNCE: &str = "ANNOUNCE";
/// Capacity of [`ANNOUNCE`]: SSH IPs times external interfaces.
pub const ANNOUNCE_CAPACITY: u32 = 256;
/// SSH IP -> the last other MAC heard claiming an address this node
/// announces ([`Heard`]): how an owner that cannot renew its Lease learns
/// that another node took over. Written by the ingress programs.
pub const ARP_HEARD: &str = "ARP_HEARD";

/// The IPv6 tables: each holds for IPv6 what the map of the same name
/// without the `6` holds for IPv4, with the same capacity, except
/// [`SOURCES6`] and [`SYN_BUCKETS6`], which count a client's /64 (an IPv6
/// host picks any address of its /64, as a host picks its port), and
/// [`ALLOWLIST6`], keyed by [`AllowData6`]. [`CONNS6`], [`SOURCES6`] and
/// [`CONN_STATS6`] are not preallocated: a node without IPv6 traffic pays
/// nothing for them. The LRUs must be ([`HALF_OPEN6`], [`CLAIMS6`],
/// [`SYN_BUCKETS6`]).
pub const FRONTENDS6: &str = "FRONTENDS6";
pub const REVERSE6: &str = "REVERSE6";
pub const CONNS6: &str = "CONNS6";
pub const HALF_OPEN6: &str = "HALF_OPEN6";
pub const CLAIMS6: &str = "CLAIMS6";
pub const SOURCES6: &str = "SOURCES6";
pub const OWNERS6: &str = "OWNERS6";
pub const ALLOWLIST6: &str = "ALLOWLIST6";
pub const SYN_BUCKETS6: &str = "SYN_BUCKETS6";
pub const CONN_STATS6: &str = "CONN_STATS6";

/// `(interface, IPv6 SSH IP)` -> the MAC to answer neighbour
/// solicitations for it with ([`Announce`]): [`ANNOUNCE`] for IPv6, of its
/// capacity. Written by the agent, read by the ingress programs on every
/// solicitation and advertisement.
pub const ANNOUNCE6: &str = "ANNOUNCE6";
/// IPv6 SSH IP -> the last other MAC heard advertising it ([`Heard`]):
/// [`ARP_HEARD`] for IPv6. Written by the ingress programs.
pub const NDP_HEARD: &str = "NDP_HEARD";
/// MAC -> whose it is ([`MAC_OF_AGENT`], [`MAC_OF_NODE`]): the MACs the
/// other agents published with their Leases, the only ones an entry
/// flagged [`ANNOUNCE_YIELD`] gives way to, and this node's own. A claim
/// of an SSH IP from any other MAC is foreign: counted, never given way
/// to. Written by the agent, read by the ingress programs on every claim.
pub const AGENT_MACS: &str = "AGENT_MACS";
/// Capacity of [`AGENT_MACS`]: the external interfaces of every node of a
/// large cluster.
pub const AGENT_MACS_CAPACITY: u32 = 16_384;
/// SSH IP -> the claims of it from MACs no agent published ([`Foreign`]),
/// while this node answers for it. Written by the ingress programs.
pub const ARP_FOREIGN: &str = "ARP_FOREIGN";
/// [`ARP_FOREIGN`] for IPv6.
pub const NDP_FOREIGN: &str = "NDP_FOREIGN";

/// SSH IP -> nothing (0): the addresses that expose only their mapped
/// ports, every `--ssh-ip` and every frontend's address. A packet to one
/// that no mapping translated is dropped (`crate::exposure`). Written by
/// the agent, read by the ingress programs on every packet they pass.
pub const SSH_IPS: &str = "SSH_IPS";
/// [`SSH_IPS`] for IPv6 SSH IPs.
pub const SSH_IPS6: &str = "SSH_IPS6";
/// Capacity of [`SSH_IPS`] and [`SSH_IPS6`] (not preallocated): a
/// mappings file may put its frontends on many addresses.
pub const SSH_IPS_CAPACITY: u32 = 16_384;
/// Interface index -> its own MAC ([`MacKey`]), for the external and
/// cluster interfaces: the ingress programs translate only frames
/// addressed to it (`crate::exposure::addressed`). Written by the agent
/// before it attaches, and after every link change.
pub const IFACE_MACS: &str = "IFACE_MACS";
/// Capacity of [`IFACE_MACS`]: the external and cluster interfaces.
pub const IFACE_MACS_CAPACITY: u32 = 256;

/// All pinned maps, in the order the agent checks them.
pub const ALL_MAPS: [&str; 45] = [
    FRONTENDS,
    REVERSE,
    CONNS,
    HALF_OPEN,
    CLAIMS,
    SOURCES,
    OWNERS,
    MAPPING_STATS,
    MAPPING_CONNS,
    GLOBAL_STATS,
    MAPPING_NAMES,
    IFACES,
    AGENT_STATUS,
    LOADED_SETTINGS,
    CROSS_NODE_KEY,
    LEGACY,
    LEGACY_CONNS,
    HAIRPIN_SOCKS,
    ALLOWLIST,
    GUARDS,
    SYN_BUCKETS,
    CONN_EVENTS,
    CONN_STATS,
    CONN_EVENTS_DROPPED,
    ANNOUNCE,
    ARP_HEARD,
    FRONTENDS6,
    REVERSE6,
    CONNS6,
    HALF_OPEN6,
    CLAIMS6,
    SOURCES6,
    OWNERS6,
    ALLOWLIST6,
    SYN_BUCKETS6,
    CONN_STATS6,
    HAIRPIN_SOCKS6,
    ANNOUNCE6,
    NDP_HEARD,
    AGENT_MACS,
    ARP_FOREIGN,
    NDP_FOREIGN,
    SSH_IPS,
    SSH_IPS6,
    IFACE_MACS,
];

/// Maximum number of interfaces in [`IFACES`]: the external ones plus the
/// host ends of every pod on the node (Kubernetes defaults to 110 pods).
pub const MAX_IFACES: u32 = 4_096;

/// Capacity of [`OWNERS`]: pods' addresses on one node (several per pod
/// with more than one interface or family).
pub const OWNERS_CAPACITY: u32 = 16_384;

/// [`IFACES`] flag: an external interface (`--iface`). A reply whose route
/// leaves through it gets the reverse NAT; any other reply is left alone.
pub const IFACE_EXTERNAL: u32 = 1;
/// [`IFACES`] flag: an interface to other nodes (`--cluster-iface`). Like
/// an external one, packets arriving there come from outside the node.
pub const IFACE_CLUSTER: u32 = 4;
/// Packets that arrived on an interface with any of these flags came from
/// outside the node: a "reply" among them claims a pod's address it cannot
/// own, and never moves connection state.
pub const IFACE_OUTSIDE: u32 = IFACE_EXTERNAL | IFACE_CLUSTER;
/// [`IFACES`] flag: the host end of a veth or netkit pair whose peer lives in
/// another network namespace (a pod). `bpf_redirect_peer` may target it; on
/// any other device that helper drops the packet, so the kernel programs
/// use it only for interfaces carrying this flag.
pub const IFACE_POD_PEER: u32 = 2;
/// [`IFACES`] flag: a virtual device (veth, netkit, tun...) on an external
/// or cluster interface: a local sender's packets may arrive on it with a
/// TCP checksum still to be completed (CHECKSUM_PARTIAL: the field holds
/// only the pseudo-header sum). On a physical NIC no packet is partial.
pub const IFACE_VIRTUAL: u32 = 8;

/// Bump when any layout in this file changes: pins live under
/// `<bpffs>/v<LAYOUT_VERSION>/`, so a new layout never misreads old maps.
/// A map added beside the others, or one holding only what is safe to
/// lose (counters, handshakes in flight) whose pinned definition differs,
/// needs no bump: the agent creates the first and replaces the second
/// (`datapath::pins`).
pub const LAYOUT_VERSION: u32 = 4;

/// The backend is reachable through more than one frontend: its replies
/// follow the tracked connection, never the primary frontend alone.
pub const FLAG_SHARED_BACKEND: u32 = 1;
/// The frontend has a source allowlist: a SYN from a source outside its
/// [`ALLOWLIST`] ranges is dropped (none at all: every source is).
pub const FLAG_ALLOWLIST: u32 = 2;
/// With [`FLAG_ALLOWLIST`] (`--enforce-established`): every client segment
/// is checked, not only SYNs, so a source taken off the list loses its
/// open connections too.
pub const FLAG_ALLOWLIST_ALL: u32 = 4;
/// The frontend limits new connections per source: see [`GUARDS`].
pub const FLAG_SYN_LIMIT: u32 = 8;
/// The frontend's backend is draining (a pod being deleted that still
/// serves): its open connections go on, new ones are refused. Its address
/// may go to another pod before the cluster says it stopped serving, and
/// no new login may reach that pod.
pub const FLAG_DRAINING: u32 = 16;
/// The flags that make a SYN pass the guard first.
pub const FLAGS_GUARDED: u32 = FLAG_ALLOWLIST | FLAG_ALLOWLIST_ALL | FLAG_SYN_LIMIT | FLAG_DRAINING;
