//! `OWNERS`: for each address of a pod of this node, the interface its
//! packets come in by. The kernel programs believe a "reply" from a
//! backend's address only from there, so a pod cannot speak for another
//! pod (`ssh_fwd_common::conntrack::trust::ownership`): tcx runs before
//! netfilter and `rp_filter`, so a CNI's own anti-spoofing rules come too
//! late.
//!
//! The addresses are read from the pods' side: for each host end of a veth
//! or netkit pair whose peer is in another namespace, the addresses of
//! that peer, dumped from its namespace over rtnetlink
//! (`IFA_TARGET_NETNSID`). That is the pod's own interface whatever the
//! CNI routes: a /32 route per pod, or a bridge its host ends are ports of
//! (then the bridge counts too, as the egress program sees the bridge as
//! where a bridged pod's packets came in). An address two pods' interfaces
//! claim (a pod that gave itself another's address) is owned by neither,
//! and logged once.
//!
//! Both families: IPv4 addresses go to `OWNERS`, IPv6 ones to `OWNERS6`,
//! except IPv6 link-local ones (fe80::/10), which every interface has and
//! no backend is.
//!
//! A backend address on no pod interface (a VM on a tap device, say) has
//! no owner: its replies are never tracked, and the counter
//! `reply_no_owner` shows them.

use std::{
    collections::{BTreeMap, BTreeSet, btree_map::Entry},
    net::IpAddr,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use ssh_fwd_common::maps::{Addr6, OWNERS, OWNERS6, Owner};

use super::netdev::{Kind, Link, Netlink};
use crate::mapping::Family;

/// One pod interface, as the scan found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddrs {
    /// The host end: where the reply program runs.
    pub host: u32,
    /// The bridge the host end is a port of, if any.
    pub master: Option<u32>,
    /// The addresses of the pod's end, of both families.
    pub addrs: Vec<IpAddr>,
}

/// What `OWNERS` and `OWNERS6` should hold, and the addresses more than
/// one pod interface claims (owned by none), with those interfaces.
pub fn desired(pods: &[PodAddrs]) -> (BTreeMap<IpAddr, Owner>, BTreeMap<IpAddr, BTreeSet<u32>>) {
    let mut claimed: BTreeMap<IpAddr, BTreeMap<u32, Owner>> = BTreeMap::new();
    for pod in pods {
        let owner = Owner {
            ifindex: pod.host,
            master: pod.master.unwrap_or(0),
        };
        for addr in pod.addrs.iter().filter(|a| !is_link_local6(a)) {
            claimed.entry(*addr).or_default().insert(pod.host, owner);
        }
    }
    let mut owners = BTreeMap::new();
    let mut disputed = BTreeMap::new();
    for (addr, by) in claimed {
        if by.len() == 1 {
            owners.extend(by.into_values().map(|o| (addr, o)));
        } else {
            disputed.insert(addr, by.into_keys().collect());
        }
    }
    (owners, disputed)
}

/// An IPv6 link-local address (fe80::/10): on every interface, never a
/// backend, and the same on many pods (from the same MAC scheme).
fn is_link_local6(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(ip) if ip.segments()[0] & 0xffc0 == 0xfe80)
}

/// The host ends of pods' interfaces (as [`super::netdev::pod_ends`]) with
/// the peer each leads to.
fn pod_peers<'a>(
    links: &'a [Link],
    not_pods: &'a BTreeSet<String>,
) -> impl Iterator<Item = (&'a Link, super::netdev::Peer)> {
    links
        .iter()
        .filter(|l| matches!(l.kind, Kind::Veth | Kind::Netkit))
        .filter(|l| !not_pods.contains(&l.name))
        .filter_map(|l| Some((l, l.peer?)))
}

/// The `OWNERS` and `OWNERS6` maps.
pub struct Owners {
    map: HashMap<MapData, u32, Owner>,
    map6: HashMap<MapData, Addr6, Owner>,
    /// Whether the node serves IPv6; if not, `OWNERS6` has no room and
    /// pods' IPv6 addresses, never backends, are not written.
    ipv6: bool,
    netlink: Netlink,
    /// Disputed addresses already logged.
    warned: BTreeSet<IpAddr>,
}

