//! Reads and writes the pinned mapping tables and counters (the connection
//! tables are `conntrack`'s).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{
        Array, HashMap, IterableMap as _, Map, MapData, PerCpuArray, PerCpuValues,
        lpm_trie::{Key, LpmTrie},
    },
};
use ssh_fwd_common::{
    maps::{
        ALLOWLIST, ALLOWLIST6, AllowData, AllowData6, Endpoint, Endpoint6, FLAG_SYN_LIMIT,
        FRONTENDS, FRONTENDS6, GLOBAL_STATS, GUARDS, Guard as Rate, MAPPING_CONNS, MAPPING_NAMES,
        MAPPING_STATS, MappingConnCounters, MappingCounters, MappingName, NatTarget, NatTarget6,
        REVERSE, REVERSE6,
    },
    outcome::Outcome,
};

use crate::mapping::guard::Cidr;

use super::{
    batch,
    family::{self, split_entries, split_keys},
    pins::PinLayout,
    plan::{Installed, Plan},
};

/// Handles to every map of the data path.
pub struct Maps {
    frontends: HashMap<MapData, Endpoint, NatTarget>,
    reverse: HashMap<MapData, Endpoint, NatTarget>,
    frontends6: HashMap<MapData, Endpoint6, NatTarget6>,
    reverse6: HashMap<MapData, Endpoint6, NatTarget6>,
    allowlist6: LpmTrie<MapData, AllowData6, u8>,
    mapping_stats: Array<MapData, MappingCounters>,
    mapping_conns: Array<MapData, MappingConnCounters>,
    global_stats: PerCpuArray<MapData, u64>,
    names: Array<MapData, MappingName>,
    allowlist: LpmTrie<MapData, AllowData, u8>,
    guards: Array<MapData, Rate>,
}

/// What one [`Maps::apply`] changed, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub added_or_changed: usize,
    pub removed: usize,
}

