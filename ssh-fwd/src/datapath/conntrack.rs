//! The connection tables as the agent and operators see them: the sweep
//! that removes entries whose connection closed or went idle (the kernel
//! programs never time anything out), the purge of connections through
//! retired frontends, and the listing for `ssh-fwd list conns`. With them,
//! the tables an upgrade leaves for the connections of an older data path
//! ([`LEGACY`], [`LEGACY_CONNS`]): seeded once, swept when their time ends.

mod table;
mod take;

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf, Pod,
    maps::{HashMap, IterableMap as _, Map, MapData, MapInfo},
};
use ssh_fwd_common::{
    conntrack::closing,
    maps::{
        CONNS, Conn, ConnKey, Endpoint, HALF_OPEN, HalfOpen, HalfOpenKey, LEGACY,
        LEGACY_CONN_CAPACITY, LEGACY_CONNS, NatTarget,
    },
    outcome::Outcome,
};

use super::{maps::open_pin, pins::PinLayout};
use table::Table;

/// How long entries may stay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// An established connection without a packet for this long is removed
    /// (`--conn-idle-timeout`).
    pub idle: Duration,
    /// A connection both sides closed is removed this long after its last
    /// packet (retransmitted FINs and the last ACK still get rewritten).
    pub close: Duration,
    /// A handshake that has not completed in this long never will.
    pub half_open: Duration,
}

impl Timeouts {
    pub const CLOSE: Duration = Duration::from_secs(10);
    /// Longer than Linux's SYN retries (about 2 minutes with the defaults),
    /// so a client still retrying keeps its entry.
    pub const HALF_OPEN: Duration = Duration::from_secs(180);

    pub fn with_idle(idle: Duration) -> Self {
        Self {
            idle,
            close: Self::CLOSE,
            half_open: Self::HALF_OPEN,
        }
    }
}

/// What one sweep removed and found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub closed: u64,
    pub expired: u64,
    pub half_open_expired: u64,
    /// Entries left in each table.
    pub conns: u64,
    pub half_open: u64,
    /// Backends whose older connections may still be adopted.
    pub legacy_backends: u64,
}

/// One entry, for listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Established(ConnKey, Conn),
    HalfOpen(ConnKey, HalfOpen),
}

/// Handles to [`CONNS`], [`HALF_OPEN`], [`LEGACY`] and [`LEGACY_CONNS`].
pub struct ConnTables {
    conns: HashMap<MapData, ConnKey, Conn>,
    half_open: HashMap<MapData, HalfOpenKey, HalfOpen>,
    legacy: HashMap<MapData, Endpoint, u64>,
    legacy_conns: HashMap<MapData, ConnKey, NatTarget>,
}

