//! Keeps the reply program on the host end of every pod's interface, and the
//! `IFACES` map equal to what the kernel programs may rely on: which
//! interfaces are external, and which pods' veth ends a request may be
//! handed to directly; and `IFACE_MACS`, the external and cluster
//! interfaces' own MACs, the only ones whose frames are translated.
//!
//! Pods come and go without telling the agent: the agent rescans on every
//! rtnetlink link event and on a timer. Nothing here is needed for
//! correctness: a
//! reply that meets no reply program is reverse-NATed by the egress program
//! after the node routed it, and a request to a pod not yet known is
//! redirected the ordinary way instead of into the pod's namespace.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
    programs::{SchedClassifier, TcAttachType},
};
use ssh_fwd_common::maps::{
    IFACE_CLUSTER, IFACE_EXTERNAL, IFACE_MACS, IFACE_POD_PEER, IFACE_VIRTUAL, IFACES, MacKey,
};

use super::{
    features::TcMechanism,
    hooks,
    netdev::{self, Link, Netlink},
    owners::Owners,
    pins::{self, PinLayout},
};

/// The reply program on pods' interfaces, the `IFACES` flags, and who owns
/// each pod address (`OWNERS`).
pub struct PodLinks {
    flags: HashMap<MapData, u32, u32>,
    macs: HashMap<MapData, u32, MacKey>,
    owners: Owners,
    netlink: Netlink,
    layout: PinLayout,
    external: BTreeSet<String>,
    cluster: BTreeSet<String>,
    /// `false` with `--pod-iface-reply off`: no reply programs, no peer redirects.
    enabled: bool,
    /// Interfaces whose pinned link runs this agent's program, by index.
    /// Links a previous agent pinned are not in it, so the first scan swaps
    /// ours into them (atomically) and an upgrade reaches pods too.
    attached: BTreeSet<u32>,
    /// Interfaces that refused the program; tried again only if they come
    /// back under a new index, so a refusal is logged once.
    refused: BTreeSet<u32>,
    /// How the reply program is attached (tcx, or clsact without it).
    pub tc: TcMechanism,
}

impl PodLinks {
    /// Takes the `IFACES` map out of the loaded object.
    /// `external` and `cluster` interfaces are never pods' ends, whatever
    /// their kind (a test bed's links between nodes are veths too).
    pub fn new(
        ebpf: &mut Ebpf,
        netlink: Netlink,
        layout: &PinLayout,
        external: &[String],
        cluster: &[String],
        enabled: bool,
        ipv6: bool,
    ) -> anyhow::Result<Self> {
        let map = ebpf
            .take_map(IFACES)
            .ok_or_else(|| anyhow!("the eBPF object has no map {IFACES}; rebuild ssh-fwd"))?;
        let macs = ebpf
            .take_map(IFACE_MACS)
            .ok_or_else(|| anyhow!("the eBPF object has no map {IFACE_MACS}; rebuild ssh-fwd"))?;
        Ok(Self {
            flags: HashMap::try_from(map).context(IFACES)?,
            macs: HashMap::try_from(macs).context(IFACE_MACS)?,
            owners: Owners::new(ebpf, ipv6)?,
            netlink,
            attached: BTreeSet::new(),
            layout: layout.clone(),
            external: external.iter().cloned().collect(),
            cluster: cluster.iter().cloned().collect(),
            enabled,
            refused: BTreeSet::new(),
            tc: TcMechanism::Tcx,
        })
    }

    /// Before any program of this agent runs (the maps are new, or a
    /// previous version's, when a node upgrades): the external and cluster
    /// interfaces get their flags, added to what is there (the checks of a
    /// client's segment depend on them), and `OWNERS` says whose each pod
    /// address is (a reply program that runs before its pod's address is
    /// known leaves the pod's replies unrestored, and the client resets
    /// the connection). The first [`Self::sync`] then makes the flags
    /// exact.
    pub async fn prime(&mut self, links: &[Link]) -> anyhow::Result<()> {
        for (index, flags) in desired_flags(links, &self.external, &self.cluster, &BTreeSet::new())
        {
            let had = self.flags.get(&index, 0).unwrap_or(0);
            self.flags
                .insert(index, had | flags, 0)
                .with_context(|| format!("writing {IFACES}"))?;
        }
        let not_pods: BTreeSet<String> = self.external.union(&self.cluster).cloned().collect();
        self.write_macs(&desired_macs(links, &not_pods))?;
        self.owners.sync(links, &not_pods).await?;
        Ok(())
    }