impl Maps {
    /// Takes the maps out of a freshly loaded object (whose maps are pinned).
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))
        };
        Self::from_maps([
            take(FRONTENDS)?,
            take(REVERSE)?,
            take(MAPPING_STATS)?,
            take(MAPPING_CONNS)?,
            take(GLOBAL_STATS)?,
            take(MAPPING_NAMES)?,
            take(ALLOWLIST)?,
            take(GUARDS)?,
            take(FRONTENDS6)?,
            take(REVERSE6)?,
            take(ALLOWLIST6)?,
        ])
    }

    /// Opens the maps an agent pinned, without loading any program.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        let open = |name: &str| open_pin(layout, name);
        Self::from_maps([
            open(FRONTENDS)?,
            open(REVERSE)?,
            open(MAPPING_STATS)?,
            open(MAPPING_CONNS)?,
            open(GLOBAL_STATS)?,
            open(MAPPING_NAMES)?,
            open(ALLOWLIST)?,
            open(GUARDS)?,
            open(FRONTENDS6)?,
            open(REVERSE6)?,
            open(ALLOWLIST6)?,
        ])
    }

    /// The maps in the order [`Self::from_ebpf`] takes them.
    fn from_maps(maps: [Map; 11]) -> anyhow::Result<Self> {
        let [
            frontends,
            reverse,
            mapping_stats,
            mapping_conns,
            global_stats,
            names,
            allowlist,
            guards,
            frontends6,
            reverse6,
            allowlist6,
        ] = maps;
        Ok(Self {
            frontends: HashMap::try_from(frontends).context(FRONTENDS)?,
            reverse: HashMap::try_from(reverse).context(REVERSE)?,
            mapping_stats: Array::try_from(mapping_stats).context(MAPPING_STATS)?,
            mapping_conns: Array::try_from(mapping_conns).context(MAPPING_CONNS)?,
            global_stats: PerCpuArray::try_from(global_stats).context(GLOBAL_STATS)?,
            names: Array::try_from(names).context(MAPPING_NAMES)?,
            allowlist: LpmTrie::try_from(allowlist).context(ALLOWLIST)?,
            guards: Array::try_from(guards).context(GUARDS)?,
            frontends6: HashMap::try_from(frontends6).context(FRONTENDS6)?,
            reverse6: HashMap::try_from(reverse6).context(REVERSE6)?,
            allowlist6: LpmTrie::try_from(allowlist6).context(ALLOWLIST6)?,
        })
    }

    /// How many mappings the tables hold at most, of both families
    /// together (`--max-mappings` when they were made): the size of the
    /// slot-indexed name table.
    pub fn capacity(&self) -> usize {
        self.names.len() as usize
    }

    /// Everything installed, of both families, as the plan sees it.
    pub fn read_installed(&self) -> anyhow::Result<Installed> {
        let mut installed = Installed::default();
        for entry in self.frontends.iter() {
            let (k, v) = entry.context("reading FRONTENDS")?;
            installed
                .frontends
                .insert(family::socket4(&k), family::target4(&v));
        }
        for entry in self.reverse.iter() {
            let (k, v) = entry.context("reading REVERSE")?;
            installed
                .reverse
                .insert(family::socket4(&k), family::target4(&v));
        }
        for entry in self.frontends6.iter() {
            let (k, v) = entry.context("reading FRONTENDS6")?;
            installed
                .frontends
                .insert(family::socket6(&k), family::target6(&v));
        }
        for entry in self.reverse6.iter() {
            let (k, v) = entry.context("reading REVERSE6")?;
            installed
                .reverse
                .insert(family::socket6(&k), family::target6(&v));
        }
        let slots: BTreeSet<u32> = installed.frontends.values().map(|t| t.slot).collect();
        for slot in slots {
            let name = self.names.get(&slot, 0).context("reading MAPPING_NAMES")?;
            installed.names.insert(slot, name.as_str().into());
        }
        for key in self.allowlist.keys() {
            let key = key.context("reading ALLOWLIST")?;
            installed.allow.insert(range_of(&key));
        }
        for key in self.allowlist6.keys() {
            let key = key.context("reading ALLOWLIST6")?;
            installed.allow.insert(range_of6(&key));
        }
        let limited: BTreeSet<u32> = (installed.frontends.values())
            .filter(|t| t.flags & FLAG_SYN_LIMIT != 0)
            .map(|t| t.slot)
            .collect();
        for slot in limited {
            let rate = self.guards.get(&slot, 0).context("reading GUARDS")?;
            installed.rates.insert(slot, rate);
        }
        Ok(installed)
    }

    /// Applies a plan in the order that keeps every packet's view consistent:
    /// the frontends whose backend's reverse entry goes early, the reverse
    /// entries that make room, counters and names, then reverse entries,
    /// then frontends (which make a mapping live), then deletions. Each map
    /// update replaces a whole element at once, so the packet path sees the
    /// old or the new entry, never a mix.
    /// Each step is done for both families before the next begins.
    pub fn apply(&mut self, plan: &Plan) -> anyhow::Result<Applied> {
        // Split first: a plan that cannot be written is refused before
        // anything is.
        let reverse_upserts = split_entries(&plan.reverse_upserts)?;
        let frontend_upserts = split_entries(&plan.frontend_upserts)?;
        self.remove_frontends(&plan.frontend_deletes_first)?;
        self.remove_reverse(&plan.reverse_deletes_first)?;
        // New slots: counters zeroed, names written (each in one batch).
        let slots: Vec<u32> = plan.new_slots.iter().map(|(slot, _)| *slot).collect();
        let zeros = vec![MappingCounters::default(); slots.len()];
        batch::update(self.mapping_stats.map(), &slots, &zeros)
            .map_err(|e| batch_error(e, MAPPING_STATS, &slots, |s| format!("slot {s}")))?;
        let zeros = vec![MappingConnCounters::default(); slots.len()];
        batch::update(self.mapping_conns.map(), &slots, &zeros)
            .map_err(|e| batch_error(e, MAPPING_CONNS, &slots, |s| format!("slot {s}")))?;
        let named = plan.new_slots.iter().chain(&plan.renamed);
        let (slots, names): (Vec<u32>, Vec<MappingName>) = named
            .map(|(slot, name)| (*slot, MappingName::new(name)))
            .unzip();
        batch::update(self.names.map(), &slots, &names)
            .map_err(|e| batch_error(e, MAPPING_NAMES, &slots, |s| format!("slot {s}")))?;
        // Then REVERSE before FRONTENDS: a frontend never points at a
        // backend whose replies would not be translated back.
        let (keys, values) = &reverse_upserts.v4;
        batch::update(self.reverse.map(), keys, values)
            .map_err(|e| batch_error(e, REVERSE, keys, show))?;
        let (keys, values) = &reverse_upserts.v6;
        batch::update(self.reverse6.map(), keys, values)
            .map_err(|e| batch_error(e, REVERSE6, keys, show6))?;
        // Ranges and rates before the frontends whose flags make them read.
        for (slot, cidr) in &plan.allow_upserts {
            let written = match cidr.ip() {
                IpAddr::V4(ip) => {
                    let (len, data) = AllowData::range(*slot, ip, cidr.prefix());
                    self.allowlist.insert(&Key::new(len, data), 0, 0)
                }
                IpAddr::V6(ip) => {
                    let (len, data) = AllowData6::range(*slot, ip, cidr.prefix());
                    self.allowlist6.insert(&Key::new(len, data), 0, 0)
                }
            };
            written.with_context(|| {
                format!("writing {} entry {cidr} of slot {slot}", allow_map(cidr))
            })?;
        }
        for (slot, rate) in &plan.rate_upserts {
            self.guards
                .set(*slot, rate, 0)
                .with_context(|| format!("writing GUARDS entry of slot {slot}"))?;
        }
        let (keys, values) = &frontend_upserts.v4;
        batch::update(self.frontends.map(), keys, values)
            .map_err(|e| batch_error(e, FRONTENDS, keys, show))?;
        let (keys, values) = &frontend_upserts.v6;
        batch::update(self.frontends6.map(), keys, values)
            .map_err(|e| batch_error(e, FRONTENDS6, keys, show6))?;
        self.remove_frontends(&plan.frontend_deletes)?;
        self.remove_reverse(&plan.reverse_deletes)?;
        // Ranges last: no frontend with a list reads them any more.
        for (slot, cidr) in &plan.allow_deletes {
            let removed = match cidr.ip() {
                IpAddr::V4(ip) => {
                    let (len, data) = AllowData::range(*slot, ip, cidr.prefix());
                    self.allowlist.remove(&Key::new(len, data))
                }
                IpAddr::V6(ip) => {
                    let (len, data) = AllowData6::range(*slot, ip, cidr.prefix());
                    self.allowlist6.remove(&Key::new(len, data))
                }
            };
            match removed {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("removing {} entry {cidr} of slot {slot}", allow_map(cidr))
                    });
                }
            }
        }
        Ok(Applied {
            added_or_changed: plan.frontend_upserts.len(),
            removed: plan.frontend_deletes.len(),
        })
    }

    /// Removes frontends of both families (those already gone are no error).
    fn remove_frontends(&mut self, frontends: &[std::net::SocketAddr]) -> anyhow::Result<()> {
        let keys = split_keys(frontends);
        for k in &keys.v4 {
            remove_if_present(&mut self.frontends, k, FRONTENDS, show)?;
        }
        for k in &keys.v6 {
            remove_if_present(&mut self.frontends6, k, FRONTENDS6, show6)?;
        }
        Ok(())
    }

    /// Removes REVERSE entries of both families.
    fn remove_reverse(&mut self, backends: &[std::net::SocketAddr]) -> anyhow::Result<()> {
        let keys = split_keys(backends);
        for k in &keys.v4 {
            remove_if_present(&mut self.reverse, k, REVERSE, show)?;
        }
        for k in &keys.v6 {
            remove_if_present(&mut self.reverse6, k, REVERSE6, show6)?;
        }
        Ok(())
    }

    /// A mapping's packet and byte counters.
    pub fn mapping_counters(&self, slot: u32) -> anyhow::Result<MappingCounters> {
        self.mapping_stats
            .get(&slot, 0)
            .with_context(|| format!("reading counters of slot {slot}"))
    }

    /// A mapping's connection counters.
    pub fn mapping_conn_counters(&self, slot: u32) -> anyhow::Result<MappingConnCounters> {
        self.mapping_conns
            .get(&slot, 0)
            .with_context(|| format!("reading connection counters of slot {slot}"))
    }

    /// Global outcome counters summed over CPUs, in [`Outcome::ALL`] order.
    pub fn outcome_counters(&self) -> anyhow::Result<Vec<(Outcome, u64)>> {
        Outcome::ALL
            .into_iter()
            .map(|outcome| {
                let per_cpu = self
                    .global_stats
                    .get(&(outcome as u32), 0)
                    .context("reading GLOBAL_STATS")?;
                Ok((outcome, per_cpu.iter().sum()))
            })
            .collect()
    }

    /// Global outcome counters summed over CPUs, by outcome name.
    pub fn global_counters(&self) -> anyhow::Result<BTreeMap<&'static str, u64>> {
        Ok(self
            .outcome_counters()?
            .into_iter()
            .map(|(o, n)| (o.name(), n))
            .collect())
    }

    /// Adds `n` to the counter of an outcome only the agent counts (see
    /// [`Outcome::by_agent`]): the kernel never writes these slots, so
    /// adding to CPU 0's value cannot race with it.
    pub fn count(&mut self, outcome: Outcome, n: u64) -> anyhow::Result<()> {
        debug_assert!(outcome.by_agent());
        if n == 0 {
            return Ok(());
        }
        let index = outcome as u32;
        let mut values: Vec<u64> = self
            .global_stats
            .get(&index, 0)
            .context("reading GLOBAL_STATS")?
            .iter()
            .copied()
            .collect();
        if let Some(first) = values.first_mut() {
            *first += n;
        }
        let values = PerCpuValues::try_from(values)
            .map_err(|e| anyhow!("building per-CPU counters: {e}"))?;
        self.global_stats
            .set(index, values, 0)
            .context("writing GLOBAL_STATS")
    }
}

