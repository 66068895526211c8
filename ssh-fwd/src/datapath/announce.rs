//! `--announce l2` in the maps: `ANNOUNCE` and `ANNOUNCE6`, the SSH IPs
//! this node answers ARP (IPv4) or neighbour solicitations (IPv6) for on
//! each external interface, and `ARP_HEARD` and `NDP_HEARD`, the other
//! MACs the programs heard claim one of them. The agent decides what to
//! announce; this only makes the maps hold it ([`plan`], pure) and reads
//! them back.
//!
//! One [`FamilyMap`] per address family ([`V4`], [`V6`]: what differs is
//! the maps' names and key layouts), and [`Announcements`] over both,
//! keyed by [`AnnounceAt`], for the agent and `ssh-fwd status`.
//! [`claimants`] keeps whose claims the programs believe (`AGENT_MACS`)
//! and reads back everyone else's (`ARP_FOREIGN`, `NDP_FOREIGN`).

pub mod claimants;

use std::{
    collections::BTreeMap,
    fmt::Debug,
    marker::PhantomData,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use anyhow::Context as _;
use aya::maps::{HashMap, MapData};
use ssh_fwd_common::maps::{
    ANNOUNCE, ANNOUNCE6, ARP_FOREIGN, ARP_HEARD, Addr6, Announce, AnnounceKey, AnnounceKey6, Heard,
    NDP_FOREIGN, NDP_HEARD,
};

use super::pins::PinLayout;

/// What should be announced: `(interface, SSH IP)` -> the interface's MAC;
/// keyed by [`AnnounceAt`] in the agent, by a family's map key in a
/// [`FamilyMap`].
pub type Desired<K = AnnounceAt> = BTreeMap<K, [u8; 6]>;

/// An SSH IP of either family on one interface: what the agent announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AnnounceAt {
    pub ifindex: u32,
    pub ip: IpAddr,
}

impl AnnounceAt {
    pub fn new(ifindex: u32, ip: impl Into<IpAddr>) -> Self {
        Self {
            ifindex,
            ip: ip.into(),
        }
    }
}

/// What one address family's maps are: their names, and their keys.
pub trait AnnounceFamily {
    type Ip: Copy + Ord + Into<IpAddr>;
    /// The announce map's key: an interface and an address.
    type Key: aya::Pod + Copy + Ord + Debug;
    /// The heard map's key: an address.
    type HeardKey: aya::Pod;
    const ANNOUNCE: &'static str;
    const HEARD: &'static str;
    /// The foreign claims' map, keyed as the heard map.
    const FOREIGN: &'static str;
    fn key(ifindex: u32, ip: Self::Ip) -> Self::Key;
    fn at(key: &Self::Key) -> AnnounceAt;
    fn heard_ip(addr: Self::HeardKey) -> Self::Ip;
    /// `ip` if it is of this family.
    fn of(ip: IpAddr) -> Option<Self::Ip>;
}

/// IPv4: `ANNOUNCE` and `ARP_HEARD`.
#[derive(Debug)]
pub enum V4 {}
/// IPv6: `ANNOUNCE6` and `NDP_HEARD`.
#[derive(Debug)]
pub enum V6 {}

impl AnnounceFamily for V4 {
    type Ip = Ipv4Addr;
    type Key = AnnounceKey;
    type HeardKey = u32;
    const ANNOUNCE: &'static str = ANNOUNCE;
    const HEARD: &'static str = ARP_HEARD;
    const FOREIGN: &'static str = ARP_FOREIGN;
    fn key(ifindex: u32, ip: Ipv4Addr) -> AnnounceKey {
        AnnounceKey::new(ifindex, ip)
    }
    fn at(key: &AnnounceKey) -> AnnounceAt {
        AnnounceAt::new(key.ifindex, key.ip())
    }
    fn heard_ip(addr: u32) -> Ipv4Addr {
        Ipv4Addr::from(addr.to_ne_bytes())
    }
    fn of(ip: IpAddr) -> Option<Ipv4Addr> {
        match ip {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        }
    }
}

