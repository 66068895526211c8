//! `--announce l2` in the maps: `ANNOUNCE`, the SSH IPs this node answers
//! ARP for on each external interface, and `ARP_HEARD`, the other MACs the
//! programs heard claim one of them. The agent decides what to announce;
//! this only makes the map hold it ([`plan`], pure) and reads both back.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use anyhow::Context as _;
use aya::maps::{HashMap, MapData};
use ssh_fwd_common::maps::{ANNOUNCE, ARP_HEARD, Announce, AnnounceKey, Heard};

use super::pins::PinLayout;

/// What should be announced: `(interface, SSH IP)` -> the interface's MAC.
pub type Desired = BTreeMap<AnnounceKey, [u8; 6]>;

/// The writes that make `installed` hold `desired`: entries to write
/// (new, or with another MAC) and entries to delete. An entry that stays
/// keeps its `since_ms`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub upserts: Vec<(AnnounceKey, Announce)>,
    pub deletes: Vec<AnnounceKey>,
}

impl Plan {
    /// The SSH IPs newly announced on an interface (or with a new MAC):
    /// those whose neighbours must hear a gratuitous ARP.
    pub fn started(&self) -> impl Iterator<Item = &(AnnounceKey, Announce)> {
        self.upserts.iter()
    }
}

/// Pure: `installed` and `desired` (every entry with `flags`) to writes;
/// `now_ms` stamps new entries.
pub fn plan(
    installed: &BTreeMap<AnnounceKey, Announce>,
    desired: &Desired,
    flags: u16,
    now_ms: u64,
) -> Plan {
    let upserts = desired
        .iter()
        .filter(|(key, mac)| {
            installed
                .get(key)
                .is_none_or(|have| have.mac != **mac || have.flags != flags)
        })
        .map(|(key, mac)| {
            let entry = Announce {
                mac: *mac,
                flags,
                since_ms: now_ms,
            };
            (*key, entry)
        })
        .collect();
    let deletes = installed
        .keys()
        .filter(|key| !desired.contains_key(key))
        .copied()
        .collect();
    Plan { upserts, deletes }
}

/// Handles to `ANNOUNCE` and `ARP_HEARD`.
pub struct AnnounceMap {
    announce: HashMap<MapData, AnnounceKey, Announce>,
    heard: HashMap<MapData, u32, Heard>,
}

impl AnnounceMap {
    /// Opens the maps an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Ok(Self {
            announce: open(layout, ANNOUNCE)?,
            heard: open(layout, ARP_HEARD)?,
        })
    }

    /// What the map holds now.
    pub fn installed(&self) -> anyhow::Result<BTreeMap<AnnounceKey, Announce>> {
        self.announce
            .iter()
            .collect::<Result<_, _>>()
            .context("reading ANNOUNCE")
    }

    /// Makes the map hold `desired`, each entry with `flags`
    /// (`ANNOUNCE_*`); returns what was written.
    pub fn set(&mut self, desired: &Desired, flags: u16, now_ms: u64) -> anyhow::Result<Plan> {
        let plan = plan(&self.installed()?, desired, flags, now_ms);
        for (key, entry) in &plan.upserts {
            self.announce
                .insert(key, entry, 0)
                .with_context(|| format!("announcing {} on interface {}", key.ip(), key.ifindex))?;
        }
        for key in &plan.deletes {
            self.announce.remove(key).with_context(|| {
                format!("withdrawing {} on interface {}", key.ip(), key.ifindex)
            })?;
        }
        Ok(plan)
    }

    /// The SSH IPs announced on any interface.
    pub fn announced(&self) -> anyhow::Result<BTreeSet<Ipv4Addr>> {
        Ok(self.installed()?.keys().map(AnnounceKey::ip).collect())
    }

    /// The other MACs heard claiming an announced SSH IP, and when.
    pub fn heard(&self) -> anyhow::Result<BTreeMap<Ipv4Addr, Heard>> {
        self.heard
            .iter()
            .map(|entry| entry.map(|(addr, heard)| (Ipv4Addr::from(addr.to_ne_bytes()), heard)))
            .collect::<Result<_, _>>()
            .context("reading ARP_HEARD")
    }
}

fn open<K: aya::Pod, V: aya::Pod>(
    layout: &PinLayout,
    name: &str,
) -> anyhow::Result<HashMap<MapData, K, V>> {
    let map = super::maps::open_pin(layout, name)?;
    HashMap::try_from(map).with_context(|| name.to_owned())
}

/// A MAC as `02:00:00:00:00:01`.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::maps::ANNOUNCE_YIELD;

    use super::*;

    const SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn entry(mac: [u8; 6], since_ms: u64) -> Announce {
        Announce {
            mac,
            flags: 0,
            since_ms,
        }
    }

    #[test]
    fn a_new_address_is_written_with_its_start_and_a_kept_one_is_left_alone() {
        let key = AnnounceKey::new(3, SSH_IP);
        let desired = Desired::from([(key, MAC)]);
        let first = plan(&BTreeMap::new(), &desired, 0, 1_000);
        assert_eq!(first.upserts, vec![(key, entry(MAC, 1_000))]);
        assert!(first.deletes.is_empty());
        let installed = BTreeMap::from([(key, entry(MAC, 1_000))]);
        assert_eq!(plan(&installed, &desired, 0, 2_000), Plan::default());
    }

    #[test]
    fn a_new_mac_is_announced_again_and_an_address_no_longer_wanted_is_withdrawn() {
        let key = AnnounceKey::new(3, SSH_IP);
        let other = AnnounceKey::new(4, SSH_IP);
        let installed = BTreeMap::from([(key, entry(MAC, 1_000)), (other, entry(MAC, 1_000))]);
        let new_mac = [2, 0, 0, 0, 0, 9];
        let next = plan(&installed, &Desired::from([(key, new_mac)]), 0, 5_000);
        assert_eq!(next.upserts, vec![(key, entry(new_mac, 5_000))]);
        assert_eq!(next.deletes, vec![other]);
    }

    #[test]
    fn an_entry_whose_flags_change_is_written_again() {
        let key = AnnounceKey::new(3, SSH_IP);
        let installed = BTreeMap::from([(key, entry(MAC, 1_000))]);
        let desired = Desired::from([(key, MAC)]);
        let next = plan(&installed, &desired, ANNOUNCE_YIELD, 2_000);
        let mut yielding = entry(MAC, 2_000);
        yielding.flags = ANNOUNCE_YIELD;
        assert_eq!(next.upserts, vec![(key, yielding)]);
    }

    #[test]
    fn macs_read_as_operators_write_them() {
        assert_eq!(mac_text([2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }
}
