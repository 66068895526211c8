//! Every BPF map of ssh-fwd: its name, its capacity and its key/value layout.
//!
//! Userspace uses only these constants; a test loads the compiled eBPF object and
//! checks it agrees with them.

use core::net::Ipv4Addr;

/// Default number of mappings (frontends) one node can hold
/// (`--max-mappings`): the 8000-16000 port range on two SSH IPs. The
/// capacity of [`FRONTENDS`], [`REVERSE`], [`MAPPING_NAMES`] and
/// [`MAPPING_STATS`] in the object; the agent sets it at load. Each mapping
/// costs about 330 bytes of kernel memory plus 32 bytes per CPU (its
/// counters).
pub const MAX_MAPPINGS: u32 = 16_384;

/// The most `--max-mappings` may ask for: every port of four SSH IPs.
pub const MAPPINGS_LIMIT: u32 = 262_144;

/// Default capacity of [`CONNS`], the established connections
/// (`--conn-table-size`). Only completed handshakes take an entry, and an
/// entry lives as long as its connection, so a flood cannot fill it.
pub const CONN_CAPACITY: u32 = 262_144;

/// Default capacity of [`HALF_OPEN`], the handshakes in progress
/// (`--half-open-table-size`). A SYN flood churns it, by design: an entry
/// is needed only for the round trip of a handshake.
pub const HALF_OPEN_CAPACITY: u32 = 65_536;

/// Frontend `(external IP, port)` -> backend and mapping slot. Read by ingress.
pub const FRONTENDS: &str = "FRONTENDS";
/// Backend `(pod IP, port)` -> primary frontend and slot. Read by egress.
pub const REVERSE: &str = "REVERSE";
/// `(client, backend)` -> the established connection: the frontend it was
/// opened through and its TCP state. Written only when the client's ACK
/// completes a handshake the reply path saw (see `conntrack`).
pub const CONNS: &str = "CONNS";
/// `(client, backend, client ISN)` -> a handshake in progress: the
/// frontend of the SYN, and the server's initial sequence number once its
/// SYN-ACK is seen.
pub const HALF_OPEN: &str = "HALF_OPEN";
/// Per-CPU packet and byte counters, indexed by mapping slot.
pub const MAPPING_STATS: &str = "MAPPING_STATS";
/// Per-CPU counters indexed by [`crate::outcome::Outcome`].
pub const GLOBAL_STATS: &str = "GLOBAL_STATS";
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

/// Backend -> until when (`bpf_ktime_get_coarse_ns`) its replies without
/// tracked state may still belong to a connection an older data path
/// forwarded (layout v3 tracked nothing): written only by the agent, when
/// it upgrades a node, and swept when the time passes.
pub const LEGACY: &str = "LEGACY";
/// `(client, backend)` -> the frontend the older data path recorded for a
/// connection to a backend behind several frontends: written only by the
/// agent when it upgrades a node; an entry ends when the connection is
/// adopted or its backend's [`LEGACY`] time passes.
pub const LEGACY_CONNS: &str = "LEGACY_CONNS";
/// Capacity of [`LEGACY_CONNS`] (not preallocated: empty costs nothing).
pub const LEGACY_CONN_CAPACITY: u32 = 65_536;

/// All pinned maps, in the order the agent checks them.
pub const ALL_MAPS: [&str; 13] = [
    FRONTENDS,
    REVERSE,
    CONNS,
    HALF_OPEN,
    MAPPING_STATS,
    GLOBAL_STATS,
    MAPPING_NAMES,
    IFACES,
    AGENT_STATUS,
    LOADED_SETTINGS,
    LEGACY,
    LEGACY_CONNS,
    crate::hairpin::HAIRPIN_SOCKS,
];

/// Maximum number of interfaces in [`IFACES`]: the external ones plus the
/// host ends of every pod on the node (Kubernetes defaults to 110 pods).
pub const MAX_IFACES: u32 = 4_096;

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

/// Bump when any layout in this file changes: pins live under
/// `<bpffs>/v<LAYOUT_VERSION>/`, so a new layout never misreads old maps.
pub const LAYOUT_VERSION: u32 = 4;

/// The backend is reachable through more than one frontend: informational
/// (`ssh-fwd list`); replies always follow the tracked connection.
pub const FLAG_SHARED_BACKEND: u32 = 1;

