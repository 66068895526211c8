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
//! A backend address on no pod interface (a VM on a tap device, say) has
//! no owner: its replies are never tracked, and the counter
//! `reply_no_owner` shows them.

use std::{
    collections::{BTreeMap, BTreeSet, btree_map::Entry},
    net::Ipv4Addr,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use ssh_fwd_common::maps::{OWNERS, Owner};

use super::netdev::{Kind, Link, Netlink};

/// One pod interface, as the scan found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddrs {
    /// The host end: where the reply program runs.
    pub host: u32,
    /// The bridge the host end is a port of, if any.
    pub master: Option<u32>,
    /// The addresses of the pod's end.
    pub addrs: Vec<Ipv4Addr>,
}

/// What `OWNERS` should hold, and the addresses more than one pod
/// interface claims (owned by none), with those interfaces.
pub fn desired(
    pods: &[PodAddrs],
) -> (BTreeMap<Ipv4Addr, Owner>, BTreeMap<Ipv4Addr, BTreeSet<u32>>) {
    let mut claimed: BTreeMap<Ipv4Addr, BTreeMap<u32, Owner>> = BTreeMap::new();
    for pod in pods {
        let owner = Owner {
            ifindex: pod.host,
            master: pod.master.unwrap_or(0),
        };
        for addr in &pod.addrs {
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

/// The `OWNERS` map and what the agent last wrote into it.
pub struct Owners {
    map: HashMap<MapData, u32, Owner>,
    netlink: Netlink,
    /// Disputed addresses already logged.
    warned: BTreeSet<Ipv4Addr>,
}

impl Owners {
    /// Takes the map out of the loaded object.
    pub fn new(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let map = ebpf
            .take_map(OWNERS)
            .ok_or_else(|| anyhow!("the eBPF object has no map {OWNERS}; rebuild ssh-fwd"))?;
        Ok(Self {
            map: HashMap::try_from(map).context(OWNERS)?,
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
        let mut by_netns: BTreeMap<i32, Vec<(u32, Ipv4Addr)>> = BTreeMap::new();
        let mut pods = Vec::new();
        for (link, peer) in pod_peers(links, not_pods) {
            let addrs = match by_netns.entry(peer.netns_id) {
                Entry::Occupied(dumped) => dumped.into_mut(),
                // A pod that went away meanwhile has no namespace to dump.
                Entry::Vacant(slot) => slot.insert(
                    self.netlink
                        .addresses_in(peer.netns_id)
                        .await
                        .unwrap_or_default(),
                ),
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

    /// Makes the map hold exactly `owners`: new and changed first, then
    /// removals.
    fn write(&mut self, owners: &BTreeMap<Ipv4Addr, Owner>) -> anyhow::Result<()> {
        let key = |addr: &Ipv4Addr| u32::from_ne_bytes(addr.octets());
        let current: BTreeMap<u32, Owner> = self
            .map
            .iter()
            .collect::<Result<_, _>>()
            .context("reading OWNERS")?;
        for (addr, owner) in owners {
            if current.get(&key(addr)) != Some(owner) {
                self.map
                    .insert(key(addr), owner, 0)
                    .with_context(|| format!("writing OWNERS[{addr}]"))?;
            }
        }
        let wanted: BTreeSet<u32> = owners.keys().map(key).collect();
        for stale in current.keys().filter(|k| !wanted.contains(k)) {
            match self.map.remove(stale) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(e).context("removing an OWNERS entry"),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
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
