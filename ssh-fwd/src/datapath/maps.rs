//! Reads and writes the pinned mapping tables and counters (the connection
//! tables are `conntrack`'s).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{
        Array, HashMap, IterableMap as _, Map, MapData, PerCpuArray, PerCpuValues,
        lpm_trie::{Key, LpmTrie},
    },
    util::nr_cpus,
};
use ssh_fwd_common::{
    maps::{
        ALLOWLIST, AllowData, Endpoint, FLAG_SYN_LIMIT, FRONTENDS, GLOBAL_STATS, GUARDS,
        Guard as Rate, MAPPING_CONNS, MAPPING_NAMES, MAPPING_STATS, MappingConnCounters,
        MappingCounters, MappingName, NatTarget, REVERSE,
    },
    outcome::Outcome,
};

use crate::mapping::guard::Cidr;

use super::{
    batch,
    pins::PinLayout,
    plan::{Installed, Plan},
};

/// Handles to every map of the data path.
pub struct Maps {
    frontends: HashMap<MapData, Endpoint, NatTarget>,
    reverse: HashMap<MapData, Endpoint, NatTarget>,
    mapping_stats: PerCpuArray<MapData, MappingCounters>,
    mapping_conns: PerCpuArray<MapData, MappingConnCounters>,
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
        ])
    }

    /// The maps in the order [`Self::from_ebpf`] takes them.
    fn from_maps(maps: [Map; 8]) -> anyhow::Result<Self> {
        let [
            frontends,
            reverse,
            mapping_stats,
            mapping_conns,
            global_stats,
            names,
            allowlist,
            guards,
        ] = maps;
        Ok(Self {
            frontends: HashMap::try_from(frontends).context(FRONTENDS)?,
            reverse: HashMap::try_from(reverse).context(REVERSE)?,
            mapping_stats: PerCpuArray::try_from(mapping_stats).context(MAPPING_STATS)?,
            mapping_conns: PerCpuArray::try_from(mapping_conns).context(MAPPING_CONNS)?,
            global_stats: PerCpuArray::try_from(global_stats).context(GLOBAL_STATS)?,
            names: Array::try_from(names).context(MAPPING_NAMES)?,
            allowlist: LpmTrie::try_from(allowlist).context(ALLOWLIST)?,
            guards: Array::try_from(guards).context(GUARDS)?,
        })
    }

    /// How many mappings the tables hold at most (`--max-mappings` when
    /// they were made): the size of the slot-indexed name table.
    pub fn capacity(&self) -> usize {
        self.names.len() as usize
    }

    /// Everything installed, as the plan sees it.
    pub fn read_installed(&self) -> anyhow::Result<Installed> {
        let mut installed = Installed::default();
        for entry in self.frontends.iter() {
            let (k, v) = entry.context("reading FRONTENDS")?;
            installed.frontends.insert(k, v);
        }
        for entry in self.reverse.iter() {
            let (k, v) = entry.context("reading REVERSE")?;
            installed.reverse.insert(k, v);
        }
        let slots: BTreeSet<u32> = installed.frontends.values().map(|t| t.slot).collect();
        for slot in slots {
            let name = self.names.get(&slot, 0).context("reading MAPPING_NAMES")?;
            installed.names.insert(slot, name.as_str().to_owned());
        }
        for key in self.allowlist.keys() {
            let key = key.context("reading ALLOWLIST")?;
            installed.allow.insert(range_of(&key));
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
    pub fn apply(&mut self, plan: &Plan) -> anyhow::Result<Applied> {
        let cpus = cpus()?;
        for k in &plan.frontend_deletes_first {
            remove_if_present(&mut self.frontends, k, FRONTENDS)?;
        }
        for k in &plan.reverse_deletes_first {
            remove_if_present(&mut self.reverse, k, REVERSE)?;
        }
        // New slots: counters zeroed, names written (each in one batch).
        let slots: Vec<u32> = plan.new_slots.iter().map(|(slot, _)| *slot).collect();
        let zeros = vec![MappingCounters::default(); slots.len() * cpus];
        batch::update_per_cpu(self.mapping_stats.map(), &slots, &zeros, cpus)
            .map_err(|e| batch_error(e, MAPPING_STATS, &slots, |s| format!("slot {s}")))?;
        let zeros = vec![MappingConnCounters::default(); slots.len() * cpus];
        batch::update_per_cpu(self.mapping_conns.map(), &slots, &zeros, cpus)
            .map_err(|e| batch_error(e, MAPPING_CONNS, &slots, |s| format!("slot {s}")))?;
        let named = plan.new_slots.iter().chain(&plan.renamed);
        let (slots, names): (Vec<u32>, Vec<MappingName>) = named
            .map(|(slot, name)| (*slot, MappingName::new(name)))
            .unzip();
        batch::update(self.names.map(), &slots, &names)
            .map_err(|e| batch_error(e, MAPPING_NAMES, &slots, |s| format!("slot {s}")))?;
        // Then REVERSE before FRONTENDS: a frontend never points at a
        // backend whose replies would not be translated back.
        let (keys, values): (Vec<Endpoint>, Vec<NatTarget>) =
            plan.reverse_upserts.iter().copied().unzip();
        batch::update(self.reverse.map(), &keys, &values)
            .map_err(|e| batch_error(e, REVERSE, &keys, show))?;
        // Ranges and rates before the frontends whose flags make them read.
        for (slot, cidr) in &plan.allow_upserts {
            self.allowlist
                .insert(&allow_key(*slot, cidr), 0, 0)
                .with_context(|| format!("writing ALLOWLIST entry {cidr} of slot {slot}"))?;
        }
        for (slot, rate) in &plan.rate_upserts {
            self.guards
                .set(*slot, rate, 0)
                .with_context(|| format!("writing GUARDS entry of slot {slot}"))?;
        }
        let (keys, values): (Vec<Endpoint>, Vec<NatTarget>) =
            plan.frontend_upserts.iter().copied().unzip();
        batch::update(self.frontends.map(), &keys, &values)
            .map_err(|e| batch_error(e, FRONTENDS, &keys, show))?;
        for k in &plan.frontend_deletes {
            remove_if_present(&mut self.frontends, k, FRONTENDS)?;
        }
        for k in &plan.reverse_deletes {
            remove_if_present(&mut self.reverse, k, REVERSE)?;
        }
        // Ranges last: no frontend with a list reads them any more.
        for (slot, cidr) in &plan.allow_deletes {
            match self.allowlist.remove(&allow_key(*slot, cidr)) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("removing ALLOWLIST entry {cidr} of slot {slot}")
                    });
                }
            }
        }
        Ok(Applied {
            added_or_changed: plan.frontend_upserts.len(),
            removed: plan.frontend_deletes.len(),
        })
    }

    /// A mapping's counters summed over CPUs.
    pub fn mapping_counters(&self, slot: u32) -> anyhow::Result<MappingCounters> {
        let per_cpu = self
            .mapping_stats
            .get(&slot, 0)
            .with_context(|| format!("reading counters of slot {slot}"))?;
        Ok(per_cpu
            .iter()
            .fold(MappingCounters::default(), |a, c| MappingCounters {
                packets_in: a.packets_in + c.packets_in,
                bytes_in: a.bytes_in + c.bytes_in,
                packets_out: a.packets_out + c.packets_out,
                bytes_out: a.bytes_out + c.bytes_out,
            }))
    }

    /// A mapping's connection counters summed over CPUs.
    pub fn mapping_conn_counters(&self, slot: u32) -> anyhow::Result<MappingConnCounters> {
        let per_cpu = self
            .mapping_conns
            .get(&slot, 0)
            .with_context(|| format!("reading connection counters of slot {slot}"))?;
        Ok(per_cpu
            .iter()
            .fold(MappingConnCounters::default(), |a, c| MappingConnCounters {
                opened: a.opened + c.opened,
                source_limited: a.source_limited + c.source_limited,
                denied: a.denied + c.denied,
                syn_limited: a.syn_limited + c.syn_limited,
            }))
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

/// The trie key of `cidr` in `slot`.
fn allow_key(slot: u32, cidr: &Cidr) -> Key<AllowData> {
    let (len, data) = AllowData::range(slot, cidr.ip(), cidr.prefix());
    Key::new(len, data)
}

/// The slot and range a trie key holds.
fn range_of(key: &Key<AllowData>) -> (u32, Cidr) {
    let data = key.data();
    let prefix = key
        .prefix_len()
        .saturating_sub(AllowData::SLOT_BITS)
        .min(32) as u8;
    (data.slot(), Cidr::masked(data.ip(), prefix))
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

fn remove_if_present(
    map: &mut HashMap<MapData, Endpoint, NatTarget>,
    key: &Endpoint,
    name: &str,
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

fn cpus() -> anyhow::Result<usize> {
    nr_cpus().map_err(|(what, e)| anyhow!("cannot count CPUs ({what}): {e}"))
}

/// `IP:PORT` of an endpoint, for messages.
pub fn show(e: &Endpoint) -> String {
    format!("{}:{}", e.ip(), e.port())
}