impl Owners {
    /// Takes the maps out of the loaded object.
    pub fn new(ebpf: &mut Ebpf, ipv6: bool) -> anyhow::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))
        };
        Ok(Self {
            map: HashMap::try_from(take(OWNERS)?).context(OWNERS)?,
            map6: HashMap::try_from(take(OWNERS6)?).context(OWNERS6)?,
            ipv6,
            netlink: Netlink::open_strict()?,
            warned: BTreeSet::new(),
        })
    }

    /// Reads every pod interface's addresses and makes `OWNERS` say who
    /// owns each. `not_pods` are the external and cluster interfaces
    /// (a test bed's links between nodes are veths too). Returns how many
    /// addresses are owned.
    pub async fn sync(
        &mut self,
        links: &[Link],
        not_pods: &BTreeSet<String>,
    ) -> anyhow::Result<usize> {
        let mut by_netns: BTreeMap<i32, Vec<(u32, IpAddr)>> = BTreeMap::new();
        let mut pods = Vec::new();
        for (link, peer) in pod_peers(links, not_pods) {
            let addrs = match by_netns.entry(peer.netns_id) {
                Entry::Occupied(dumped) => dumped.into_mut(),
                // A pod that went away meanwhile has no namespace to dump.
                Entry::Vacant(slot) => {
                    let mut addrs = Vec::new();
                    for family in [Family::V4, Family::V6] {
                        let dumped = self.netlink.addresses_in(peer.netns_id, family).await;
                        addrs.extend(dumped.unwrap_or_default());
                    }
                    slot.insert(addrs)
                }
            };
            let addrs = addrs
                .iter()
                .filter(|(index, _)| *index == peer.index)
                .map(|(_, addr)| *addr)
                .collect();
            pods.push(PodAddrs {
                host: link.index,
                master: link.master,
                addrs,
            });
        }
        let (owners, disputed) = desired(&pods);
        for (addr, interfaces) in &disputed {
            if self.warned.insert(*addr) {
                tracing::warn!(
                    %addr,
                    interfaces = ?interfaces,
                    "two pod interfaces hold this address: neither may speak for it, so \
                     connections to a backend there are not tracked; find the pods with `ip -all \
                     netns exec ip -br addr` or your CNI, and remove the address from the one \
                     that should not have it"
                );
            }
        }
        self.warned.retain(|a| disputed.contains_key(a));
        self.write(&owners)?;
        Ok(owners.len())
    }

    /// Makes the maps hold exactly `owners`, each family in its own.
    fn write(&mut self, owners: &BTreeMap<IpAddr, Owner>) -> anyhow::Result<()> {
        let (mut v4, mut v6) = (BTreeMap::new(), BTreeMap::new());
        for (addr, owner) in owners {
            match addr {
                IpAddr::V4(ip) => v4.insert(u32::from_ne_bytes(ip.octets()), *owner),
                IpAddr::V6(ip) if self.ipv6 => v6.insert(Addr6::new(*ip), *owner),
                IpAddr::V6(_) => None,
            };
        }
        write_map(&mut self.map, &v4, OWNERS, |k| {
            std::net::Ipv4Addr::from(k.to_ne_bytes()).to_string()
        })?;
        write_map(&mut self.map6, &v6, OWNERS6, |k| k.ip().to_string())
    }
}

