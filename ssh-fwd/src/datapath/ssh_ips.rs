//! `SSH_IPS` and `SSH_IPS6`: the addresses that expose only their mapped
//! ports (a packet to one that no mapping translated is dropped, see
//! `ssh_fwd_common::exposure`). They hold every `--ssh-ip` from the start,
//! before any program is attached, and every frontend's address: added
//! before its frontends go live, removed after they are gone.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use ssh_fwd_common::maps::{Addr6, SSH_IPS, SSH_IPS6};

/// The SSH IPs as the programs see them.
pub struct SshIps {
    v4: HashMap<MapData, u32, u32>,
    v6: HashMap<MapData, Addr6, u32>,
    /// `--ssh-ip`: kept whatever the mappings.
    declared: BTreeSet<IpAddr>,
    /// What the maps hold.
    current: BTreeSet<IpAddr>,
}

/// What the maps should hold: the declared SSH IPs and `frontends`'
/// addresses.
pub fn desired(
    declared: &BTreeSet<IpAddr>,
    frontends: impl IntoIterator<Item = IpAddr>,
) -> BTreeSet<IpAddr> {
    declared.iter().copied().chain(frontends).collect()
}

impl SshIps {
    /// Takes the maps out of the loaded object and writes the declared SSH
    /// IPs (those of a previous agent's mappings stay until the first
    /// reconcile says otherwise).
    pub fn from_ebpf(ebpf: &mut Ebpf, declared: &[IpAddr]) -> anyhow::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow!("the eBPF object has no map {name}; rebuild ssh-fwd"))
        };
        let v4 = HashMap::try_from(take(SSH_IPS)?).context(SSH_IPS)?;
        let v6 = HashMap::try_from(take(SSH_IPS6)?).context(SSH_IPS6)?;
        let mut current: BTreeSet<IpAddr> = BTreeSet::new();
        for key in v4.keys() {
            let key: u32 = key.with_context(|| format!("reading {SSH_IPS}"))?;
            current.insert(IpAddr::V4(Ipv4Addr::from(key.to_ne_bytes())));
        }
        for key in v6.keys() {
            let key: Addr6 = key.with_context(|| format!("reading {SSH_IPS6}"))?;
            current.insert(IpAddr::V6(Ipv6Addr::from(key.octets())));
        }
        let mut this = Self {
            v4,
            v6,
            declared: declared.iter().copied().collect(),
            current,
        };
        this.widen(std::iter::empty())?;
        Ok(this)
    }

    /// Adds the declared SSH IPs and `frontends`' addresses the maps lack:
    /// before a plan makes those frontends live.
    pub fn widen(&mut self, frontends: impl IntoIterator<Item = IpAddr>) -> anyhow::Result<()> {
        for ip in desired(&self.declared, frontends) {
            if !self.current.contains(&ip) {
                self.insert(ip)?;
            }
        }
        Ok(())
    }

    /// Makes the maps hold exactly the declared SSH IPs and `frontends`'
    /// addresses: after a plan took frontends down.
    pub fn sync(&mut self, frontends: impl IntoIterator<Item = IpAddr>) -> anyhow::Result<()> {
        let want = desired(&self.declared, frontends);
        for ip in &want {
            if !self.current.contains(ip) {
                self.insert(*ip)?;
            }
        }
        let gone: Vec<IpAddr> = self.current.difference(&want).copied().collect();
        for ip in gone {
            let removed = match ip {
                IpAddr::V4(v4) => self.v4.remove(&u32::from_ne_bytes(v4.octets())),
                IpAddr::V6(v6) => self.v6.remove(&Addr6::new(v6)),
            };
            removed
                .or_else(|e| match e {
                    aya::maps::MapError::KeyNotFound => Ok(()),
                    e => Err(e),
                })
                .with_context(|| format!("removing SSH IP {ip} from {SSH_IPS}"))?;
            self.current.remove(&ip);
            tracing::info!(ssh_ip = %ip, "no longer an SSH IP: no mapping is on it");
        }
        Ok(())
    }

    fn insert(&mut self, ip: IpAddr) -> anyhow::Result<()> {
        match ip {
            IpAddr::V4(v4) => self.v4.insert(u32::from_ne_bytes(v4.octets()), 0, 0),
            IpAddr::V6(v6) => self.v6.insert(Addr6::new(v6), 0, 0),
        }
        .with_context(|| {
            format!(
                "writing SSH IP {ip} into {SSH_IPS} (full? it holds every --ssh-ip and frontend \
                 address; put the frontends on fewer addresses)"
            )
        })?;
        self.current.insert(ip);
        tracing::debug!(ssh_ip = %ip, "SSH IP closed to all but its mapped ports");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_ssh_ips_stay_and_frontends_add_theirs() {
        let declared: BTreeSet<IpAddr> = ["198.18.0.10".parse().unwrap()].into();
        let frontends = [
            "198.18.0.10".parse().unwrap(),
            "198.18.0.11".parse().unwrap(),
            "fd00::10".parse().unwrap(),
        ];
        assert_eq!(
            desired(&declared, frontends),
            BTreeSet::from(frontends.map(|ip: IpAddr| ip))
        );
        assert_eq!(desired(&declared, []), declared);
    }
}
