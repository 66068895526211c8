//! What connection tracking needs of an address family besides the pure
//! decisions, which are generic already: its tables, the key its clients'
//! quota is counted under, the checks a client segment passes before it
//! writes, and the connection log. `crate::conntrack` is written once over
//! [`Family`].

use aya_ebpf::maps::{HashMap, LruHashMap};
use ssh_fwd_common::maps::{
    Addr, Claim, ClaimKey, Conn, ConnKey, Ended, Endpoint, HalfOpen, HalfOpenKey, NatTarget, Owner,
};

use crate::{
    audit,
    counters::Direction,
    maps::{CLAIMS, CONNS, FRONTENDS, HALF_OPEN, LEGACY, LEGACY_CONNS, OWNERS, SOURCES},
    packet::Headers,
    verify::{self, Checked, Verdict},
};

/// An address family the programs track connections of.
pub trait Family: Addr + 'static {
    /// What a client's connections are counted under for
    /// `--conns-per-source`.
    type Source: Copy + 'static;

    fn frontends() -> &'static HashMap<Endpoint<Self>, NatTarget<Self>>;
    fn conns() -> &'static HashMap<ConnKey<Self>, Conn<Endpoint<Self>>>;
    fn half_open() -> &'static LruHashMap<HalfOpenKey<Self>, HalfOpen<Endpoint<Self>>>;
    fn claims() -> &'static LruHashMap<ClaimKey<Self>, Claim<Endpoint<Self>>>;
    fn sources() -> &'static HashMap<Self::Source, u64>;
    /// Pod address -> the interfaces it may come in by.
    fn owners() -> &'static HashMap<Self, Owner>;

    /// The quota key of a client address.
    fn source_of(client: Self) -> Self::Source;

    /// The checks of a client segment with headers `h`, before it writes
    /// state (see `crate::verify`).
    fn verify<P: Checked>(p: &P, h: &Headers<Self>) -> Verdict;

    /// Until when `backend`'s untracked replies may belong to a connection
    /// an older data path forwarded, if set.
    fn legacy_until(backend: Endpoint<Self>) -> Option<u64>;
    /// The frontend an older data path recorded for a connection.
    fn legacy_target(key: &ConnKey<Self>) -> Option<NatTarget<Self>>;

    /// The connection log (`crate::audit`).
    fn log_accepted(key: &ConnKey<Self>, conn: &Conn<Endpoint<Self>>);
    fn log_closed(key: &ConnKey<Self>, conn: &Conn<Endpoint<Self>>, ended: Ended);
    fn log_traffic(key: &ConnKey<Self>, direction: Direction, bytes: u64);
}

impl Family for u32 {
    type Source = u32;

    #[inline(always)]
    fn frontends() -> &'static HashMap<Endpoint, NatTarget> {
        &FRONTENDS
    }

    #[inline(always)]
    fn conns() -> &'static HashMap<ConnKey, Conn> {
        &CONNS
    }

    #[inline(always)]
    fn half_open() -> &'static LruHashMap<HalfOpenKey, HalfOpen> {
        &HALF_OPEN
    }

    #[inline(always)]
    fn claims() -> &'static LruHashMap<ClaimKey, Claim> {
        &CLAIMS
    }

    #[inline(always)]
    fn sources() -> &'static HashMap<u32, u64> {
        &SOURCES
    }

    #[inline(always)]
    fn owners() -> &'static HashMap<u32, Owner> {
        &OWNERS
    }

    #[inline(always)]
    fn source_of(client: u32) -> u32 {
        client
    }

    #[inline(always)]
    fn verify<P: Checked>(p: &P, h: &Headers) -> Verdict {
        verify::client_segment(p, h)
    }

    #[inline(always)]
    fn legacy_until(backend: Endpoint) -> Option<u64> {
        // SAFETY: copied out at once.
        unsafe { LEGACY.get(backend) }.copied()
    }

    #[inline(always)]
    fn legacy_target(key: &ConnKey) -> Option<NatTarget> {
        // SAFETY: copied out at once.
        unsafe { LEGACY_CONNS.get(key) }.copied()
    }

    #[inline(always)]
    fn log_accepted(key: &ConnKey, conn: &Conn) {
        audit::accepted(key, conn);
    }

    #[inline(always)]
    fn log_closed(key: &ConnKey, conn: &Conn, ended: Ended) {
        audit::closed(key, conn, ended);
    }

    #[inline(always)]
    fn log_traffic(key: &ConnKey, direction: Direction, bytes: u64) {
        audit::traffic(key, direction, bytes);
    }
}
