//! What the tables take on a node of any CPU count, computed from their
//! definitions in the embedded object and the capacities the flags give
//! them, by the kernel's own accounting (`htab_map_mem_usage`,
//! `array_map_mem_usage`, `ringbuf_map_mem_usage` of Linux 6.18). Where a
//! node cannot be measured (64 or 256 CPUs), this is its figure; a test
//! checks it against what this machine's kernel counts.
//!
//! The figures are those right after the tables are made: preallocated
//! tables take all their memory then; the others (no preallocation, and
//! the LPM tries) grow by [`Definition::per_entry`] with their entries.

use std::collections::BTreeMap;

use anyhow::Context as _;

use crate::datapath::{capacity::capacities, object::Settings};

/// `sizeof(struct bpf_htab)`, `sizeof(struct bpf_array)` and
/// `sizeof(struct bpf_ringbuf_map)` on Linux 6.18 (x86-64): each table's
/// fixed part.
const HTAB: u64 = 832;
const ARRAY: u64 = 312;
const RINGBUF: u64 = 304;
/// `sizeof(struct htab_elem)` before its key, `sizeof(struct bucket)`,
/// `HASHTAB_MAP_LOCK_COUNT`.
const HTAB_ELEM: u64 = 48;
const BUCKET: u64 = 16;
const LOCKS: u64 = 8;
/// `struct lpm_trie_node` before its data.
const LPM_NODE: u64 = 40;
const PAGE: u64 = 4096;
/// A ring buffer's pages before its data (`RINGBUF_NR_META_PAGES`).
const RINGBUF_META_PAGES: u64 = 3;

const NO_PREALLOC: u32 = 1;
const NO_COMMON_LRU: u32 = 2;

/// One table as the object defines it, with the capacity the flags give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Definition {
    pub kind: u32,
    pub key: u32,
    pub value: u32,
    pub entries: u32,
    pub flags: u32,
}

// `bpf_map_type`.
const HASH: u32 = 1;
const ARRAY_MAP: u32 = 2;
const PERCPU_HASH: u32 = 5;
const PERCPU_ARRAY: u32 = 6;
const LRU_HASH: u32 = 9;
const LRU_PERCPU_HASH: u32 = 10;
const LPM_TRIE: u32 = 11;
const RINGBUF_MAP: u32 = 27;

fn round8(n: u32) -> u64 {
    u64::from(n).div_ceil(8) * 8
}

impl Definition {
    fn is_hash(&self) -> bool {
        matches!(self.kind, HASH | PERCPU_HASH | LRU_HASH | LRU_PERCPU_HASH)
    }

    fn is_lru(&self) -> bool {
        matches!(self.kind, LRU_HASH | LRU_PERCPU_HASH)
    }

    fn is_percpu(&self) -> bool {
        matches!(self.kind, PERCPU_HASH | LRU_PERCPU_HASH | PERCPU_ARRAY)
    }

    /// Whether the table takes its memory only as entries come.
    pub fn grows(&self) -> bool {
        self.kind == LPM_TRIE || (self.is_hash() && !self.is_lru() && self.flags & NO_PREALLOC != 0)
    }

    /// The entries the kernel makes room for: an LRU with a list per CPU
    /// has the same number on every CPU, at least one.
    fn capacity(&self, cpus: u32) -> u64 {
        let n = u64::from(self.entries);
        if self.is_lru() && self.flags & NO_COMMON_LRU != 0 {
            let cpus = u64::from(cpus);
            n.div_ceil(cpus).max(1) * cpus
        } else {
            n
        }
    }

    /// The bytes an entry of a growing table takes.
    pub fn per_entry(&self, cpus: u32) -> u64 {
        match self.kind {
            LPM_TRIE => LPM_NODE + u64::from(self.key) + u64::from(self.value),
            _ => {
                let value = if self.is_percpu() {
                    8 + round8(self.value) * u64::from(cpus)
                } else {
                    round8(self.value)
                };
                // The element and the free-list node it is allocated with.
                HTAB_ELEM + round8(self.key) + value + 8
            }
        }
    }

    /// The bytes the kernel counts for the table right after it is made on
    /// a node of `cpus` possible CPUs.
    pub fn bytes(&self, cpus: u32) -> u64 {
        let c = u64::from(cpus);
        let n = self.capacity(cpus);
        let value = round8(self.value);
        match self.kind {
            ARRAY_MAP => ARRAY + n * value,
            PERCPU_ARRAY => ARRAY + n * 8 + n * value * c,
            RINGBUF_MAP => {
                let data = u64::from(self.entries).div_ceil(PAGE);
                RINGBUF + (RINGBUF_META_PAGES + data) * PAGE + (RINGBUF_META_PAGES + 2 * data) * 8
            }
            LPM_TRIE => 0,
            _ if self.is_hash() => {
                let elem = HTAB_ELEM + round8(self.key) + if self.is_percpu() { 8 } else { value };
                let mut usage = HTAB + BUCKET * n.next_power_of_two() + 4 * c * LOCKS;
                if !self.grows() {
                    let extra = if self.is_lru() || self.is_percpu() {
                        0
                    } else {
                        c
                    };
                    usage += elem * (n + extra);
                    if self.is_percpu() {
                        usage += value * c * (n + extra);
                    } else if !self.is_lru() {
                        usage += 8 * c;
                    }
                }
                usage
            }
            _ => 0,
        }
    }
}