impl AnnounceFamily for V6 {
    type Ip = Ipv6Addr;
    type Key = AnnounceKey6;
    type HeardKey = Addr6;
    const ANNOUNCE: &'static str = ANNOUNCE6;
    const HEARD: &'static str = NDP_HEARD;
    const FOREIGN: &'static str = NDP_FOREIGN;
    fn key(ifindex: u32, ip: Ipv6Addr) -> AnnounceKey6 {
        AnnounceKey6::new(ifindex, ip)
    }
    fn at(key: &AnnounceKey6) -> AnnounceAt {
        AnnounceAt::new(key.ifindex, key.ip())
    }
    fn heard_ip(addr: Addr6) -> Ipv6Addr {
        addr.ip()
    }
    fn of(ip: IpAddr) -> Option<Ipv6Addr> {
        match ip {
            IpAddr::V6(ip) => Some(ip),
            IpAddr::V4(_) => None,
        }
    }
}

/// The writes that make `installed` hold `desired`: entries to write
/// (new, or with another MAC) and entries to delete. An entry that stays
/// keeps its `since_ms`.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<K = AnnounceAt> {
    pub upserts: Vec<(K, Announce)>,
    pub deletes: Vec<K>,
}

impl<K> Default for Plan<K> {
    fn default() -> Self {
        Self {
            upserts: Vec::new(),
            deletes: Vec::new(),
        }
    }
}

impl<K> Plan<K> {
    /// The SSH IPs newly announced on an interface (or with a new MAC):
    /// those whose neighbours must hear a gratuitous ARP (IPv4) or an
    /// unsolicited neighbour advertisement (IPv6).
    pub fn started(&self) -> impl Iterator<Item = &(K, Announce)> {
        self.upserts.iter()
    }

    /// The same writes, keyed by `f` of each key.
    fn map<J>(self, f: impl Fn(&K) -> J) -> Plan<J> {
        Plan {
            upserts: self.upserts.iter().map(|(k, e)| (f(k), *e)).collect(),
            deletes: self.deletes.iter().map(f).collect(),
        }
    }
}

/// Pure: `installed` and `desired` (every entry with `flags`) to writes;
/// `now_ms` stamps new entries.
pub fn plan<K: Ord + Copy>(
    installed: &BTreeMap<K, Announce>,
    desired: &Desired<K>,
    flags: u16,
    now_ms: u64,
) -> Plan<K> {
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

/// Handles to one family's announce and heard maps.
pub struct FamilyMap<F: AnnounceFamily> {
    announce: HashMap<MapData, F::Key, Announce>,
    heard: HashMap<MapData, F::HeardKey, Heard>,
    family: PhantomData<F>,
}

/// `ANNOUNCE` and `ARP_HEARD`.
pub type AnnounceMap = FamilyMap<V4>;
/// `ANNOUNCE6` and `NDP_HEARD`.
pub type AnnounceMap6 = FamilyMap<V6>;

impl<F: AnnounceFamily> FamilyMap<F> {
    /// Opens the maps an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Ok(Self {
            announce: open(layout, F::ANNOUNCE)?,
            heard: open(layout, F::HEARD)?,
            family: PhantomData,
        })
    }

    /// What the map holds now.
    pub fn installed(&self) -> anyhow::Result<BTreeMap<F::Key, Announce>> {
        self.announce
            .iter()
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", F::ANNOUNCE))
    }

    /// Makes the map hold `desired`, each entry with `flags`
    /// (`ANNOUNCE_*`); returns what was written.
    pub fn set(
        &mut self,
        desired: &Desired<F::Key>,
        flags: u16,
        now_ms: u64,
    ) -> anyhow::Result<Plan<F::Key>> {
        let plan = plan(&self.installed()?, desired, flags, now_ms);
        for (key, entry) in &plan.upserts {
            let at = F::at(key);
            self.announce
                .insert(key, entry, 0)
                .with_context(|| format!("announcing {} on interface {}", at.ip, at.ifindex))?;
        }
        for key in &plan.deletes {
            let at = F::at(key);
            self.announce
                .remove(key)
                .with_context(|| format!("withdrawing {} on interface {}", at.ip, at.ifindex))?;
        }
        Ok(plan)
    }

    /// The other agents heard claiming an announced SSH IP, and when.
    pub fn heard(&self) -> anyhow::Result<BTreeMap<F::Ip, Heard>> {
        self.heard
            .iter()
            .map(|entry| entry.map(|(addr, heard)| (F::heard_ip(addr), heard)))
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", F::HEARD))
    }

    /// [`FamilyMap::set`] for the entries of `desired` of this family.
    fn set_of(
        &mut self,
        desired: &Desired<AnnounceAt>,
        flags: u16,
        now_ms: u64,
    ) -> anyhow::Result<Plan<AnnounceAt>> {
        let ours = of_family::<F>(desired);
        Ok(self.set(&ours, flags, now_ms)?.map(F::at))
    }
}

