//! What connection tracking needs of an address family besides the pure
//! decisions, which are generic already: its tables, the key its clients
//! are counted under (quota and rate), and the checks a client segment
//! passes before it writes. `crate::conntrack`, `crate::guard` and
//! `crate::audit` are written once over [`Family`].

use core::mem::MaybeUninit;

use aya_ebpf::maps::{HashMap, LruHashMap, lpm_trie::Key};
use ssh_fwd_common::{
    conntrack::trust::source_key6,
    maps::{
        Addr, Addr6, AllowData, AllowData6, Bucket, Claim, ClaimKey, Conn, ConnKey, ConnStats,
        Endpoint, HalfOpen, HalfOpenKey, NatTarget, Owner,
    },
};

use crate::{
    maps::{
        ALLOWLIST, ALLOWLIST6, CLAIMS, CLAIMS6, CONN_COPY6, CONN_STATS, CONN_STATS6, CONNS, CONNS6,
        FRONTENDS, FRONTENDS6, HALF_OPEN, HALF_OPEN6, LEGACY, LEGACY_CONNS, OWNERS, OWNERS6,
        REVERSE, REVERSE6, SOURCES, SOURCES6, SYN_BUCKETS, SYN_BUCKETS6,
    },
    packet::Headers,
    verify::{self, Checked, Verdict},
};

/// An address family the programs track connections of.
pub trait Family: Addr + 'static {
    /// What a client is counted under for `--conns-per-source` and
    /// `--syn-rate`: its address, or for IPv6 its /64.
    type Source: Copy + 'static;

    fn frontends() -> &'static HashMap<Endpoint<Self>, NatTarget<Self>>;
    fn reverse() -> &'static HashMap<Endpoint<Self>, NatTarget<Self>>;
    fn conns() -> &'static HashMap<ConnKey<Self>, Conn<Endpoint<Self>>>;
    fn half_open() -> &'static LruHashMap<HalfOpenKey<Self>, HalfOpen<Endpoint<Self>>>;
    fn claims() -> &'static LruHashMap<ClaimKey<Self>, Claim<Endpoint<Self>>>;
    fn sources() -> &'static HashMap<Self::Source, u64>;
    fn syn_buckets() -> &'static LruHashMap<Self::Source, Bucket>;
    fn conn_stats() -> &'static HashMap<ConnKey<Self>, ConnStats>;
    /// Pod address -> the interfaces it may come in by.
    fn owners() -> &'static HashMap<Self, Owner>;

    /// Whether a copy of an entry goes to [`Family::conn_copy`] rather
    /// than the stack.
    const COPY_IN_MAP: bool;
    /// This CPU's place to copy an entry of [`Family::conns`] into, with
    /// [`Family::COPY_IN_MAP`].
    fn conn_copy() -> Option<&'static mut MaybeUninit<Conn<Endpoint<Self>>>>;

    /// The key `client` is counted under.
    fn source_of(client: Self) -> Self::Source;

    /// Whether `client` is in the allowlist of mapping `slot`.
    fn allowed(slot: u32, client: Self) -> bool;

    /// The checks of a client segment with headers `h`, before it writes
    /// state (see `crate::verify`).
    fn verify<P: Checked>(p: &P, h: &Headers<Self>) -> Verdict;

    /// Until when `backend`'s untracked replies may belong to a connection
    /// an older data path forwarded, if set.
    fn legacy_until(backend: Endpoint<Self>) -> Option<u64>;
    /// The frontend an older data path recorded for a connection.
    fn legacy_target(key: &ConnKey<Self>) -> Option<NatTarget<Self>>;
}

impl Family for u32 {
    type Source = u32;
    const COPY_IN_MAP: bool = false;

    #[inline(always)]
    fn conn_copy() -> Option<&'static mut MaybeUninit<Conn>> {
        None
    }

    #[inline(always)]
    fn frontends() -> &'static HashMap<Endpoint, NatTarget> {
        &FRONTENDS
    }

    #[inline(always)]
    fn reverse() -> &'static HashMap<Endpoint, NatTarget> {
        &REVERSE
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
    fn syn_buckets() -> &'static LruHashMap<u32, Bucket> {
        &SYN_BUCKETS
    }

    #[inline(always)]
    fn conn_stats() -> &'static HashMap<ConnKey, ConnStats> {
        &CONN_STATS
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
    fn allowed(slot: u32, client: u32) -> bool {
        let key = Key::new(AllowData::FULL, AllowData::new(slot, client));
        ALLOWLIST.get(&key).is_some()
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
}

impl Family for Addr6 {
    type Source = u64;
    const COPY_IN_MAP: bool = true;

    #[inline(always)]
    fn conn_copy() -> Option<&'static mut MaybeUninit<Conn<Endpoint<Addr6>>>> {
        let p = CONN_COPY6.get_ptr_mut(0)?;
        // SAFETY: this CPU's value of the map, valid for this program run,
        // and used by one copy at a time.
        Some(unsafe { &mut *p.cast() })
    }

    #[inline(always)]
    fn frontends() -> &'static HashMap<Endpoint<Addr6>, NatTarget<Addr6>> {
        &FRONTENDS6
    }

    #[inline(always)]
    fn reverse() -> &'static HashMap<Endpoint<Addr6>, NatTarget<Addr6>> {
        &REVERSE6
    }

    #[inline(always)]
    fn conns() -> &'static HashMap<ConnKey<Addr6>, Conn<Endpoint<Addr6>>> {
        &CONNS6
    }

    #[inline(always)]
    fn half_open() -> &'static LruHashMap<HalfOpenKey<Addr6>, HalfOpen<Endpoint<Addr6>>> {
        &HALF_OPEN6
    }

    #[inline(always)]
    fn claims() -> &'static LruHashMap<ClaimKey<Addr6>, Claim<Endpoint<Addr6>>> {
        &CLAIMS6
    }

    #[inline(always)]
    fn sources() -> &'static HashMap<u64, u64> {
        &SOURCES6
    }

    #[inline(always)]
    fn syn_buckets() -> &'static LruHashMap<u64, Bucket> {
        &SYN_BUCKETS6
    }

    #[inline(always)]
    fn conn_stats() -> &'static HashMap<ConnKey<Addr6>, ConnStats> {
        &CONN_STATS6
    }

    #[inline(always)]
    fn owners() -> &'static HashMap<Addr6, Owner> {
        &OWNERS6
    }

    #[inline(always)]
    fn source_of(client: Addr6) -> u64 {
        source_key6(client)
    }

    #[inline(always)]
    fn allowed(slot: u32, client: Addr6) -> bool {
        let key = Key::new(AllowData6::FULL, AllowData6::new(slot, client));
        ALLOWLIST6.get(&key).is_some()
    }

    #[inline(always)]
    fn verify<P: Checked>(p: &P, h: &Headers<Addr6>) -> Verdict {
        verify::client_segment6(p, h)
    }

    /// No older data path forwarded IPv6.
    #[inline(always)]
    fn legacy_until(_: Endpoint<Addr6>) -> Option<u64> {
        None
    }

    #[inline(always)]
    fn legacy_target(_: &ConnKey<Addr6>) -> Option<NatTarget<Addr6>> {
        None
    }
}
