//! Who may claim an SSH IP this node answers for, as the programs know
//! it: `AGENT_MACS`, the MACs other agents published with their Leases
//! (an entry flagged to yield gives way to them and to no other) and this
//! node's own; and what everyone else's claims came to, `ARP_FOREIGN` and
//! `NDP_FOREIGN`, read back. The agent decides the MACs; this only makes
//! the map hold them ([`plan`], pure) and reads the claims.

use std::{collections::BTreeMap, marker::PhantomData, net::IpAddr};

use anyhow::Context as _;
use aya::maps::{HashMap, MapData};
use ssh_fwd_common::maps::{AGENT_MACS, Foreign, MacKey};

use super::{AnnounceFamily, V4, V6, open};
use crate::datapath::pins::PinLayout;

/// MAC -> `MAC_OF_AGENT` or `MAC_OF_NODE`: what `AGENT_MACS` should hold.
pub type Macs = BTreeMap<[u8; 6], u32>;

/// The writes that make `installed` hold `desired`: entries to write (new,
/// or of another kind), and MACs to remove.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MacPlan {
    pub upserts: Vec<([u8; 6], u32)>,
    pub deletes: Vec<[u8; 6]>,
}

/// Pure: `installed` and `desired` to writes.
pub fn plan(installed: &Macs, desired: &Macs) -> MacPlan {
    MacPlan {
        upserts: desired
            .iter()
            .filter(|(mac, kind)| installed.get(*mac) != Some(*kind))
            .map(|(mac, kind)| (*mac, *kind))
            .collect(),
        deletes: installed
            .keys()
            .filter(|mac| !desired.contains_key(*mac))
            .copied()
            .collect(),
    }
}

/// `AGENT_MACS`, and what this agent last made it hold.
pub struct AgentMacs {
    map: HashMap<MapData, MacKey, u32>,
    /// `None` until the first write: the map may hold another agent's.
    written: Option<Macs>,
}

impl AgentMacs {
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Ok(Self {
            map: open(layout, AGENT_MACS)?,
            written: None,
        })
    }

    /// What the map holds now.
    pub fn installed(&self) -> anyhow::Result<Macs> {
        self.map
            .iter()
            .map(|entry| entry.map(|(key, kind)| (key.mac, kind)))
            .collect::<Result<_, _>>()
            .context("reading AGENT_MACS")
    }

    /// Makes the map hold `desired`; nothing to do when this agent's last
    /// write already did.
    pub fn set(&mut self, desired: &Macs) -> anyhow::Result<()> {
        if self.written.as_ref() == Some(desired) {
            return Ok(());
        }
        let plan = plan(&self.installed()?, desired);
        for (mac, kind) in &plan.upserts {
            self.map
                .insert(MacKey::new(*mac), kind, 0)
                .with_context(|| format!("writing {} into AGENT_MACS", super::mac_text(*mac)))?;
        }
        for mac in &plan.deletes {
            self.map
                .remove(&MacKey::new(*mac))
                .with_context(|| format!("removing {} from AGENT_MACS", super::mac_text(*mac)))?;
        }
        self.written = Some(desired.clone());
        Ok(())
    }
}

/// One family's foreign claims.
struct ForeignMap<F: AnnounceFamily> {
    map: HashMap<MapData, F::HeardKey, Foreign>,
    family: PhantomData<F>,
}

impl<F: AnnounceFamily> ForeignMap<F> {
    fn read(&self) -> anyhow::Result<BTreeMap<IpAddr, Foreign>> {
        self.map
            .iter()
            .map(|entry| entry.map(|(addr, claims)| (F::heard_ip(addr).into(), claims)))
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", F::FOREIGN))
    }
}

/// `ARP_FOREIGN` and `NDP_FOREIGN`.
pub struct ForeignClaims {
    v4: ForeignMap<V4>,
    v6: ForeignMap<V6>,
}

impl ForeignClaims {
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        Ok(Self {
            v4: ForeignMap {
                map: open(layout, V4::FOREIGN)?,
                family: PhantomData,
            },
            v6: ForeignMap {
                map: open(layout, V6::FOREIGN)?,
                family: PhantomData,
            },
        })
    }

    /// Each SSH IP of either family that a MAC no agent published claimed,
    /// with the count of such claims, the last one's MAC and its time.
    pub fn read(&self) -> anyhow::Result<BTreeMap<IpAddr, Foreign>> {
        let mut all = self.v4.read()?;
        all.extend(self.v6.read()?);
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::maps::{MAC_OF_AGENT, MAC_OF_NODE};

    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const C: [u8; 6] = [2, 0, 0, 0, 0, 3];

    #[test]
    fn macs_are_written_when_new_or_of_another_kind_and_removed_when_gone() {
        let installed = Macs::from([(A, MAC_OF_AGENT), (B, MAC_OF_AGENT)]);
        let desired = Macs::from([(B, MAC_OF_NODE), (C, MAC_OF_AGENT)]);
        assert_eq!(
            plan(&installed, &desired),
            MacPlan {
                upserts: vec![(B, MAC_OF_NODE), (C, MAC_OF_AGENT)],
                deletes: vec![A],
            }
        );
        assert_eq!(plan(&desired, &desired), MacPlan::default());
    }
}