    /// One scan: attach to new pod interfaces, drop pins of vanished ones,
    /// and write the interface flags. Returns the pins that had been
    /// deleted behind the agent's back and were attached and pinned again
    /// (a link lives only as long as its pin).
    pub async fn sync(&mut self, ebpf: &mut Ebpf) -> anyhow::Result<Vec<PathBuf>> {
        let links = self.netlink.links().await?;
        let not_pods: BTreeSet<String> = self.external.union(&self.cluster).cloned().collect();
        let pods = if self.enabled {
            netdev::pod_ends(&links, &not_pods)
        } else {
            BTreeMap::new()
        };
        // The pins, ours or a previous agent's, say what is attached.
        for index in self.layout.pod_links() {
            if !pods.contains_key(&index) {
                let pin = self.pin(index);
                std::fs::remove_file(&pin)
                    .or_else(ignore_missing)
                    .with_context(|| format!("removing pinned link {}", pin.display()))?;
                self.attached.remove(&index);
                tracing::debug!(index, "pod interface gone; link removed");
            }
        }
        self.write_macs(&desired_macs(&links, &not_pods))?;
        self.attached.retain(|index| pods.contains_key(index));
        self.refused.retain(|index| pods.contains_key(index));
        // Owners first, whatever --pod-iface-reply says: a reply program that
        // runs before its pod's address is known leaves the pod's replies
        // unrestored, and its client resets the connection.
        self.owners.sync(&links, &not_pods).await?;
        let mut restored = Vec::new();
        for (&index, name) in &pods {
            let pin = self.pin(index);
            let lost = self.attached.contains(&index) && !pin.exists();
            if (self.attached.contains(&index) && !lost) || self.refused.contains(&index) {
                continue;
            }
            let attached = pins::create_pin_dir(&self.layout, &self.layout.pod_links_dir())
                .and_then(|()| hooks::attach_reply(ebpf, &pin, name, self.tc));
            match attached {
                Ok(()) if lost => restored.push(pin),
                Ok(()) => {
                    tracing::info!(
                        iface = name,
                        index,
                        "reply program attached to pod interface"
                    );
                    self.attached.insert(index);
                }
                Err(e) => {
                    tracing::warn!(
                        iface = name,
                        index,
                        error = format!("{e:#}"),
                        "cannot attach the reply program to this pod interface; its replies \
                         take the egress path"
                    );
                    self.attached.remove(&index);
                    self.refused.insert(index);
                }
            }
        }
        let peer_ok = self.peer_ok(&links, &pods).await?;
        self.write_flags(&desired_flags(
            &links,
            &self.external,
            &self.cluster,
            &peer_ok,
        ))?;
        Ok(restored)
    }

    /// The pod interfaces a request may be handed to directly.
    async fn peer_ok(
        &self,
        links: &[Link],
        pods: &BTreeMap<u32, String>,
    ) -> anyhow::Result<BTreeSet<u32>> {
        if pods.is_empty() {
            return Ok(BTreeSet::new());
        }
        let queued = self.netlink.with_qdisc().await?;
        Ok(links
            .iter()
            .filter(|l| pods.contains_key(&l.index))
            .filter(|l| {
                // An interface that vanished meanwhile has no programs: it
                // is gone from the route too, so the flag is never used.
                let programs = SchedClassifier::query_tcx(&l.name, TcAttachType::Egress)
                    .map_or(0, |(_, p)| p.len());
                netdev::peer_redirect_allowed(l, queued.contains(&l.index), programs)
            })
            .map(|l| l.index)
            .collect())
    }

    fn pin(&self, index: u32) -> PathBuf {
        self.layout.pod_links_dir().join(index.to_string())
    }

    /// Makes `IFACE_MACS` hold exactly `desired`.
    fn write_macs(&mut self, desired: &BTreeMap<u32, [u8; 6]>) -> anyhow::Result<()> {
        let current: BTreeMap<u32, MacKey> = self
            .macs
            .iter()
            .collect::<Result<_, _>>()
            .context("reading IFACE_MACS")?;
        for (index, mac) in desired {
            if current.get(index).map(|m| m.mac) != Some(*mac) {
                self.macs
                    .insert(index, MacKey::new(*mac), 0)
                    .with_context(|| format!("writing IFACE_MACS[{index}]"))?;
            }
        }
        for index in current.keys().filter(|i| !desired.contains_key(i)) {
            self.macs
                .remove(index)
                .or_else(|e| match e {
                    aya::maps::MapError::KeyNotFound => Ok(()),
                    e => Err(e),
                })
                .with_context(|| format!("removing IFACE_MACS[{index}]"))?;
        }
        Ok(())
    }

