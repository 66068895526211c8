//! Pinned maps an earlier agent of this layout left with another
//! definition than this build's, found before the object is loaded. aya
//! adopts a pin by name without comparing definitions, and the programs
//! would then read keys and values of the wrong size, or count past the
//! end of a counter array. A map that holds only what is safe to lose
//! (counters, SYNs and claims in flight) is replaced by a new, empty one;
//! any other difference needs a layout version of its own.

use anyhow::Context as _;
use aya::maps::MapInfo;
use ssh_fwd_common::{
    maps::{
        CLAIMS, Claim, ClaimKey, GLOBAL_STATS, HALF_OPEN, HalfOpen, HalfOpenKey, MAPPING_CONNS,
        MappingConnCounters,
    },
    outcome::Outcome,
};

use super::pins::PinLayout;

/// `BPF_F_NO_COMMON_LRU`: an LRU with a list per CPU.
const NO_COMMON_LRU: u32 = 2;

/// A map this build defines as `key`/`value` bytes with `flags`, and, for
/// one whose size no flag sets, `entries`.
struct Definition {
    name: &'static str,
    key: usize,
    value: usize,
    flags: u32,
    entries: Option<u32>,
    /// What is lost when it is replaced, for the log.
    holds: &'static str,
}

/// The maps that may be replaced, as this build defines them.
const REPLACEABLE: [Definition; 4] = [
    Definition {
        name: HALF_OPEN,
        key: size_of::<HalfOpenKey>(),
        value: size_of::<HalfOpen>(),
        flags: NO_COMMON_LRU,
        entries: None,
        holds: "SYNs waiting for their SYN-ACK",
    },
    Definition {
        name: CLAIMS,
        key: size_of::<ClaimKey>(),
        value: size_of::<Claim>(),
        flags: NO_COMMON_LRU,
        entries: None,
        holds: "connections waiting for their server's confirmation",
    },
    Definition {
        name: GLOBAL_STATS,
        key: size_of::<u32>(),
        value: size_of::<u64>(),
        flags: 0,
        entries: Some(Outcome::COUNT),
        holds: "the outcome counters, which start again from zero",
    },
    Definition {
        name: MAPPING_CONNS,
        key: size_of::<u32>(),
        value: size_of::<MappingConnCounters>(),
        flags: 0,
        entries: None,
        holds: "the per-mapping connection counters, which start again from zero",
    },
];

/// Replaces every pinned map of [`REPLACEABLE`] whose definition differs
/// from this build's. The programs already running keep the old map until
/// this agent's replace them in every link.
pub fn replace(layout: &PinLayout) -> anyhow::Result<()> {
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
        let same = pinned == (def.key, def.value, def.flags)
            && def.entries.is_none_or(|n| n == info.max_entries());
        if same {
            continue;
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
    Ok(())
}