/// An IPv4 address and TCP port, both in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: u32,
    pub port: u16,
    pub _pad: u16,
}

impl Endpoint {
    pub const fn new(ip: Ipv4Addr, port: u16) -> Self {
        Self {
            addr: u32::from_ne_bytes(ip.octets()),
            port: port.to_be(),
            _pad: 0,
        }
    }

    pub const fn ip(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.addr.to_ne_bytes();
        Ipv4Addr::new(a, b, c, d)
    }

    pub const fn port(&self) -> u16 {
        u16::from_be(self.port)
    }
}

/// Where a packet is rewritten to, and which mapping it is counted against.
/// Value of [`FRONTENDS`] (endpoint = backend) and [`REVERSE`] (endpoint =
/// the backend's primary frontend).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatTarget {
    pub endpoint: Endpoint,
    /// Index into [`MAPPING_STATS`] and [`MAPPING_NAMES`].
    pub slot: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
}

/// Key of [`CONNS`]: one TCP connection between a client and a backend, as
/// the backend sees it (a client reaching one backend through two
/// frontends from one port is one connection at the backend).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    pub client_addr: u32,
    pub backend_addr: u32,
    pub client_port: u16,
    pub backend_port: u16,
}

impl ConnKey {
    pub const fn new(client: Endpoint, backend: Endpoint) -> Self {
        Self {
            client_addr: client.addr,
            backend_addr: backend.addr,
            client_port: client.port,
            backend_port: backend.port,
        }
    }

    pub const fn client(&self) -> Endpoint {
        Endpoint {
            addr: self.client_addr,
            port: self.client_port,
            _pad: 0,
        }
    }

    pub const fn backend(&self) -> Endpoint {
        Endpoint {
            addr: self.backend_addr,
            port: self.backend_port,
            _pad: 0,
        }
    }
}

/// [`Conn`] flag: the client sent its FIN and the server acknowledged it.
pub const CONN_FIN_CLIENT: u32 = 1;
/// [`Conn`] flag: the server sent its FIN.
pub const CONN_FIN_SERVER: u32 = 2;
/// [`Conn`] flag: a SYN for this 4-tuple through the same frontend was seen
/// (a client reusing its port): a completed handshake may replace the
/// entry, with fresh sequence numbers.
pub const CONN_REOPENING: u32 = 4;
/// [`Conn`] flag: a client RST ahead of `client_next` waits for the
/// server's next new acknowledgement (see `client_rst`). A RST that
/// crosses the server's ACK of the client's last segment (a client closing
/// while the server's data is in flight) is in sequence for the server, and
/// must end the entry as it ends the server's socket.
pub const CONN_RST_PENDING: u32 = 8;
/// [`Conn`] flag: `client_fin_end` holds the end of a FIN the client sent,
/// until the server acknowledges it (any number may be that end, 0
/// included).
pub const CONN_FIN_PENDING: u32 = 16;

/// Value of [`CONNS`]: an established connection. Sequence numbers are host
/// order; times are `bpf_ktime_get_coarse_ns` (CLOCK_MONOTONIC_COARSE).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// The frontend the client opened it through: the source of replies.
    pub frontend: Endpoint,
    /// The mapping's slot, for its counters.
    pub slot: u32,
    /// `CONN_*` bits.
    pub flags: u32,
    /// The next sequence number expected from the client: the last one the
    /// server acknowledged. Checks the client's RST.
    pub client_next: u32,
    /// The next sequence number expected from the server (its highest
    /// segment end). Checks the server's RST.
    pub server_next: u32,
    /// With [`CONN_FIN_PENDING`]: the end of a FIN the client sent, until
    /// the server acknowledges it.
    pub client_fin_end: u32,
    /// With [`CONN_RST_PENDING`]: the sequence number of a client RST that
    /// was ahead of `client_next`. The server's next new acknowledgement
    /// decides it: exactly this number, and the RST was in sequence.
    pub client_rst: u32,
    /// When a packet of the connection was last seen: the idle sweep's clock.
    pub last_seen_ns: u64,
    pub created_ns: u64,
}

