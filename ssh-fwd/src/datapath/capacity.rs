//! How many entries each table the flags size gets, and the IPv6 tables
//! of a node that serves no IPv6: they are made with one entry (the
//! kernel's least), as the object must still define every map its
//! programs name. A node that starts serving IPv6, or stops, replaces them
//! at start ([`replace_ipv6`]): empty, or holding only what the mappings
//! the node no longer serves left, so nothing live is lost.

use anyhow::Context as _;
use aya::maps::{MapInfo, MapType};
use ssh_fwd_common::maps::{
    ALLOWLIST, ALLOWLIST6, CLAIMS, CLAIMS6, CONN_CAPACITY, CONN_STATS, CONN_STATS6, CONNS, CONNS6,
    FRONTENDS, FRONTENDS6, GUARDS, HAIRPIN_SOCKS_CAPACITY, HAIRPIN_SOCKS6, HALF_OPEN,
    HALF_OPEN_CAPACITY, HALF_OPEN6, MAPPING_CONNS, MAPPING_NAMES, MAPPING_STATS,
    MAX_ALLOW_PER_MAPPING, MAX_MAPPINGS, OWNERS_CAPACITY, OWNERS6, REVERSE, REVERSE6, SOURCES,
    SOURCES6, SYN_BUCKET_CAPACITY, SYN_BUCKETS, SYN_BUCKETS6,
};

use super::pins::PinLayout;

/// What the flags say of the tables' sizes (`super::object::Settings`
/// holds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// `--max-mappings`.
    pub max_mappings: u32,
    /// `--conn-table-size`.
    pub conn_table_size: u32,
    /// `--half-open-table-size`.
    pub half_open_table_size: u32,
    /// `--syn-bucket-table-size`.
    pub syn_bucket_table_size: u32,
    /// Whether this node serves IPv6.
    pub ipv6: bool,
}

impl Default for Sizes {
    fn default() -> Self {
        Self {
            max_mappings: MAX_MAPPINGS,
            conn_table_size: CONN_CAPACITY,
            half_open_table_size: HALF_OPEN_CAPACITY,
            syn_bucket_table_size: SYN_BUCKET_CAPACITY,
            ipv6: true,
        }
    }
}

/// `BPF_F_NO_COMMON_LRU`: an LRU with a list per CPU.
pub const NO_COMMON_LRU: u32 = 2;

/// The entries an IPv6 table of a node without IPv6 gets.
pub const IPV6_OFF: u32 = 1;

/// The IPv6 tables: each made with [`IPV6_OFF`] entries where IPv6 is off.
/// (The announcement tables for IPv6 hold one entry per SSH IP and
/// interface and cost a few kilobytes; they stay.)
pub const IPV6_TABLES: [&str; 11] = [
    FRONTENDS6,
    REVERSE6,
    CONNS6,
    SOURCES6,
    CONN_STATS6,
    HALF_OPEN6,
    CLAIMS6,
    ALLOWLIST6,
    SYN_BUCKETS6,
    OWNERS6,
    HAIRPIN_SOCKS6,
];

