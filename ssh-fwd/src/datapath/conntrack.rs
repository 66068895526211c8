//! The connection tables as the agent and operators see them: the sweep
//! that removes connections that closed or went idle (the kernel programs
//! never time anything out) and counts them off what their clients hold
//! ([`SOURCES`], [`SOURCES6`], through the kernel: [`quota`]), the purge
//! of connections through retired frontends, and the listing for
//! `ssh-fwd list conns`. Each is done for both families' tables ([`CONNS`]
//! and [`CONNS6`]...) by the same code, generic over the family
//! ([`MapFamily`]). With them, the tables an upgrade
//! leaves for the connections of an older data path ([`legacy`]): seeded
//! once, swept when their time ends.
//!
//! The half-open and claim tables are LRUs the kernel churns: nothing
//! sweeps them (a half-open entry or a claim past its use only waits to be
//! evicted), and every walk of any table is a batch walk ([`batch`]),
//! which ends whatever the kernel removes meanwhile.

pub mod activity;
mod legacy;
mod quota;
mod table;
mod take;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf, Pod,
    maps::{HashMap, IterableMap as _, Map, MapData},
};
use ssh_fwd_common::{
    conntrack::{Expiry, closing},
    maps::{
        Addr6, CLAIMS, CLAIMS6, CONN_STATS, CONN_STATS6, CONNS, CONNS6, Claim, ClaimKey, Conn,
        ConnKey, ConnStats, Ended, Endpoint, HALF_OPEN, HALF_OPEN6, HalfOpen, HalfOpenKey, LEGACY,
        LEGACY_CONNS, SOURCES, SOURCES6,
    },
    outcome::Outcome,
};

use super::{
    batch,
    family::{self, MapFamily},
    maps::open_pin,
    pins::PinLayout,
};
pub use legacy::Legacy;
pub use quota::Adder;
use table::Table;

/// How long entries may stay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// A connection without a segment from its server for this long is
    /// removed (`--conn-idle-timeout`).
    pub idle: Duration,
    /// A connection both sides closed is removed this long after its last
    /// packet (retransmitted FINs and the last ACK still get rewritten).
    pub close: Duration,
}

impl Timeouts {
    pub const CLOSE: Duration = Duration::from_secs(10);

    pub fn with_idle(idle: Duration) -> Self {
        Self {
            idle,
            close: Self::CLOSE,
        }
    }
}

/// What one sweep removed and found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub closed: u64,
    pub expired: u64,
    /// Entries in each table after the sweep.
    pub conns: u64,
    pub half_open: u64,
    pub claims: u64,
    /// Clients holding connections (IPv4 addresses, IPv6 /64s), and the
    /// most one holds.
    pub sources: u64,
    pub most_per_source: u64,
    /// Backends whose older connections may still be picked up.
    pub legacy_backends: u64,
}

/// What one sweep did and found.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    pub swept: Swept,
    /// What it removed, for the connection log.
    pub gone: Vec<Gone>,
    /// Each frontend's connections, for activity.
    pub activity: activity::Tallies,
}

/// A connection the sweep or a purge removed, for the connection log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    pub client: SocketAddr,
    pub frontend: SocketAddr,
    pub backend: SocketAddr,
    /// When the server confirmed it (kernel clock).
    pub created_ns: u64,
    pub why: Ended,
    /// Its traffic, if `--conn-log all` counted it.
    pub stats: Option<ConnStats>,
}

impl Gone {
    fn of<A: MapFamily>(
        key: &ConnKey<A>,
        conn: &Conn<Endpoint<A>>,
        why: Ended,
        stats: Option<ConnStats>,
    ) -> Self {
        Self {
            client: A::socket(&key.client()),
            frontend: A::socket(&conn.frontend),
            backend: A::socket(&key.backend()),
            created_ns: conn.created_ns,
            why,
            stats,
        }
    }
}

/// One entry of a family's tables, for listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<A: MapFamily = u32> {
    Established(ConnKey<A>, Conn<Endpoint<A>>),
    HalfOpen(ConnKey<A>, HalfOpen<Endpoint<A>>),
    Claimed(ClaimKey<A>, Claim<Endpoint<A>>),
}

/// One family's tables: connections, handshakes, claims, quota and
/// traffic.
struct FamilyTables<A: MapFamily> {
    conns: HashMap<MapData, ConnKey<A>, Conn<Endpoint<A>>>,
    half_open: HashMap<MapData, HalfOpenKey<A>, HalfOpen<Endpoint<A>>>,
    claims: HashMap<MapData, ClaimKey<A>, Claim<Endpoint<A>>>,
    sources: HashMap<MapData, A::Source, u64>,
    stats: HashMap<MapData, ConnKey<A>, ConnStats>,
}

