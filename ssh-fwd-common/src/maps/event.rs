//! The connection log: the records of [`CONN_EVENTS`](super::CONN_EVENTS),
//! a ring buffer the agent drains, and the per-connection byte counts of
//! [`CONN_STATS`](super::CONN_STATS) a closed connection's record reports.

use super::{Endpoint, Endpoint6};

/// Why a [`ConnEvent`] was written.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The server confirmed a connection (written on the pod's node).
    Accepted = 1,
    /// A SYN from a source outside the mapping's allowlist (with
    /// `--enforce-established`, any segment of such a source).
    Denied = 2,
    /// A SYN over its source's `--syn-rate`.
    SynLimited = 3,
    /// A confirmed connection left the table (see [`Ended`]).
    Closed = 4,
}

/// Entries of [`CONN_EVENTS_DROPPED`](super::CONN_EVENTS_DROPPED): one
/// per [`EventKind`], indexed by its value (0 is never counted).
pub const EVENT_KINDS: u32 = 5;

impl EventKind {
    pub const ALL: [Self; 4] = [Self::Accepted, Self::Denied, Self::SynLimited, Self::Closed];

    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Accepted),
            2 => Some(Self::Denied),
            3 => Some(Self::SynLimited),
            4 => Some(Self::Closed),
            _ => None,
        }
    }
}

/// How a closed connection ended.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Both sides sent their FIN (the agent's sweep removed it).
    Fin = 1,
    /// A RST in sequence from either side (the kernel removed it).
    Reset = 2,
    /// Quiet for longer than the idle timeout (the agent's sweep removed it).
    Idle = 3,
    /// The client opened a new connection from the same port once this one
    /// had closed (the kernel replaced it).
    Reused = 4,
    /// Its mapping was removed or moved to another backend (the agent
    /// removed it: the backend's address may go to another pod).
    Retired = 5,
}

impl Ended {
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Fin),
            2 => Some(Self::Reset),
            3 => Some(Self::Idle),
            4 => Some(Self::Reused),
            5 => Some(Self::Retired),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Fin => "fin",
            Self::Reset => "reset",
            Self::Idle => "idle",
            Self::Reused => "reused",
            Self::Retired => "mapping_removed",
        }
    }
}

/// Packets and bytes of one connection each way, counted on the pod's node
/// from its confirmation on. Value of [`CONN_STATS`](super::CONN_STATS).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Client -> pod.
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Pod -> client.
    pub packets_out: u64,
    pub bytes_out: u64,
}

/// One record of [`CONN_EVENTS`](super::CONN_EVENTS). Times are
/// `bpf_ktime_get_coarse_ns` (CLOCK_MONOTONIC_COARSE). IPv4 by default,
/// [`ConnEvent6`] for IPv6; the two share the ring buffer, told apart by
/// their lengths.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnEvent<E = Endpoint> {
    pub time_ns: u64,
    pub client: E,
    pub frontend: E,
    /// The backend the frontend maps to (for a refused SYN, the one it
    /// would have reached).
    pub backend: E,
    /// The mapping's slot.
    pub slot: u32,
    /// An [`EventKind`].
    pub kind: u8,
    /// With [`EventKind::Closed`]: an [`Ended`].
    pub ended: u8,
    pub _pad: u16,
    /// With [`EventKind::Closed`]: when the server confirmed it.
    pub created_ns: u64,
    /// With [`EventKind::Closed`]: its traffic, if `--conn-log all`
    /// counted it.
    pub stats: ConnStats,
}

/// A record of an IPv6 connection.
pub type ConnEvent6 = ConnEvent<Endpoint6>;

impl<E> ConnEvent<E> {
    pub const fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8(self.kind)
    }

    pub const fn ended(&self) -> Option<Ended> {
        Ended::from_u8(self.ended)
    }
}

/// One CPU's records of refused SYNs in the current window (see
/// `crate::audit`): the value of the programs' unpinned `AUDIT_BUDGET`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordBudget {
    pub window: u64,
    pub used: u64,
}

const _: () = assert!(EventKind::Closed as u32 + 1 == EVENT_KINDS);
const _: () = assert!(size_of::<ConnStats>() == 32);
const _: () = assert!(size_of::<ConnEvent>() == 80);
const _: () = assert!(size_of::<ConnEvent6>() == 128);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)] structs of integers only, no padding (checked by
    // the size assertions): every bit pattern is valid.
    unsafe impl aya::Pod for ConnStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ConnEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ConnEvent6 {}
}