/// Makes `map` (`name`) hold exactly `owners`: new and changed first, then
/// removals. `show`: a key as an address, for messages.
fn write_map<K: aya::Pod + Ord>(
    map: &mut HashMap<MapData, K, Owner>,
    owners: &BTreeMap<K, Owner>,
    name: &str,
    show: impl Fn(&K) -> String,
) -> anyhow::Result<()> {
    let current: BTreeMap<K, Owner> = map
        .iter()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {name}"))?;
    for (key, owner) in owners {
        if current.get(key) != Some(owner) {
            map.insert(key, owner, 0)
                .with_context(|| format!("writing {name}[{}]", show(key)))?;
        }
    }
    for stale in current.keys().filter(|k| !owners.contains_key(k)) {
        match map.remove(stale) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
            Err(e) => return Err(e).with_context(|| format!("removing {name}[{}]", show(stale))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_pod_address_is_owned_by_its_host_end_and_the_bridge_it_is_a_port_of() {
        let pods = [
            PodAddrs {
                host: 7,
                master: None,
                addrs: vec![ip("10.244.1.5")],
            },
            PodAddrs {
                host: 9,
                master: Some(3),
                addrs: vec![ip("10.244.2.5"), ip("10.244.2.6")],
            },
        ];
        let (owners, disputed) = desired(&pods);
        assert!(disputed.is_empty());
        assert_eq!(
            owners,
            BTreeMap::from([
                (
                    ip("10.244.1.5"),
                    Owner {
                        ifindex: 7,
                        master: 0
                    }
                ),
                (
                    ip("10.244.2.5"),
                    Owner {
                        ifindex: 9,
                        master: 3
                    }
                ),
                (
                    ip("10.244.2.6"),
                    Owner {
                        ifindex: 9,
                        master: 3
                    }
                ),
            ])
        );
    }

    #[test]
    fn an_address_two_pods_claim_is_owned_by_neither() {
        let pods = [
            PodAddrs {
                host: 7,
                master: None,
                addrs: vec![ip("10.244.1.5")],
            },
            // A pod that added pod 1's address to its own interface.
            PodAddrs {
                host: 9,
                master: None,
                addrs: vec![ip("10.244.2.5"), ip("10.244.1.5")],
            },
        ];
        let (owners, disputed) = desired(&pods);
        assert_eq!(
            owners.keys().copied().collect::<Vec<_>>(),
            [ip("10.244.2.5")]
        );
        assert_eq!(
            disputed,
            BTreeMap::from([(ip("10.244.1.5"), [7, 9].into())])
        );
    }

    #[test]
    fn a_pods_ipv6_addresses_are_owned_too_but_not_its_link_local_one() {
        let pods = [
            PodAddrs {
                host: 7,
                master: None,
                addrs: vec![ip("10.244.1.5"), ip("fd00:10:244::5"), ip("fe80::1")],
            },
            // Link-local addresses repeat across pods: never disputed.
            PodAddrs {
                host: 9,
                master: None,
                addrs: vec![ip("2001:db8:1::9"), ip("fe80::1")],
            },
        ];
        let (owners, disputed) = desired(&pods);
        assert!(disputed.is_empty(), "{disputed:?}");
        assert_eq!(
            owners
                .iter()
                .map(|(a, o)| (*a, o.ifindex))
                .collect::<Vec<_>>(),
            [
                (ip("10.244.1.5"), 7),
                (ip("2001:db8:1::9"), 9),
                (ip("fd00:10:244::5"), 7)
            ]
        );
    }

    #[test]
    fn only_pairs_with_a_peer_elsewhere_and_no_external_interface_are_pods() {
        let peer = |netns_id| Some(super::super::netdev::Peer { netns_id, index: 2 });
        let links = [
            Link {
                index: 3,
                name: "veth3".into(),
                kind: Kind::Veth,
                peer_elsewhere: true,
                peer: peer(1),
                ..Link::default()
            },
            Link {
                index: 4,
                name: "ext0".into(),
                kind: Kind::Veth,
                peer_elsewhere: true,
                peer: peer(2),
                ..Link::default()
            },
            Link {
                index: 5,
                name: "vxlan0".into(),
                kind: Kind::Other,
                peer_elsewhere: true,
                peer: peer(3),
                ..Link::default()
            },
        ];
        let not_pods = BTreeSet::from(["ext0".to_owned()]);
        let found: Vec<u32> = pod_peers(&links, &not_pods).map(|(l, _)| l.index).collect();
        assert_eq!(found, [3]);
    }
}