/// Handles to [`CONNS`], [`HALF_OPEN`], [`CLAIMS`], [`SOURCES`],
/// [`CONN_STATS`], their IPv6 twins, [`LEGACY`] and [`LEGACY_CONNS`].
pub struct ConnTables {
    v4: FamilyTables<u32>,
    v6: FamilyTables<Addr6>,
    legacy: Legacy,
    /// How removals are counted off what clients hold; without it (tables
    /// opened from their pins, see [`ConnTables::with_quota`]) they are not.
    quota: Option<Adder>,
}

/// The maps [`ConnTables`] holds, in the order it takes them.
const TABLES: [&str; 12] = [
    CONNS,
    HALF_OPEN,
    CLAIMS,
    SOURCES,
    CONN_STATS,
    CONNS6,
    HALF_OPEN6,
    CLAIMS6,
    SOURCES6,
    CONN_STATS6,
    LEGACY,
    LEGACY_CONNS,
];

impl ConnTables {
    /// Takes the tables out of a freshly loaded object, and loads the
    /// program that counts removals off what clients hold.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let quota = Adder::from_ebpf(ebpf)?;
        let mut maps = Vec::new();
        for name in TABLES {
            maps.push(
                ebpf.take_map(name)
                    .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))?,
            );
        }
        Ok(Self::from_maps(maps)?.with_quota(quota))
    }

    /// Opens the tables an agent pinned. What a sweep or purge of them
    /// removes is not counted off its clients unless an [`Adder`] is given
    /// ([`ConnTables::with_quota`]).
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        let maps = TABLES
            .iter()
            .map(|name| open_pin(layout, name))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Self::from_maps(maps)
    }

    fn from_maps(maps: Vec<Map>) -> anyhow::Result<Self> {
        let [
            conns,
            half_open,
            claims,
            sources,
            stats,
            conns6,
            half_open6,
            claims6,
            sources6,
            stats6,
            legacy,
            legacy_conns,
        ]: [Map; 12] = maps
            .try_into()
            .map_err(|_| anyhow!("the connection tables are {} maps", TABLES.len()))?;
        Ok(Self {
            v4: FamilyTables {
                conns: HashMap::try_from(conns).context(CONNS)?,
                half_open: HashMap::try_from(half_open).context(HALF_OPEN)?,
                claims: HashMap::try_from(claims).context(CLAIMS)?,
                sources: HashMap::try_from(sources).context(SOURCES)?,
                stats: HashMap::try_from(stats).context(CONN_STATS)?,
            },
            v6: FamilyTables {
                conns: HashMap::try_from(conns6).context(CONNS6)?,
                half_open: HashMap::try_from(half_open6).context(HALF_OPEN6)?,
                claims: HashMap::try_from(claims6).context(CLAIMS6)?,
                sources: HashMap::try_from(sources6).context(SOURCES6)?,
                stats: HashMap::try_from(stats6).context(CONN_STATS6)?,
            },
            legacy: Legacy {
                backends: HashMap::try_from(legacy).context(LEGACY)?,
                conns: HashMap::try_from(legacy_conns).context(LEGACY_CONNS)?,
            },
            quota: None,
        })
    }

    /// These tables, with removals counted off their clients by `quota`.
    pub fn with_quota(mut self, quota: Adder) -> Self {
        self.quota = Some(quota);
        self
    }

    /// The program removals are counted off through, if any.
    pub fn quota(&self) -> Option<&Adder> {
        self.quota.as_ref()
    }

    /// The tables an upgrade leaves for an older data path's connections.
    pub fn legacy(&mut self) -> &mut Legacy {
        &mut self.legacy
    }

    /// Removes what has ended by `now` (on the kernel programs' clock, see
    /// [`clock_ns`]), and counts what it removed off what its clients hold
    /// in [`SOURCES`] (through the kernel: [`quota`]). Entries are read
    /// first and removed after, so the walk is not disturbed; an entry the
    /// kernel removed, refreshed or replaced meanwhile stays.
    pub fn sweep(&mut self, now: u64, t: &Timeouts) -> Swept {
        self.sweep_all(now, t).swept
    }

    /// [`ConnTables::sweep`], returning too what it removed, with each
    /// connection's traffic (taken out of [`CONN_STATS`]), and each
    /// frontend's connections as the walk found them ([`activity`]): one
    /// walk of each family's tables serves all.
    pub fn sweep_all(&mut self, now: u64, t: &Timeouts) -> Sweep {
        let limits = table::Limits {
            idle: nanos(t.idle),
            close: nanos(t.close),
        };
        let mut sweep = Sweep::default();
        let quota = self.quota.as_ref();
        self.v4.sweep(now, &limits, quota, &mut sweep);
        self.v6.sweep(now, &limits, quota, &mut sweep);
        sweep.swept.legacy_backends = self.legacy.sweep(now);
        sweep
    }

    /// Removes every entry opened through one of `frontends` (of either
    /// family); returns the established connections that went, with their
    /// traffic.
    pub fn purge(&mut self, frontends: &BTreeSet<SocketAddr>) -> Vec<Gone> {
        let keys = family::split_keys(frontends);
        let quota = self.quota.as_ref();
        let mut gone = self.v4.purge(&keys.v4.into_iter().collect(), quota);
        gone.extend(self.v6.purge(&keys.v6.into_iter().collect(), quota));
        gone
    }

    /// Counts the open connections of adopted tables in [`SOURCES`] (and
    /// [`SOURCES6`]) for a data path that did not count them; returns
    /// how many were added.
    pub fn count_adopted(&mut self) -> u64 {
        let quota = self.quota.as_ref();
        self.v4.count_adopted(quota) + self.v6.count_adopted(quota)
    }

    /// How many entries each table holds at most (`--conn-table-size`,
    /// `--half-open-table-size`): established, half-open.
    /// (IPv4's; the IPv6 tables are sized alike.)
    pub fn capacities(&self) -> anyhow::Result<(u32, u32)> {
        let conns = self.v4.conns.map().info().context(CONNS)?.max_entries();
        let half_open = (self.v4.half_open.map().info())
            .context(HALF_OPEN)?
            .max_entries();
        Ok((conns, half_open))
    }

    /// How many entries each family's table of connections holds now:
    /// IPv4, IPv6.
    pub fn conns_held(&self) -> (usize, usize) {
        (
            Table::entries(&self.v4.conns).len(),
            Table::entries(&self.v6.conns).len(),
        )
    }

    /// Every entry of the three IPv4 tables.
    pub fn entries(&self) -> Vec<Entry> {
        self.v4.entries()
    }

    /// Every entry of the three IPv6 tables.
    pub fn entries6(&self) -> Vec<Entry<Addr6>> {
        self.v6.entries()
    }

    /// Each frontend's connections now, of both families, without
    /// removing anything (for `ssh-fwd list`, which runs beside the
    /// agent's sweep).
    pub fn tallies(&self) -> activity::Tallies {
        let mut tallies = activity::Tallies::new();
        let conns = Table::entries(&self.v4.conns);
        activity::aggregate(&mut tallies, conns.iter().map(|(_, c)| c));
        let conns = Table::entries(&self.v6.conns);
        activity::aggregate(&mut tallies, conns.iter().map(|(_, c)| c));
        tallies
    }

    /// What each IPv4 client address holds, as [`SOURCES`] says now.
    pub fn sources(&self) -> Vec<(u32, u64)> {
        Table::entries(&self.v4.sources)
    }

    /// What each IPv6 client's /64 holds, as [`SOURCES6`] says now.
    pub fn sources6(&self) -> Vec<(u64, u64)> {
        Table::entries(&self.v6.sources)
    }
}