/// Every table of the embedded object, with the capacities `settings`
/// give, by name.
pub fn definitions(settings: &Settings) -> anyhow::Result<BTreeMap<String, Definition>> {
    let object = aya_obj::Object::parse(super::super::object::OBJECT)
        .context("parsing the embedded eBPF object")?;
    let sized: BTreeMap<&str, u32> = capacities(&settings.sizes()).into_iter().collect();
    Ok(object
        .maps
        .iter()
        // Sections of globals (.rodata, .bss) are not tables.
        .filter(|(name, _)| !name.starts_with('.'))
        .map(|(name, map)| {
            let entries = sized
                .get(name.as_str())
                .copied()
                .unwrap_or_else(|| map.max_entries());
            let def = Definition {
                kind: map.map_type(),
                key: map.key_size(),
                value: map.value_size(),
                entries,
                flags: map.map_flags(),
            };
            (name.clone(), def)
        })
        .collect())
}

/// The bytes of every table together on `cpus` CPUs.
pub fn total(defs: &BTreeMap<String, Definition>, cpus: u32) -> u64 {
    defs.values().map(|d| d.bytes(cpus)).sum()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The agent's own memory the footprint goal allows
    /// (docs/kernels.md#footprint), beside its tables.
    const AGENT_MIB: u64 = 32;

    fn mib(bytes: u64) -> u64 {
        bytes.div_ceil(1 << 20)
    }

    fn repo(path: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The agent container's memory limit in deploy/, in MiB.
    fn daemonset_limit_mib() -> u64 {
        let yaml = repo("deploy/base/agent-daemonset.yaml");
        let limits = yaml.split("limits:").nth(1).expect("a limits: block");
        let line = limits
            .lines()
            .find_map(|l| l.trim().strip_prefix("memory:"))
            .expect("a memory limit");
        line.trim()
            .strip_suffix("Mi")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("memory limit {line:?} is not in Mi"))
    }

    fn table() -> String {
        let limit = daemonset_limit_mib();
        let v4 = definitions(&Settings {
            ipv6: false,
            ..Settings::default()
        })
        .unwrap();
        let both = definitions(&Settings::default()).unwrap();
        let mut out = String::from(
            "| CPUs | tables, IPv4 only | tables, IPv4 and IPv6 | with the agent's own \
             32 MiB | DaemonSet memory limit |\n|---:|---:|---:|---:|---:|\n",
        );
        for cpus in [2, 64, 256] {
            let (a, b) = (total(&v4, cpus), total(&both, cpus));
            out += &format!(
                "| {cpus} | {} MiB | {} MiB | {} MiB | {limit} MiB |\n",
                mib(a),
                mib(b),
                mib(b) + AGENT_MIB
            );
        }
        out
    }

    #[test]
    fn the_docs_give_the_footprint_the_definitions_give() {
        let doc = repo("docs/kernels.md");
        let (begin, end) = ("<!-- footprint:begin -->\n", "<!-- footprint:end -->");
        let inside = doc
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(inside, _)| inside)
            .expect("docs/kernels.md has the footprint markers");
        let wanted = table();
        assert_eq!(
            inside, wanted,
            "docs/kernels.md's footprint table is stale; it should read:\n{wanted}"
        );
    }

    #[test]
    fn the_daemonset_limit_holds_a_256_cpu_node_with_both_families() {
        let both = definitions(&Settings::default()).unwrap();
        let needed = mib(total(&both, 256)) + AGENT_MIB;
        assert!(
            daemonset_limit_mib() >= needed,
            "a 256-CPU node needs {needed} MiB"
        );
    }

    #[test]
    fn only_the_ipv6_tables_depend_on_ipv6_and_little_on_the_cpus() {
        let on = definitions(&Settings::default()).unwrap();
        let off = definitions(&Settings {
            ipv6: false,
            ..Settings::default()
        })
        .unwrap();
        for (name, def) in &on {
            let ipv6 = crate::datapath::capacity::IPV6_TABLES.contains(&name.as_str());
            assert_eq!(off[name] == *def, !ipv6, "{name}");
        }
        // Nothing per CPU grows with the mappings: a 256-CPU node's tables
        // are within 5% of a 2-CPU node's.
        let (two, many) = (total(&on, 2), total(&on, 256));
        assert!(many < two + two / 20, "{two} vs {many}");
    }

    #[test]
    fn the_formulas_give_what_linux_6_18_counted_for_the_tables_here() {
        // `memlock` of these tables as a 2-CPU Linux 6.18 counted them
        // (`bpftool map show`), made with the default flags.
        let on = definitions(&Settings::default()).unwrap();
        for (name, counted) in [
            ("CONNS", 33_555_568),
            ("SOURCES", 20_972_560),
            ("HALF_OPEN", 7_340_928),
            ("CLAIMS", 6_816_640),
            ("MAPPING_NAMES", 2_097_464),
            ("FRONTENDS6", 1_967_200),
            ("CONNS6", 4_195_200),
            ("CONN_EVENTS", 275_784),
            ("GLOBAL_STATS", 1_872),
            ("ALLOWLIST", 0),
        ] {
            assert_eq!(on[name].bytes(2), counted, "{name}");
        }
    }
}