impl Conn {
    /// All zero: what the kernel programs start from before copying an
    /// entry out of the map (an uninitialised value is refused by the
    /// verifier).
    pub const ZERO: Self = Self {
        frontend: Endpoint {
            addr: 0,
            port: 0,
            _pad: 0,
        },
        slot: 0,
        flags: 0,
        client_next: 0,
        server_next: 0,
        client_fin_end: 0,
        client_rst: 0,
        last_seen_ns: 0,
        created_ns: 0,
    };
}

/// Key of [`HALF_OPEN`]: one handshake, its connection and the client's
/// initial sequence number. A SYN for the same 4-tuple with another ISN (an
/// off-path sender's, which cannot know the client's) is another handshake:
/// it cannot displace this one; the client's own retransmitted SYN finds
/// this one. The server's SYN-ACK finds it by its acknowledgement less one,
/// the client's completing ACK by its sequence number less one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HalfOpenKey {
    pub conn: ConnKey,
    /// Host order.
    pub client_isn: u32,
}

impl HalfOpenKey {
    pub const fn new(conn: ConnKey, client_isn: u32) -> Self {
        Self { conn, client_isn }
    }
}

/// [`HalfOpen`] flag: the server's SYN-ACK was seen; `server_isn` holds.
pub const HALF_OPEN_ISN_KNOWN: u32 = 1;

/// Value of [`HALF_OPEN`]: a handshake in progress.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HalfOpen {
    pub frontend: Endpoint,
    pub slot: u32,
    /// `HALF_OPEN_*` bits.
    pub flags: u32,
    /// The client's initial sequence number (from its SYN), host order.
    pub client_isn: u32,
    /// The server's, once its SYN-ACK was seen.
    pub server_isn: u32,
    pub last_seen_ns: u64,
}

/// Value of [`MAPPING_STATS`], per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingCounters {
    /// Client -> pod, counted at ingress on the node that did the DNAT.
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Pod -> client, counted at egress on the node the reply leaves.
    pub packets_out: u64,
    pub bytes_out: u64,
}

/// Longest mapping name kept in [`MAPPING_NAMES`], in bytes.
pub const MAX_NAME_LEN: usize = 127;

/// Value of [`MAPPING_NAMES`]: UTF-8, zero-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingName {
    pub len: u8,
    pub bytes: [u8; MAX_NAME_LEN],
}

impl MappingName {
    pub const EMPTY: Self = Self {
        len: 0,
        bytes: [0; MAX_NAME_LEN],
    };

    /// Truncates at a character boundary if the name is longer than
    /// [`MAX_NAME_LEN`].
    pub fn new(name: &str) -> Self {
        let mut end = name.len().min(MAX_NAME_LEN);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut out = Self::EMPTY;
        out.bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        out.len = end as u8;
        out
    }

    pub fn as_str(&self) -> &str {
        let len = (self.len as usize).min(MAX_NAME_LEN);
        core::str::from_utf8(&self.bytes[..len]).unwrap_or("")
    }
}

/// Longest source description kept in [`AgentStatus`], in bytes.
pub const STATUS_SOURCE_LEN: usize = 128;
/// Longest error message kept in [`AgentStatus`], in bytes.
pub const STATUS_ERROR_LEN: usize = 256;

/// Value of [`AGENT_STATUS`]. Times are Unix milliseconds (0: never); texts
/// are UTF-8, zero-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    /// When the agent last wrote this: an agent that stopped writing has
    /// stopped (it rewrites it every few seconds).
    pub heartbeat_ms: u64,
    pub started_ms: u64,
    pub pid: u64,
    pub last_reconcile_ms: u64,
    pub last_reconcile_micros: u64,
    pub reconciles: u64,
    pub reconcile_errors: u64,
    pub mappings: u64,
    pub last_error_ms: u64,
    /// When the connection sweep last ran, and what it found.
    pub last_sweep_ms: u64,
    /// Established connections the sweep walked (also exact from the
    /// counters at any time).
    pub conns_at_sweep: u64,
    /// Half-open entries the sweep walked (an LRU: only a walk counts it).
    pub half_open_at_sweep: u64,
    /// Half-open entries evicted (SYN floods churn the LRU) since the agent
    /// started, as of the last sweep.
    pub half_open_churned: u64,
    /// Where the mappings come from: `file PATH` or `kubernetes ...`.
    pub source: [u8; STATUS_SOURCE_LEN],
    pub last_error: [u8; STATUS_ERROR_LEN],
}