impl<A: MapFamily> FamilyTables<A>
where
    ConnKey<A>: Pod,
    Conn<Endpoint<A>>: Pod,
    HalfOpenKey<A>: Pod,
    HalfOpen<Endpoint<A>>: Pod,
    ClaimKey<A>: Pod,
    Claim<Endpoint<A>>: Pod,
{
    /// Sweeps this family's connections into `sweep`, and counts what it
    /// removed off their clients.
    fn sweep(
        &mut self,
        now: u64,
        limits: &table::Limits,
        quota: Option<&Adder>,
        sweep: &mut Sweep,
    ) {
        let counts = table::sweep(&mut self.conns, now, limits);
        self.settle(quota, &counts.released);
        for (key, conn, why) in &counts.ended {
            let why = match why {
                Expiry::Closed => Ended::Fin,
                Expiry::Idle => Ended::Idle,
            };
            let stats = take_stats(&self.stats, key);
            sweep.gone.push(Gone::of(key, conn, why, stats));
        }
        forget_orphan_stats(&mut self.stats, &self.conns);
        let s = &mut sweep.swept;
        s.closed += counts.closed;
        s.expired += counts.expired;
        s.conns += counts.conns;
        s.half_open += Table::entries(&self.half_open).len() as u64;
        s.claims += Table::entries(&self.claims).len() as u64;
        s.sources += counts.per_source.len() as u64;
        let most = counts.per_source.values().copied().max().unwrap_or(0);
        s.most_per_source = s.most_per_source.max(most);
        sweep.activity.extend(counts.activity);
    }

    fn purge(&mut self, frontends: &BTreeSet<Endpoint<A>>, quota: Option<&Adder>) -> Vec<Gone> {
        let purged = table::purge(
            &mut self.conns,
            &mut self.half_open,
            &mut self.claims,
            frontends,
        );
        self.settle(quota, &purged.released);
        (purged.conns.iter())
            .map(|(key, conn)| Gone::of(key, conn, Ended::Retired, take_stats(&self.stats, key)))
            .collect()
    }

    /// [`ConnTables::count_adopted`] for this family.
    fn count_adopted(&mut self, quota: Option<&Adder>) -> u64 {
        let held = table::held(&Table::entries(&self.conns));
        self.counted(quota)
            .map_or(0, |mut counted| table::count_held(&mut counted, &held))
    }

    /// Counts what removals `released` off their clients, and forgets
    /// the clients that hold nothing.
    fn settle(&mut self, quota: Option<&Adder>, released: &BTreeMap<A::Source, u64>) {
        if let Some(mut counted) = self.counted(quota) {
            table::settle(&mut counted, released);
        }
    }

    /// This family's quota table, changed through `quota` (none: tables
    /// opened without one change no count).
    fn counted<'a>(
        &'a mut self,
        quota: Option<&'a Adder>,
    ) -> Option<quota::Counted<'a, A::Source>> {
        Some(quota::Counted {
            table: &mut self.sources,
            adder: quota?,
            family: A::QUOTA,
        })
    }

    fn entries(&self) -> Vec<Entry<A>> {
        let conns = Table::entries(&self.conns)
            .into_iter()
            .map(|(k, c)| Entry::Established(k, c));
        let halves = Table::entries(&self.half_open)
            .into_iter()
            .map(|(k, h)| Entry::HalfOpen(k.conn, h));
        let claims = Table::entries(&self.claims)
            .into_iter()
            .map(|(k, c)| Entry::Claimed(k, c));
        conns.chain(halves).chain(claims).collect()
    }
}