/// Every table whose size is not the object's own: by name, its entries.
pub fn capacities(settings: &Sizes) -> Vec<(&'static str, u32)> {
    let allow = settings.max_mappings.saturating_mul(MAX_ALLOW_PER_MAPPING);
    let v4 = [
        (FRONTENDS, settings.max_mappings),
        (REVERSE, settings.max_mappings),
        (MAPPING_NAMES, settings.max_mappings),
        (MAPPING_STATS, settings.max_mappings),
        (MAPPING_CONNS, settings.max_mappings),
        (GUARDS, settings.max_mappings),
        (CONNS, settings.conn_table_size),
        (SOURCES, settings.conn_table_size),
        (CONN_STATS, settings.conn_table_size),
        (HALF_OPEN, settings.half_open_table_size),
        (CLAIMS, settings.half_open_table_size),
        (ALLOWLIST, allow),
        (SYN_BUCKETS, settings.syn_bucket_table_size),
    ];
    // Each IPv6 table is sized as its IPv4 twin, or not at all.
    let v6 = [
        (FRONTENDS6, settings.max_mappings),
        (REVERSE6, settings.max_mappings),
        (CONNS6, settings.conn_table_size),
        (SOURCES6, settings.conn_table_size),
        (CONN_STATS6, settings.conn_table_size),
        (HALF_OPEN6, settings.half_open_table_size),
        (CLAIMS6, settings.half_open_table_size),
        (ALLOWLIST6, allow),
        (SYN_BUCKETS6, settings.syn_bucket_table_size),
        (OWNERS6, OWNERS_CAPACITY),
        (HAIRPIN_SOCKS6, HAIRPIN_SOCKS_CAPACITY),
    ]
    .map(|(map, entries)| (map, if settings.ipv6 { entries } else { IPV6_OFF }));
    v4.into_iter().chain(v6).collect()
}

/// Whether a table of `info`'s definition was made for a node without
/// IPv6. An LRU with a list per CPU gets at least one entry per CPU from
/// the kernel, so "one" reads back as the CPU count.
fn made_off(info: &MapInfo, cpus: u32) -> bool {
    let per_cpu_lru =
        matches!(info.map_type(), Ok(MapType::LruHash)) && info.map_flags() & NO_COMMON_LRU != 0;
    let least = if per_cpu_lru { cpus.max(1) } else { IPV6_OFF };
    info.max_entries() <= least
}

/// Unpins every IPv6 table made for the other setting of IPv6 than
/// `ipv6`, so that loading makes it anew. The programs already running
/// keep the old table until this agent's replace them.
pub fn replace_ipv6(layout: &PinLayout, ipv6: bool) -> anyhow::Result<()> {
    let cpus = aya::util::nr_cpus()
        .map_err(|(what, e)| anyhow::anyhow!("cannot count CPUs ({what}): {e}"))?;
    let cpus = u32::try_from(cpus).unwrap_or(u32::MAX);
    let mut replaced = Vec::new();
    for name in IPV6_TABLES {
        let pin = layout.map(name);
        if !pin.exists() {
            continue;
        }
        let info = MapInfo::from_pin(&pin).with_context(|| format!("reading {}", pin.display()))?;
        if made_off(&info, cpus) != ipv6 {
            continue;
        }
        std::fs::remove_file(&pin).with_context(|| {
            format!(
                "removing {} to make it for IPv6 {}; remove it by hand and start the agent again",
                pin.display(),
                if ipv6 { "on" } else { "off" }
            )
        })?;
        replaced.push(name);
    }
    if !replaced.is_empty() {
        if ipv6 {
            tracing::info!(
                tables = ?replaced,
                "IPv6 is served now: its tables are made at their full size"
            );
        } else {
            tracing::info!(
                tables = ?replaced,
                "IPv6 is no longer served: its tables are made with one entry each (IPv6 \
                 connections through this node end)"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_tables_are_sized_as_their_twins_or_not_at_all() {
        let on = Sizes::default();
        let off = Sizes {
            ipv6: false,
            ..Sizes::default()
        };
        let get = |s: &Sizes, name: &str| {
            capacities(s)
                .into_iter()
                .find(|(m, _)| *m == name)
                .map(|(_, n)| n)
        };
        assert_eq!(get(&on, CONNS6), get(&on, CONNS));
        assert_eq!(get(&on, FRONTENDS6), Some(on.max_mappings));
        for name in IPV6_TABLES {
            assert_eq!(get(&off, name), Some(IPV6_OFF), "{name}");
            assert!(get(&on, name) > Some(IPV6_OFF), "{name}");
        }
        // The IPv4 tables do not depend on it.
        let v4 = |s: &Sizes| {
            capacities(s)
                .into_iter()
                .filter(|(m, _)| !IPV6_TABLES.contains(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(v4(&on), v4(&off));
    }
}