impl AgentStatus {
    pub const EMPTY: Self = Self {
        heartbeat_ms: 0,
        started_ms: 0,
        pid: 0,
        last_reconcile_ms: 0,
        last_reconcile_micros: 0,
        reconciles: 0,
        reconcile_errors: 0,
        mappings: 0,
        last_error_ms: 0,
        last_sweep_ms: 0,
        conns_at_sweep: 0,
        half_open_at_sweep: 0,
        half_open_churned: 0,
        source: [0; STATUS_SOURCE_LEN],
        last_error: [0; STATUS_ERROR_LEN],
    };
}

/// Value of [`LOADED_SETTINGS`]: `LOADED_*` flags. All zero, what a data
/// path pinned before the map existed shows, is the default of every
/// setting.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadedSettings {
    pub flags: u32,
}

/// `--redirect off`: the programs send no translated packet on themselves.
pub const LOADED_NO_REDIRECT: u32 = 1;

/// Copies `text` into a zero-padded field, cut at a character boundary.
pub fn put_text(field: &mut [u8], text: &str) {
    let mut end = text.len().min(field.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field.fill(0);
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
}

/// The text in a zero-padded field (empty if it is not UTF-8).
pub fn get_text(field: &[u8]) -> &str {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    core::str::from_utf8(&field[..end]).unwrap_or("")
}

const _: () = assert!(size_of::<Endpoint>() == 8);
const _: () = assert!(size_of::<NatTarget>() == 16);
const _: () = assert!(size_of::<ConnKey>() == 12);
const _: () = assert!(size_of::<Conn>() == 48);
const _: () = assert!(size_of::<HalfOpenKey>() == 16);
const _: () = assert!(size_of::<HalfOpen>() == 32);
const _: () = assert!(size_of::<MappingCounters>() == 32);
const _: () = assert!(size_of::<MappingName>() == MAX_NAME_LEN + 1);
const _: () = assert!(size_of::<AgentStatus>() == 13 * 8 + STATUS_SOURCE_LEN + STATUS_ERROR_LEN);
const _: () = assert!(size_of::<LoadedSettings>() == 4);

impl HalfOpen {
    /// All zero, as [`Conn::ZERO`].
    pub const ZERO: Self = Self {
        frontend: Endpoint {
            addr: 0,
            port: 0,
            _pad: 0,
        },
        slot: 0,
        flags: 0,
        client_isn: 0,
        server_isn: 0,
        last_seen_ns: 0,
    };
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)], made only of integers and arrays of
    // integers, with explicit padding fields, so every bit pattern is valid and
    // there are no implicit padding bytes (checked by the size assertions).
    unsafe impl aya::Pod for Endpoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for NatTarget {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ConnKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Conn {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpenKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpen {}
    // SAFETY: as above.
    unsafe impl aya::Pod for MappingCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for MappingName {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AgentStatus {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LoadedSettings {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_stores_wire_bytes() {
        let e = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
        assert_eq!(e.addr.to_ne_bytes(), [198, 18, 0, 10]);
        assert_eq!(e.port.to_ne_bytes(), [0x1f, 0x56]);
        assert_eq!(e.ip(), Ipv4Addr::new(198, 18, 0, 10));
        assert_eq!(e.port(), 8022);
    }

    #[test]
    fn status_texts_round_trip_and_are_cut_at_a_char_boundary() {
        let mut status = AgentStatus::EMPTY;
        put_text(&mut status.source, "file /etc/ssh-fwd/mappings.yaml");
        assert_eq!(get_text(&status.source), "file /etc/ssh-fwd/mappings.yaml");
        put_text(&mut status.source, &"é".repeat(100));
        assert_eq!(get_text(&status.source).len(), STATUS_SOURCE_LEN);
        put_text(&mut status.source, "short");
        assert_eq!(get_text(&status.source), "short", "the old text is cleared");
    }

    #[test]
    fn mapping_name_truncates_at_char_boundary() {
        let long = "é".repeat(100);
        let n = MappingName::new(&long);
        assert!(n.as_str().len() <= MAX_NAME_LEN);
        assert_eq!(n.as_str().len() % 2, 0);
        assert_eq!(MappingName::new("job-4711").as_str(), "job-4711");
    }
}