impl ConnTables {
    /// Takes the tables out of a freshly loaded object.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))
        };
        Self::from_maps([
            take(CONNS)?,
            take(HALF_OPEN)?,
            take(LEGACY)?,
            take(LEGACY_CONNS)?,
        ])
    }

    /// Opens the tables an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Self::from_maps([
            open_pin(layout, CONNS)?,
            open_pin(layout, HALF_OPEN)?,
            open_pin(layout, LEGACY)?,
            open_pin(layout, LEGACY_CONNS)?,
        ])
    }

    fn from_maps([conns, half_open, legacy, legacy_conns]: [Map; 4]) -> anyhow::Result<Self> {
        Ok(Self {
            conns: HashMap::try_from(conns).context(CONNS)?,
            half_open: HashMap::try_from(half_open).context(HALF_OPEN)?,
            legacy: HashMap::try_from(legacy).context(LEGACY)?,
            legacy_conns: HashMap::try_from(legacy_conns).context(LEGACY_CONNS)?,
        })
    }

    /// Marks `backends` as forwarded to by an older data path until `until`
    /// (kernel clock), and records the frontends it kept for `conns`
    /// (backends behind several frontends). Returns how many connections
    /// fit; the others fall back to their backend's primary frontend.
    pub fn seed_legacy(
        &mut self,
        backends: &[Endpoint],
        conns: &[(ConnKey, NatTarget)],
        until: u64,
    ) -> anyhow::Result<usize> {
        for backend in backends {
            self.legacy.insert(backend, until, 0).with_context(|| {
                format!("writing {LEGACY} entry {}", super::maps::show(backend))
            })?;
        }
        let fit = conns.len().min(LEGACY_CONN_CAPACITY as usize);
        for (key, target) in &conns[..fit] {
            self.legacy_conns
                .insert(key, target, 0)
                .with_context(|| format!("writing {LEGACY_CONNS}"))?;
        }
        Ok(fit)
    }

    /// Removes the legacy entries whose time ended by `now`, and the
    /// recorded frontends of their connections; returns the backends left.
    fn sweep_legacy(&mut self, now: u64) -> u64 {
        let mut live = BTreeSet::new();
        let mut ended = Vec::new();
        for (backend, until) in self.legacy.iter().filter_map(Result::ok) {
            if until <= now {
                ended.push(backend);
            } else {
                live.insert(backend);
            }
        }
        for backend in &ended {
            let _ = self.legacy.remove(backend);
        }
        let stale: Vec<ConnKey> = self
            .legacy_conns
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !live.contains(&k.backend()))
            .collect();
        for key in stale {
            let _ = self.legacy_conns.remove(&key);
        }
        live.len() as u64
    }

    /// Removes what has ended by `now` (on the kernel programs' clock, see
    /// [`clock_ns`]). Entries are read first and removed after, so the
    /// walk is not disturbed; an entry the kernel removed, refreshed or
    /// replaced meanwhile stays.
    pub fn sweep(&mut self, now: u64, t: &Timeouts) -> Swept {
        let limits = table::Limits {
            idle: nanos(t.idle),
            close: nanos(t.close),
            half_open: nanos(t.half_open),
        };
        let counts = table::sweep(&mut self.conns, &mut self.half_open, now, &limits);
        Swept {
            closed: counts.closed,
            expired: counts.expired,
            half_open_expired: counts.half_open_expired,
            conns: counts.conns,
            half_open: counts.half_open,
            legacy_backends: self.sweep_legacy(now),
        }
    }

    /// Removes every entry opened through one of `frontends`; returns how
    /// many established connections went.
    pub fn purge(&mut self, frontends: &BTreeSet<Endpoint>) -> u64 {
        if frontends.is_empty() {
            return 0;
        }
        table::purge(&mut self.conns, &mut self.half_open, frontends)
    }

    /// How many entries each table holds at most (`--conn-table-size`,
    /// `--half-open-table-size`): established, half-open.
    pub fn capacities(&self) -> anyhow::Result<(u32, u32)> {
        let conns = self.conns.map().info().context(CONNS)?.max_entries();
        let half_open = self
            .half_open
            .map()
            .info()
            .context(HALF_OPEN)?
            .max_entries();
        Ok((conns, half_open))
    }

    /// Every entry of both tables.
    pub fn entries(&self) -> Vec<Entry> {
        let conns = self
            .conns
            .iter()
            .filter_map(Result::ok)
            .map(|(k, c)| Entry::Established(k, c));
        let halves = self
            .half_open
            .iter()
            .filter_map(Result::ok)
            .map(|(k, h)| Entry::HalfOpen(k.conn, h));
        conns.chain(halves).collect()
    }
}

impl Entry {
    /// The state as `ssh-fwd list conns` names it.
    pub fn state(&self) -> &'static str {
        match self {
            Entry::Established(_, c) if closing(c) => "closing",
            Entry::Established(..) => "established",
            Entry::HalfOpen(..) => "half-open",
        }
    }
}

impl<K: Pod, V: Pod> Table<K, V> for HashMap<MapData, K, V> {
    fn entries(&self) -> Vec<(K, V)> {
        self.iter().filter_map(Result::ok).collect()
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

    fn put_back(&mut self, key: &K, value: &V) {
        // EEXIST: the kernel stored a newer entry meanwhile, which stays.
        let _ = self.insert(key, value, take::BPF_NOEXIST);
    }
}

/// Removes a pinned [`HALF_OPEN`] whose key is not [`HalfOpenKey`]: one an
/// agent of this layout left before handshakes were keyed by the client's
/// ISN (12-byte keys), so that loading makes a new one. aya adopts a pin by
/// name without comparing layouts, and the programs would read 12 bytes of
/// their 16-byte keys. The table holds only handshakes in flight: the old
/// programs keep theirs until this agent's replace them in every link, and
/// a handshake that straddles that moment is not tracked (that login may
/// hang).
pub fn replace_older_half_open(layout: &PinLayout) -> anyhow::Result<()> {
    let pin = layout.map(HALF_OPEN);
    if !pin.exists() {
        return Ok(());
    }
    let info = MapInfo::from_pin(&pin).with_context(|| format!("reading {}", pin.display()))?;
    let key_size = info.key_size() as usize;
    if key_size == size_of::<HalfOpenKey>() {
        return Ok(());
    }
    std::fs::remove_file(&pin).with_context(|| format!("removing {}", pin.display()))?;
    tracing::info!(
        pin = %pin.display(),
        key_size,
        "the pinned half-open table has an older key; replaced by a new, empty one (it holds \
         only handshakes in progress)"
    );
    Ok(())
}

/// Half-open entries that left other than by completing, expiring or being
/// refused: evicted by the LRU (a SYN flood; a SYN never replaces a
/// handshake's entry), since the counters began, given the outcome
/// counters and the entries the table holds now.
pub fn half_open_churned(count: impl Fn(Outcome) -> u64, half_open_now: u64) -> u64 {
    count(Outcome::HalfOpened).saturating_sub(
        count(Outcome::ConnEstablished)
            + count(Outcome::HalfOpenRefused)
            + count(Outcome::HalfOpenExpired)
            + half_open_now,
    )
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
