//! What the soak reads of a node and its processes: the kernel's
//! connection tables from the pinned maps (entries of `CONNS`,
//! `HALF_OPEN`, `CLAIMS`, and each client's count in `SOURCES`), the
//! counters on `/metrics` that should not move, and a process's resident
//! memory. Read-only: the maps are opened from their pins, as `ssh-fwd
//! list` does, and nothing is written.

use std::{collections::BTreeMap, path::Path};

use anyhow::Context as _;
use aya::maps::{HashMap, Map, MapData};
use ssh_fwd_common::maps::{
    CLAIMS, CONNS, Claim, ClaimKey, Conn, ConnKey, HALF_OPEN, HalfOpen, HalfOpenKey,
    LAYOUT_VERSION, SOURCES,
};

use crate::NetNs;

/// The entries of a node's connection tables (IPv4: the soak's family).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub conns: usize,
    pub half_open: usize,
    pub claims: usize,
    /// Each client's count of connections, as the kernel holds it.
    pub sources: BTreeMap<std::net::Ipv4Addr, u64>,
}

impl Tables {
    /// Reads the tables pinned under the bpffs `root`.
    pub fn read(root: &Path) -> anyhow::Result<Self> {
        let dir = root.join(format!("v{LAYOUT_VERSION}")).join("maps");
        let open = |name: &str| -> anyhow::Result<Map> {
            let data = MapData::from_pin(dir.join(name))
                .with_context(|| format!("opening the pinned {name} under {}", dir.display()))?;
            Ok(Map::from_map_data(data)?)
        };
        let conns: HashMap<MapData, ConnKey, Conn> = HashMap::try_from(open(CONNS)?)?;
        // HALF_OPEN and CLAIMS are LRU hashes, which aya reads as hashes.
        let half: HashMap<MapData, HalfOpenKey, HalfOpen> = HashMap::try_from(open(HALF_OPEN)?)?;
        let claims: HashMap<MapData, ClaimKey, Claim> = HashMap::try_from(open(CLAIMS)?)?;
        let sources: HashMap<MapData, u32, u64> = HashMap::try_from(open(SOURCES)?)?;
        Ok(Self {
            conns: conns.keys().filter(Result::is_ok).count(),
            half_open: half.keys().filter(Result::is_ok).count(),
            claims: claims.keys().filter(Result::is_ok).count(),
            sources: sources
                .iter()
                .filter_map(Result::ok)
                .map(|(addr, n)| (std::net::Ipv4Addr::from(u32::from_be(addr)), n))
                .collect(),
        })
    }

    /// Clients whose count is not 0 (a count below zero shows as a huge
    /// number: the kernel counts down with a wrapping add).
    pub fn held(&self) -> Vec<(std::net::Ipv4Addr, u64)> {
        (self.sources.iter())
            .filter(|(_, n)| **n != 0)
            .map(|(a, n)| (*a, *n))
            .collect()
    }
}

/// What the kernel holds for one client on a node: its count in
/// `SOURCES`, and its connections in `CONNS` not closed both ways (what
/// the count should be).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    pub counted: u64,
    pub open: u64,
}

impl Client {
    /// Reads `client`'s count and open connections under the bpffs `root`.
    pub fn read(root: &Path, client: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        let dir = root.join(format!("v{LAYOUT_VERSION}")).join("maps");
        let open_map = |name: &str| -> anyhow::Result<Map> {
            Ok(Map::from_map_data(MapData::from_pin(dir.join(name))?)?)
        };
        let key = u32::from_ne_bytes(client.octets());
        let sources: HashMap<MapData, u32, u64> = HashMap::try_from(open_map(SOURCES)?)?;
        let counted = sources.get(&key, 0).unwrap_or(0);
        let conns: HashMap<MapData, ConnKey, Conn> = HashMap::try_from(open_map(CONNS)?)?;
        let open = (conns.iter().filter_map(Result::ok))
            .filter(|(k, c)| k.client_addr == key && !ssh_fwd_common::conntrack::closing(c))
            .count() as u64;
        Ok(Self { counted, open })
    }
}

/// The counters on an agent's or controller's `/metrics` that a soak
/// should see stay at 0, or only move while a fault is on.
pub const WATCHED: [&str; 7] = [
    "ssh_fwd_pins_restored",
    "ssh_fwd_reconcile_errors",
    "ssh_fwd_api_errors",
    "ssh_fwd_mappings_left_out",
    "event=\"conn_purged\"",
    "ssh_fwd_lease_renewal_errors",
    "ssh_fwd_controller_api_errors",
];

/// The watched counters' values on `/metrics` at `addr` in `ns`, by the
/// whole series name (labels included); empty if it does not answer.
pub fn watched_counters(ns: &NetNs, addr: &str) -> BTreeMap<String, f64> {
    let Ok((200, body)) = crate::prometheus::get_in(ns, addr, "/metrics") else {
        return BTreeMap::new();
    };
    parse_watched(&body)
}

fn parse_watched(body: &str) -> BTreeMap<String, f64> {
    (body.lines())
        .filter(|l| !l.starts_with('#') && WATCHED.iter().any(|w| l.contains(w)))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// `pid`'s resident memory in KiB, if it runs.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_watched_counters_are_read_with_their_labels() {
        let body = "# HELP ssh_fwd_pins_restored x\n\
                    ssh_fwd_pins_restored_total 2\n\
                    ssh_fwd_reconciles_total 40\n\
                    ssh_fwd_connection_events_total{event=\"conn_purged\"} 3\n\
                    ssh_fwd_connection_events_total{event=\"conn_closed\"} 9\n";
        let got = parse_watched(body);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got["ssh_fwd_pins_restored_total"], 2.0);
        assert_eq!(
            got["ssh_fwd_connection_events_total{event=\"conn_purged\"}"],
            3.0
        );
    }
}
