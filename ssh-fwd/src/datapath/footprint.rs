//! The kernel memory the pinned tables take, as the kernel counts it: the
//! `memlock` line of each map's fdinfo, which is what is charged to the
//! memory cgroup of the agent that made it (Linux 5.11+), so what a
//! DaemonSet's memory limit must hold besides the agent's own memory.
//! A table made without preallocation grows with its entries; every other
//! one takes its whole size when made.

pub mod estimate;

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::maps::MapData;
use ssh_fwd_common::maps::ALL_MAPS;

use super::{capacity::IPV6_TABLES, pins::PinLayout};

/// The pinned tables, each with the bytes the kernel counts for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub tables: Vec<(&'static str, u64)>,
}

impl Footprint {
    /// Reads every pinned table of the layout; one not pinned (or not
    /// readable) is left out.
    pub fn read(layout: &PinLayout) -> Self {
        let tables = ALL_MAPS
            .iter()
            .filter_map(|name| {
                let data = MapData::from_pin(layout.map(name)).ok()?;
                let bytes = memlock(data.fd().as_fd().as_raw_fd()).ok()?;
                Some((*name, bytes))
            })
            .collect();
        Self { tables }
    }

    pub fn total(&self) -> u64 {
        self.tables.iter().map(|(_, b)| b).sum()
    }

    /// What the IPv6 tables take of [`Self::total`].
    pub fn ipv6(&self) -> u64 {
        self.tables
            .iter()
            .filter(|(name, _)| IPV6_TABLES.contains(name))
            .map(|(_, b)| b)
            .sum()
    }

    /// The `n` largest tables, largest first.
    pub fn largest(&self, n: usize) -> Vec<(&'static str, u64)> {
        let mut tables = self.tables.clone();
        tables.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        tables.truncate(n);
        tables
    }

    /// One line for the log and `ssh-fwd status`.
    pub fn summary(&self) -> String {
        let largest: Vec<String> = self
            .largest(3)
            .iter()
            .map(|(name, bytes)| format!("{name} {}", mib(*bytes)))
            .collect();
        format!(
            "{} in {} tables (IPv6 {}; largest {})",
            mib(self.total()),
            self.tables.len(),
            mib(self.ipv6()),
            largest.join(", ")
        )
    }
}

/// `12.3 MiB`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The `memlock:` line of a BPF map's fdinfo.
fn memlock(fd: i32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
    parse_memlock(&text).ok_or_else(|| io::Error::other("no memlock line in the map's fdinfo"))
}

fn parse_memlock(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("memlock:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memlock_line_is_read_and_others_ignored() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1054\nmap_type:\t1\n\
                      key_size:\t12\nvalue_size:\t48\nmax_entries:\t262144\nmap_flags:\t0x0\n\
                      map_extra:\t0x0\nmemlock:\t33555568\nmap_id:\t81\nfrozen:\t0\n";
        assert_eq!(parse_memlock(fdinfo), Some(33_555_568));
        assert_eq!(parse_memlock("pos:\t0\n"), None);
    }

    #[test]
    fn the_summary_names_the_total_ipv6_and_the_largest() {
        let f = Footprint {
            tables: vec![
                ("CONNS", 32 << 20),
                ("CONNS6", 4 << 20),
                ("SOURCES", 20 << 20),
                ("FRONTENDS", 1 << 20),
                ("IFACES", 1 << 10),
            ],
        };
        assert_eq!(f.total(), (57 << 20) + (1 << 10));
        assert_eq!(
            f.summary(),
            "57.0 MiB in 5 tables (IPv6 4.0 MiB; largest CONNS 32.0 MiB, SOURCES 20.0 MiB, \
             CONNS6 4.0 MiB)"
        );
    }
}
