//! Per-mapping counters: the values of [`MAPPING_STATS`](super::MAPPING_STATS)
//! and [`MAPPING_CONNS`](super::MAPPING_CONNS), one per slot, shared by the
//! CPUs (each field is added to atomically).

/// Value of [`MAPPING_STATS`](super::MAPPING_STATS).
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

/// Value of [`MAPPING_CONNS`](super::MAPPING_CONNS): what happened
/// to the connections of one mapping, counted on the pod's node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingConnCounters {
    /// Connections the server confirmed (new connections to the job).
    pub opened: u64,
    /// Handshakes held back because their client holds
    /// `--conns-per-source` connections already.
    pub source_limited: u64,
    /// SYNs from sources outside the mapping's allowlist, counted on the
    /// node that received them (with `--enforce-established`, any client
    /// segment of such a source).
    pub denied: u64,
    /// SYNs over their source's `--syn-rate`, counted on the node that
    /// received them.
    pub syn_limited: u64,
}

const _: () = assert!(size_of::<MappingCounters>() == 32);
const _: () = assert!(size_of::<MappingConnCounters>() == 32);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)] structs of u64 only: every bit pattern is valid,
    // no padding (checked by the size assertions).
    unsafe impl aya::Pod for MappingCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for MappingConnCounters {}
}