/// The allowlist a range of its family is in.
fn allow_map(cidr: &Cidr) -> &'static str {
    match cidr.ip() {
        IpAddr::V4(_) => ALLOWLIST,
        IpAddr::V6(_) => ALLOWLIST6,
    }
}

/// The slot and range a trie key holds.
fn range_of(key: &Key<AllowData>) -> (u32, Cidr) {
    let data = key.data();
    let prefix = key
        .prefix_len()
        .saturating_sub(AllowData::SLOT_BITS)
        .min(32) as u8;
    (data.slot(), Cidr::masked(IpAddr::V4(data.ip()), prefix))
}

/// The slot and range an IPv6 trie key holds.
fn range_of6(key: &Key<AllowData6>) -> (u32, Cidr) {
    let data = key.data();
    let prefix = key
        .prefix_len()
        .saturating_sub(AllowData::SLOT_BITS)
        .min(128) as u8;
    (data.slot(), Cidr::masked(IpAddr::V6(data.ip()), prefix))
}

/// Opens one pinned map, saying what to check when it is not there.
pub fn open_pin(layout: &PinLayout, name: &str) -> anyhow::Result<Map> {
    let path = layout.map(name);
    let data = MapData::from_pin(&path).with_context(|| {
        format!(
            "cannot open pinned map {}; is an ssh-fwd agent running with --bpffs {}?",
            path.display(),
            layout.root().display()
        )
    })?;
    Map::from_map_data(data).with_context(|| format!("map {}", path.display()))
}

fn remove_if_present<K: aya::Pod, V: aya::Pod>(
    map: &mut HashMap<MapData, K, V>,
    key: &K,
    name: &str,
    show: impl Fn(&K) -> String,
) -> anyhow::Result<()> {
    match map.remove(key) {
        Ok(()) => Ok(()),
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("removing {name} entry {}", show(key))),
    }
}

/// A failed batch, naming the map and the entry it stopped at.
fn batch_error<K>(
    e: batch::BatchError,
    map: &str,
    keys: &[K],
    show: impl Fn(&K) -> String,
) -> anyhow::Error {
    let at = keys.get(e.written).map(show).unwrap_or_default();
    anyhow::Error::new(e).context(format!("writing {map} entry for {at}"))
}

/// `IP:PORT` of an endpoint, for messages.
pub fn show(e: &Endpoint) -> String {
    format!("{}:{}", e.ip(), e.port())
}

/// `[IP]:PORT` of an IPv6 endpoint, for messages.
pub fn show6(e: &Endpoint6) -> String {
    format!("[{}]:{}", e.ip6(), e.port())
}
