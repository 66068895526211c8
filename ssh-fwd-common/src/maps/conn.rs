//! The connection tables' layouts: [`CONNS`](super::CONNS),
//! [`HALF_OPEN`](super::HALF_OPEN) and [`CLAIMS`](super::CLAIMS). What each
//! entry means, and who may create or change it, is in
//! [`crate::conntrack`].

use super::Endpoint;

/// Key of [`CONNS`](super::CONNS): one TCP connection between a client and
/// a backend, as the backend sees it (a client reaching one backend
/// through two frontends from one port is one connection at the backend).
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
/// (a client reusing its port): the client's segments record claims, and
/// a claim the server confirms replaces the entry.
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

/// Value of [`CONNS`](super::CONNS): a connection the server confirmed.
/// Sequence numbers are host order; times are `bpf_ktime_get_coarse_ns`
/// (CLOCK_MONOTONIC_COARSE).
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
    /// When the server last sent a segment of the connection: the idle
    /// sweep's clock.
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

/// Key of [`HALF_OPEN`](super::HALF_OPEN): one handshake, its connection
/// and the client's initial sequence number. A SYN for the same 4-tuple
/// with another ISN (an off-path sender's, which cannot know the client's)
/// is another handshake: it cannot displace this one; the client's own
/// retransmitted SYN finds this one. The server's SYN-ACK finds it by its
/// acknowledgement less one.
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
/// Written only by an older data path (layout v4 without claims); read
/// only to list the entries it left.
pub const HALF_OPEN_ISN_KNOWN: u32 = 1;

/// Value of [`HALF_OPEN`](super::HALF_OPEN): a SYN through a frontend.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HalfOpen {
    pub frontend: Endpoint,
    pub slot: u32,
    /// `HALF_OPEN_*` bits, and the MSS cap (see `conntrack::mss`).
    pub flags: u32,
    /// The client's initial sequence number (from its SYN), host order.
    pub client_isn: u32,
    /// Unused (0): the server's ISN is never needed (see `CLAIMS`).
    pub server_isn: u32,
    pub last_seen_ns: u64,
}

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

/// Key of [`CLAIMS`](super::CLAIMS): a client's segment through a frontend
/// for a connection the node does not track (yet), and the server's
/// sequence number it acknowledged. The server's next segment starts
/// exactly there (its first after the handshake: its ISN plus one): it
/// finds the claim by its own sequence number, which an off-path sender
/// cannot know.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    pub conn: ConnKey,
    /// The client's acknowledgement number, host order.
    pub ack: u32,
}

impl ClaimKey {
    pub const fn new(conn: ConnKey, ack: u32) -> Self {
        Self { conn, ack }
    }
}

/// Value of [`CLAIMS`](super::CLAIMS): the frontend a client's segment came
/// through, unconfirmed until the server's segment finds it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub frontend: Endpoint,
    pub slot: u32,
    pub _pad: u32,
    /// When the client's segment was seen; past `--conn-confirm-timeout`
    /// the claim counts for nothing.
    pub seen_ns: u64,
}

const _: () = assert!(size_of::<ConnKey>() == 12);
const _: () = assert!(size_of::<Conn>() == 48);
const _: () = assert!(size_of::<HalfOpenKey>() == 16);
const _: () = assert!(size_of::<HalfOpen>() == 32);
const _: () = assert!(size_of::<ClaimKey>() == 16);
const _: () = assert!(size_of::<Claim>() == 24);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)], made only of integers, with
    // explicit padding fields, so every bit pattern is valid and there are
    // no implicit padding bytes (checked by the size assertions).
    unsafe impl aya::Pod for ConnKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Conn {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpenKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpen {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ClaimKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Claim {}
}
