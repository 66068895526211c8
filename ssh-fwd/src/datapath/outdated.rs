//! Pinned maps an earlier agent of this layout left with another
//! definition than this build's, found before the object is loaded. aya
//! adopts a pin by name without comparing definitions, and the programs
//! would then read keys and values of the wrong size, or count past the
//! end of a counter array. A map that holds only what is safe to lose
//! (counters, SYNs and claims in flight) is replaced by a new, empty one;
//! any other difference needs a layout version of its own. The
//! per-mapping counters, which were per CPU before, are carried over:
//! summed here, written into the new shared tables by [`Carried::write`].

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, Map, MapData, MapInfo, MapType, PerCpuArray},
};
use ssh_fwd_common::{
    maps::{
        CLAIMS, Claim, ClaimKey, GLOBAL_STATS, HALF_OPEN, HalfOpen, HalfOpenKey, MAPPING_CONNS,
        MAPPING_STATS, MappingConnCounters, MappingCounters,
    },
    outcome::Outcome,
};

use super::{capacity::NO_COMMON_LRU, pins::PinLayout};

/// A map this build defines as `key`/`value` bytes with `flags`, and, for
/// one whose size no flag sets, `entries`.
struct Definition {
    name: &'static str,
    kind: MapType,
    key: usize,
    value: usize,
    flags: u32,
    entries: Option<u32>,
    /// What is lost when it is replaced, for the log.
    holds: &'static str,
}

/// The maps that may be replaced, as this build defines them.
const REPLACEABLE: [Definition; 5] = [
    Definition {
        name: HALF_OPEN,
        kind: MapType::LruHash,
        key: size_of::<HalfOpenKey>(),
        value: size_of::<HalfOpen>(),
        flags: NO_COMMON_LRU,
        entries: None,
        holds: "SYNs waiting for their SYN-ACK",
    },
    Definition {
        name: CLAIMS,
        kind: MapType::LruHash,
        key: size_of::<ClaimKey>(),
        value: size_of::<Claim>(),
        flags: NO_COMMON_LRU,
        entries: None,
        holds: "connections waiting for their server's confirmation",
    },
    Definition {
        name: GLOBAL_STATS,
        kind: MapType::PerCpuArray,
        key: size_of::<u32>(),
        value: size_of::<u64>(),
        flags: 0,
        entries: Some(Outcome::COUNT),
        holds: "the outcome counters, which start again from zero",
    },
    Definition {
        name: MAPPING_STATS,
        kind: MapType::Array,
        key: size_of::<u32>(),
        value: size_of::<MappingCounters>(),
        flags: 0,
        entries: None,
        holds: "the per-mapping packet counters, carried over when they were per CPU",
    },
    Definition {
        name: MAPPING_CONNS,
        kind: MapType::Array,
        key: size_of::<u32>(),
        value: size_of::<MappingConnCounters>(),
        flags: 0,
        entries: None,
        holds: "the per-mapping connection counters, carried over when they were per CPU",
    },
];

/// Per-mapping counters read from per-CPU tables an older agent pinned,
/// summed over the CPUs, by slot (only slots that counted anything).
#[derive(Debug, Default)]
pub struct Carried {
    stats: Vec<(u32, MappingCounters)>,
    conns: Vec<(u32, MappingConnCounters)>,
}

impl Carried {
    /// Writes the carried counters into the new tables of a loaded object.
    /// The older programs count on into the old tables until this agent's
    /// replace them, a moment later: those few packets are not carried.
    pub fn write(self, ebpf: &mut Ebpf) -> anyhow::Result<()> {
        if !self.stats.is_empty() {
            let mut stats: Array<_, MappingCounters> =
                Array::try_from(ebpf.map_mut(MAPPING_STATS).context(MAPPING_STATS)?)?;
            for (slot, c) in self.stats {
                stats
                    .set(slot, c, 0)
                    .with_context(|| format!("carrying {MAPPING_STATS} slot {slot}"))?;
            }
        }
        if !self.conns.is_empty() {
            let mut conns: Array<_, MappingConnCounters> =
                Array::try_from(ebpf.map_mut(MAPPING_CONNS).context(MAPPING_CONNS)?)?;
            for (slot, c) in self.conns {
                conns
                    .set(slot, c, 0)
                    .with_context(|| format!("carrying {MAPPING_CONNS} slot {slot}"))?;
            }
        }
        Ok(())
    }
}

/// Replaces every pinned map of [`REPLACEABLE`] whose definition differs
/// from this build's. The programs already running keep the old map until
/// this agent's replace them in every link. Returns the per-mapping
/// counters of per-CPU tables it replaced, for [`Carried::write`].
pub fn replace(layout: &PinLayout) -> anyhow::Result<Carried> {
    let mut carried = Carried::default();
    for def in &REPLACEABLE {
        let pin = layout.map(def.name);
        if !pin.exists() {
            continue;
        }
        let info = MapInfo::from_pin(&pin).with_context(|| format!("reading {}", pin.display()))?;
        let pinned = (
            info.key_size() as usize,
            info.value_size() as usize,
            info.map_flags(),
        );
        let same = info.map_type().ok() == Some(def.kind)
            && pinned == (def.key, def.value, def.flags)
            && def.entries.is_none_or(|n| n == info.max_entries());
        if same {
            continue;
        }
        if info.map_type().ok() == Some(MapType::PerCpuArray) && pinned.1 == def.value {
            let open = || -> anyhow::Result<Map> { Ok(Map::PerCpuArray(MapData::from_pin(&pin)?)) };
            let mut read = || -> anyhow::Result<()> {
                match def.name {
                    MAPPING_STATS => carried.stats = summed(open()?, add_stats)?,
                    MAPPING_CONNS => carried.conns = summed(open()?, add_conns)?,
                    _ => {}
                }
                Ok(())
            };
            read().with_context(|| format!("reading the counters in {}", pin.display()))?;
        }
        std::fs::remove_file(&pin).with_context(|| {
            format!(
                "removing {}, pinned by an older agent with another layout; remove it by hand \
                 and start the agent again",
                pin.display()
            )
        })?;
        tracing::info!(
            pin = %pin.display(),
            key_size = pinned.0,
            value_size = pinned.1,
            flags = pinned.2,
            entries = info.max_entries(),
            "a pinned map of an older agent has another layout; replaced by a new, empty one \
             (it held {})",
            def.holds
        );
    }
    Ok(carried)
}

/// Every slot of a per-CPU counter table with anything counted, summed.
fn summed<V: aya::Pod + Default + PartialEq>(
    map: Map,
    add: fn(V, &V) -> V,
) -> anyhow::Result<Vec<(u32, V)>> {
    let table: PerCpuArray<_, V> = PerCpuArray::try_from(map)?;
    let mut out = Vec::new();
    for slot in 0..table.len() {
        let sum = table.get(&slot, 0)?.iter().fold(V::default(), add);
        if sum != V::default() {
            out.push((slot, sum));
        }
    }
    Ok(out)
}

fn add_stats(a: MappingCounters, c: &MappingCounters) -> MappingCounters {
    MappingCounters {
        packets_in: a.packets_in + c.packets_in,
        bytes_in: a.bytes_in + c.bytes_in,
        packets_out: a.packets_out + c.packets_out,
        bytes_out: a.bytes_out + c.bytes_out,
    }
}

fn add_conns(a: MappingConnCounters, c: &MappingConnCounters) -> MappingConnCounters {
    MappingConnCounters {
        opened: a.opened + c.opened,
        source_limited: a.source_limited + c.source_limited,
        denied: a.denied + c.denied,
        syn_limited: a.syn_limited + c.syn_limited,
    }
}