/// The traffic counted for `key`, taken out of [`CONN_STATS`] (or
/// [`CONN_STATS6`]).
fn take_stats<K: Pod>(stats: &HashMap<MapData, K, ConnStats>, key: &K) -> Option<ConnStats> {
    take::lookup_and_delete(stats.map(), key).ok().flatten()
}

/// Removes the traffic counts of connections that are gone by another way
/// than the sweep (a purge, a teardown of the programs' removals racing
/// the sweep), so that [`CONN_STATS`] never fills.
fn forget_orphan_stats<K: Pod, C: Pod>(
    stats: &mut HashMap<MapData, K, ConnStats>,
    conns: &HashMap<MapData, K, C>,
) {
    for (key, _) in Table::entries(stats) {
        if HashMap::get(conns, &key, 0).is_err() {
            let _ = stats.remove(&key);
        }
    }
}

impl<A: MapFamily> Entry<A> {
    /// The state as `ssh-fwd list conns` names it.
    pub fn state(&self) -> &'static str {
        match self {
            Entry::Established(_, c) if closing(c) => "closing",
            Entry::Established(..) => "established",
            Entry::HalfOpen(..) => "half-open",
            Entry::Claimed(..) => "claimed",
        }
    }
}

impl<K: Pod, V: Pod> Table<K, V> for HashMap<MapData, K, V> {
    fn entries(&self) -> Vec<(K, V)> {
        let limit = self
            .map()
            .info()
            .map_or(usize::MAX, |i| i.max_entries() as usize);
        match batch::entries(self.map(), limit) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::debug!(error = %e, "cannot walk a connection table");
                Vec::new()
            }
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        HashMap::get(self, key, 0).ok()
    }

    fn take(&mut self, key: &K) -> Option<V> {
        match take::lookup_and_delete(self.map(), key) {
            Ok(value) => value,
            Err(e) => {
                tracing::debug!(error = %e, "cannot remove a connection entry");
                None
            }
        }
    }

    fn put_back(&mut self, key: &K, value: &V) -> bool {
        // EEXIST: the kernel stored a newer entry meanwhile, which stays.
        self.insert(key, value, take::BPF_NOEXIST).is_ok()
    }
}

/// SYNs whose handshake no client completed through this node: recorded,
/// but neither claimed by the client's ACK nor refused by the server. A
/// SYN flood shows here (and, on a node that only forwards to pods of
/// other nodes, every SYN: the claims are made where the pod is).
pub fn half_open_churned(count: impl Fn(Outcome) -> u64) -> u64 {
    count(Outcome::HalfOpened)
        .saturating_sub(count(Outcome::ConnClaimed) + count(Outcome::HalfOpenRefused))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The kernel programs' clock (`bpf_ktime_get_coarse_ns`:
/// CLOCK_MONOTONIC_COARSE), in nanoseconds.
pub fn clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}