/// Pure: the entries of `desired` of family `F`, keyed as its map is.
pub fn of_family<F: AnnounceFamily>(desired: &Desired<AnnounceAt>) -> Desired<F::Key> {
    desired
        .iter()
        .filter_map(|(at, mac)| Some((F::key(at.ifindex, F::of(at.ip)?), *mac)))
        .collect()
}

/// Both families' maps, keyed by [`AnnounceAt`].
pub struct Announcements {
    v4: AnnounceMap,
    v6: AnnounceMap6,
}

impl Announcements {
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Ok(Self {
            v4: FamilyMap::open_pinned(layout)?,
            v6: FamilyMap::open_pinned(layout)?,
        })
    }

    /// What both maps hold now.
    pub fn installed(&self) -> anyhow::Result<BTreeMap<AnnounceAt, Announce>> {
        let v4 = self
            .v4
            .installed()?
            .into_iter()
            .map(|(k, e)| (V4::at(&k), e));
        let v6 = self
            .v6
            .installed()?
            .into_iter()
            .map(|(k, e)| (V6::at(&k), e));
        Ok(v4.chain(v6).collect())
    }

    /// Makes both maps hold `desired`, each entry with `flags`; returns
    /// what was written.
    pub fn set(
        &mut self,
        desired: &Desired<AnnounceAt>,
        flags: u16,
        now_ms: u64,
    ) -> anyhow::Result<Plan<AnnounceAt>> {
        let mut plan = self.v4.set_of(desired, flags, now_ms)?;
        let v6 = self.v6.set_of(desired, flags, now_ms)?;
        plan.upserts.extend(v6.upserts);
        plan.deletes.extend(v6.deletes);
        Ok(plan)
    }

    /// The other agents heard claiming an announced SSH IP of either
    /// family.
    pub fn heard(&self) -> anyhow::Result<BTreeMap<IpAddr, Heard>> {
        let v4 = self.v4.heard()?.into_iter().map(|(ip, h)| (ip.into(), h));
        let v6 = self.v6.heard()?.into_iter().map(|(ip, h)| (ip.into(), h));
        Ok(v4.chain(v6).collect())
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
    fn each_family_writes_only_its_own_ssh_ips_in_its_own_keys() {
        let v6: Ipv6Addr = "fd00:198::10".parse().unwrap();
        let desired = Desired::from([
            (AnnounceAt::new(3, SSH_IP), MAC),
            (AnnounceAt::new(3, v6), MAC),
            (AnnounceAt::new(4, v6), [2, 0, 0, 0, 0, 2]),
        ]);
        assert_eq!(
            of_family::<V4>(&desired),
            Desired::from([(AnnounceKey::new(3, SSH_IP), MAC)])
        );
        let ipv6 = of_family::<V6>(&desired);
        assert_eq!(
            ipv6,
            Desired::from([
                (AnnounceKey6::new(3, v6), MAC),
                (AnnounceKey6::new(4, v6), [2, 0, 0, 0, 0, 2])
            ])
        );
        // Written as the IPv4 entries are: new ones stamped, back by the
        // agent's key.
        let written = plan(&BTreeMap::new(), &ipv6, ANNOUNCE_YIELD, 7).map(V6::at);
        assert_eq!(
            written
                .upserts
                .iter()
                .map(|(at, _)| *at)
                .collect::<Vec<_>>(),
            vec![AnnounceAt::new(3, v6), AnnounceAt::new(4, v6)]
        );
        assert!(
            written
                .upserts
                .iter()
                .all(|(_, e)| e.flags == ANNOUNCE_YIELD)
        );
    }

    #[test]
    fn heard_addresses_read_back_in_either_family() {
        let v6: Ipv6Addr = "fd00:198::10".parse().unwrap();
        assert_eq!(V6::heard_ip(Addr6::new(v6)), v6);
        assert_eq!(V4::heard_ip(u32::from_ne_bytes(SSH_IP.octets())), SSH_IP);
    }

    #[test]
    fn macs_read_as_operators_write_them() {
        assert_eq!(mac_text([2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }
}
