//! The connection tables' layouts: [`CONNS`](super::CONNS),
//! [`HALF_OPEN`](super::HALF_OPEN) and [`CLAIMS`](super::CLAIMS). What each
//! entry means, and who may create or change it, is in
//! [`crate::conntrack`].

use super::{Addr, Addr6, Endpoint, Endpoint6};

/// Key of [`CONNS`](super::CONNS): one TCP connection between a client and
/// a backend, as the backend sees it (a client reaching one backend
/// through two frontends from one port is one connection at the backend).
/// IPv4 by default; [`ConnKey6`] for IPv6.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey<A = u32> {
    pub client_addr: A,
    pub backend_addr: A,
    pub client_port: u16,
    pub backend_port: u16,
}

impl<A: Addr> ConnKey<A> {
    pub const fn new(client: Endpoint<A>, backend: Endpoint<A>) -> Self {
        Self {
            client_addr: client.addr,
            backend_addr: backend.addr,
            client_port: client.port,
            backend_port: backend.port,
        }
    }

    pub const fn client(&self) -> Endpoint<A> {
        Endpoint {
            addr: self.client_addr,
            port: self.client_port,
            _pad: A::PAD,
        }
    }

    pub const fn backend(&self) -> Endpoint<A> {
        Endpoint {
            addr: self.backend_addr,
            port: self.backend_port,
            _pad: A::PAD,
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
/// (CLOCK_MONOTONIC_COARSE). IPv4 by default; [`Conn6`] for IPv6.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn<E = Endpoint> {
    /// The frontend the client opened it through: the source of replies.
    pub frontend: E,
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

impl<A: Addr> Conn<Endpoint<A>> {
    /// All zero: what the kernel programs start from before copying an
    /// entry out of the map (an uninitialised value is refused by the
    /// verifier).
    pub const ZERO: Self = Self {
        frontend: Endpoint::ZERO,
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
pub struct HalfOpenKey<A = u32> {
    pub conn: ConnKey<A>,
    /// Host order.
    pub client_isn: u32,
}

impl<A: Addr> HalfOpenKey<A> {
    pub const fn new(conn: ConnKey<A>, client_isn: u32) -> Self {
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
pub struct HalfOpen<E = Endpoint> {
    pub frontend: E,
    pub slot: u32,
    /// `HALF_OPEN_*` bits, and the MSS cap (see `conntrack::mss`).
    pub flags: u32,
    /// The client's initial sequence number (from its SYN), host order.
    pub client_isn: u32,
    /// Unused (0): the server's ISN is never needed (see `CLAIMS`).
    pub server_isn: u32,
    pub last_seen_ns: u64,
}

impl<A: Addr> HalfOpen<Endpoint<A>> {
    /// All zero, as [`Conn::ZERO`].
    pub const ZERO: Self = Self {
        frontend: Endpoint::ZERO,
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
pub struct ClaimKey<A = u32> {
    pub conn: ConnKey<A>,
    /// The client's acknowledgement number, host order.
    pub ack: u32,
}

impl<A: Addr> ClaimKey<A> {
    pub const fn new(conn: ConnKey<A>, ack: u32) -> Self {
        Self { conn, ack }
    }
}

/// Value of [`CLAIMS`](super::CLAIMS): the frontend a client's segment came
/// through, unconfirmed until the server's segment finds it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<E = Endpoint> {
    pub frontend: E,
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

/// The IPv6 instances of the tables' layouts.
pub type ConnKey6 = ConnKey<Addr6>;
pub type Conn6 = Conn<Endpoint6>;
pub type HalfOpenKey6 = HalfOpenKey<Addr6>;
pub type HalfOpen6 = HalfOpen<Endpoint6>;
pub type ClaimKey6 = ClaimKey<Addr6>;
pub type Claim6 = Claim<Endpoint6>;

const _: () = assert!(size_of::<ConnKey6>() == 36);
const _: () = assert!(size_of::<Conn6>() == 64);
const _: () = assert!(size_of::<HalfOpenKey6>() == 40);
const _: () = assert!(size_of::<HalfOpen6>() == 48);
const _: () = assert!(size_of::<ClaimKey6>() == 40);
const _: () = assert!(size_of::<Claim6>() == 40);
/// Whether `slot` and then `flags` fill one aligned 8-byte word of a
/// [`Conn`] of either family: the kernel programs update them together,
/// with one atomic operation on that word.
const fn slot_flags_word<A: Addr>() -> bool {
    let slot = core::mem::offset_of!(Conn<Endpoint<A>>, slot);
    slot.is_multiple_of(8) && core::mem::offset_of!(Conn<Endpoint<A>>, flags) == slot + 4
}
const _: () = assert!(slot_flags_word::<u32>() && slot_flags_word::<Addr6>());

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
    // SAFETY: as above.
    unsafe impl aya::Pod for ConnKey6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Conn6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpenKey6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HalfOpen6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ClaimKey6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Claim6 {}
}