    /// Makes `IFACES` hold exactly `desired`: new flags first, then removals.
    fn write_flags(&mut self, desired: &BTreeMap<u32, u32>) -> anyhow::Result<()> {
        let current: BTreeMap<u32, u32> = self
            .flags
            .iter()
            .collect::<Result<_, _>>()
            .context("reading IFACES")?;
        for (index, flags) in desired {
            if current.get(index) != Some(flags) {
                self.flags
                    .insert(index, flags, 0)
                    .with_context(|| format!("writing IFACES[{index}]"))?;
            }
        }
        for index in current.keys().filter(|i| !desired.contains_key(i)) {
            self.flags
                .remove(index)
                .or_else(|e| match e {
                    aya::maps::MapError::KeyNotFound => Ok(()),
                    e => Err(e),
                })
                .with_context(|| format!("removing IFACES[{index}]"))?;
        }
        Ok(())
    }
}

/// The MACs of the external and cluster interfaces (`ours`) that have
/// one, by index: only frames for them are translated.
pub fn desired_macs(links: &[Link], ours: &BTreeSet<String>) -> BTreeMap<u32, [u8; 6]> {
    links
        .iter()
        .filter(|l| ours.contains(&l.name))
        .filter_map(|l| Some((l.index, l.mac?)))
        .collect()
}

/// The flags the kernel programs should see: external and cluster
/// interfaces by name (both, for one that is both), software devices among
/// them, and the pods' interfaces that may take a peer redirect.
pub fn desired_flags(
    links: &[Link],
    external: &BTreeSet<String>,
    cluster: &BTreeSet<String>,
    peer_ok: &BTreeSet<u32>,
) -> BTreeMap<u32, u32> {
    let mut flags: BTreeMap<u32, u32> = BTreeMap::new();
    for link in links {
        let mut f = 0;
        if external.contains(&link.name) {
            f |= IFACE_EXTERNAL;
        }
        if cluster.contains(&link.name) {
            f |= IFACE_CLUSTER;
        }
        if f != 0 && link.software {
            f |= IFACE_VIRTUAL;
        }
        if peer_ok.contains(&link.index) {
            f |= IFACE_POD_PEER;
        }
        if f != 0 {
            flags.insert(link.index, f);
        }
    }
    flags
}

fn ignore_missing(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::netdev::Kind;

    #[test]
    fn only_external_and_cluster_interfaces_with_a_mac_have_one_written() {
        let mac = |b| Some([0x02, 0, 0, 0, 0, b]);
        let links = [
            Link {
                index: 2,
                name: "eth0".into(),
                mac: mac(2),
                ..Link::default()
            },
            Link {
                index: 3,
                name: "wg0".into(),
                mac: None,
                ..Link::default()
            },
            Link {
                index: 9,
                name: "veth9".into(),
                mac: mac(9),
                ..Link::default()
            },
        ];
        let ours = BTreeSet::from(["eth0".to_owned(), "wg0".to_owned()]);
        assert_eq!(
            desired_macs(&links, &ours),
            BTreeMap::from([(2, [0x02, 0, 0, 0, 0, 2])]),
            "a device without a MAC translates every unicast frame; a pod's is not ours"
        );
    }

    #[test]
    fn external_interfaces_and_pods_get_their_flags_and_nothing_else_does() {
        let links = [
            Link {
                index: 1,
                name: "lo".into(),
                ..Link::default()
            },
            Link {
                index: 2,
                name: "eth0".into(),
                ..Link::default()
            },
            Link {
                index: 9,
                name: "veth9".into(),
                kind: Kind::Veth,
                peer_elsewhere: true,
                software: true,
                ..Link::default()
            },
        ];
        let external = BTreeSet::from(["eth0".to_owned(), "eth1-absent".to_owned()]);
        let none = BTreeSet::new();
        assert_eq!(
            desired_flags(&links, &external, &none, &BTreeSet::from([9])),
            BTreeMap::from([(2, IFACE_EXTERNAL), (9, IFACE_POD_PEER)])
        );
        assert_eq!(
            desired_flags(&links, &external, &none, &BTreeSet::new()),
            BTreeMap::from([(2, IFACE_EXTERNAL)]),
            "--pod-iface-reply off: only the external interfaces"
        );
        let cluster = BTreeSet::from(["veth9".to_owned()]);
        assert_eq!(
            desired_flags(&links, &external, &cluster, &BTreeSet::new()),
            BTreeMap::from([(2, IFACE_EXTERNAL), (9, IFACE_CLUSTER | IFACE_VIRTUAL)]),
            "a cluster interface is flagged as such, and as a software device"
        );
        // One NIC that is both the external interface and the way to the
        // other nodes keeps both flags.
        let both = BTreeSet::from(["eth0".to_owned()]);
        assert_eq!(
            desired_flags(&links, &both, &both, &BTreeSet::new()),
            BTreeMap::from([(2, IFACE_EXTERNAL | IFACE_CLUSTER)])
        );
    }
}
