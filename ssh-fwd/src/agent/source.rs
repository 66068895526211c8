//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    time::Instant,
};

pub mod events;
mod kubernetes;
mod mappings_file;

use anyhow::Context as _;

use super::{
    args::AgentArgs,
    audit::{Directory, Label},
    cross_node_check::CrossNodeCheck,
    metrics::AgentMetrics,
};
use crate::{
    datapath::netdev::{self, Netlink},
    mapping::{Family, Mapping, MappingSet, guard::Defaults},
    source::validate::Rules,
};

/// What the source asks of the reconciler.
pub enum Next {
    Apply(Change),
    /// The source was rejected whole (a bad file): counted as a reconcile
    /// error; the running mappings stay.
    Rejected(String),
}

/// A new desired state to apply: the source's [`Source::desired`] now.
pub struct Change {
    pub why: &'static str,
    /// When the source changed, for the change-to-map delay.
    pub since: Instant,
    /// The frontends whose mapping changed since the previous change, when
    /// the source knows (`None`: any may have), so that the reconciler
    /// plans only those.
    pub touched: Option<BTreeSet<SocketAddr>>,
}

impl Change {
    /// A change that may touch any mapping.
    pub fn whole(why: &'static str, since: Instant) -> Self {
        Self {
            why,
            since,
            touched: None,
        }
    }
}

pub enum Source {
    File(Box<FileSource>),
    Kubernetes(Box<KubeFollower>),
}

impl Source {
    /// Validates the source before anything touches the kernel: a bad file
    /// or flag at start-up is an error, and whatever a previous agent
    /// installed keeps forwarding.
    pub async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        match &args.mappings {
            Some(path) => Ok(Self::File(Box::new(
                FileSource::open(path.clone(), args).await?,
            ))),
            None => Ok(Self::Kubernetes(Box::new(
                KubeFollower::open(args, metrics).await?,
            ))),
        }
    }

    /// The Kubernetes client, in Kubernetes mode.
    pub fn kube_client(&self) -> Option<kube::Client> {
        match self {
            Self::File(_) => None,
            Self::Kubernetes(k) => Some(k.client.clone()),
        }
    }

    /// A line for logs and `ssh-fwd status`.
    pub fn describe(&self) -> String {
        match self {
            Self::File(f) => format!("file {}", f.path.display()),
            Self::Kubernetes(k) => format!("kubernetes, selector {}", k.selector),
        }
    }

    /// Checks the mappings file's backends against `check` now, and at
    /// every later load; a refusal now is the agent's start-up error.
    pub async fn check_cross_node(&mut self, check: Option<CrossNodeCheck>) -> anyhow::Result<()> {
        let Self::File(f) = self else {
            return Ok(());
        };
        if let Some(check) = &check {
            check
                .check(&f.applied)
                .await
                .with_context(|| format!("{}", f.path.display()))?;
        }
        f.cross_node = check;
        Ok(())
    }

    /// Whether this node serves IPv6, which sizes its IPv6 tables: with an
    /// IPv6 `--ssh-ip`, or, for a mappings file without `--ssh-ip`, with an
    /// IPv6 mapping in it at start. From then on a file's IPv6 mapping is
    /// refused where IPv6 is off (Services of addresses not on `--ssh-ip`
    /// are ignored anyway).
    pub fn serves_ipv6(&mut self, ssh_ips: &[IpAddr]) -> bool {
        let by_flag = ssh_ips.iter().any(IpAddr::is_ipv6);
        match self {
            Self::Kubernetes(_) => by_flag,
            Self::File(f) => {
                f.ipv6 = by_flag
                    || (ssh_ips.is_empty() && f.applied.iter().any(|m| m.family() == Family::V6));
                f.ipv6
            }
        }
    }

    /// The desired state to apply at start-up, if it is known already.
    pub fn initial(&mut self) -> Option<Change> {
        match self {
            Self::File(_) => Some(Change::whole("start-up", Instant::now())),
            Self::Kubernetes(_) => None,
        }
    }

    /// The desired mappings as the source has them now (the last accepted
    /// file).
    pub fn desired(&self) -> &MappingSet {
        match self {
            Self::File(f) => &f.applied,
            Self::Kubernetes(k) => k.source.mappings(),
        }
    }

    /// What the connection log names each desired frontend's connections
    /// by: the mapping, and in Kubernetes mode its Service and pod.
    pub fn directory(&self) -> Directory {
        let label = |m: &Mapping| -> Label {
            let (service, pod) = match self {
                Self::File(_) => (None, None),
                Self::Kubernetes(k) => k.source.owner_of(m.frontend, m.backend.ip()),
            };
            // The Service's and the pod's names are the source's own.
            Label {
                mapping: m.name.clone(),
                service: service.cloned(),
                pod: pod.cloned(),
            }
        };
        self.desired()
            .iter()
            .map(|m| (m.frontend, label(m)))
            .collect()
    }

    /// Waits for the next change. Cancel-safe: a change noticed but not
    /// returned is returned by the next call. Fails only if the watchers
    /// are gone, which ends the agent.
    pub async fn next(&mut self) -> anyhow::Result<Next> {
        match self {
            Self::File(f) => Ok(f.next().await),
            Self::Kubernetes(k) => k.next().await.map(Next::Apply),
        }
    }

    /// The current desired state, for a resync or a SIGHUP; `None` while
    /// it is not known (the first Kubernetes lists are not complete).
    pub fn current(&mut self) -> Option<&MappingSet> {
        match self {
            Self::File(f) => Some(&f.applied),
            Self::Kubernetes(k) => k.current(),
        }
    }

    /// SIGHUP: the file is read again at once; in Kubernetes mode, the
    /// caches are recomputed once they are complete.
    pub async fn reload(&mut self) -> Option<Next> {
        match self {
            Self::File(f) => {
                f.pending = None;
                let text = Snapshot::read(&f.path);
                let next = f.reload("SIGHUP", Instant::now(), &text).await;
                f.last_text = text;
                Some(next)
            }
            Self::Kubernetes(k) => k
                .current()
                .map(|_| Next::Apply(Change::whole("SIGHUP", Instant::now()))),
        }
    }

    /// Reads the node's addresses again (at each resync, and when they
    /// change): in Kubernetes mode no backend may be on one, including one
    /// the node gained since start-up; a change of the mappings comes from
    /// [`Source::next`]. The file is checked against them at each load.
    pub async fn refresh_node_addrs(&mut self) {
        if let Self::Kubernetes(k) = self {
            k.refresh_node_addrs().await;
        }
    }
}

pub use kubernetes::KubeFollower;
pub use mappings_file::FileSource;
use mappings_file::Snapshot;

/// The rules mappings are checked against now: `--ssh-ip` and the node's
/// addresses (read again each time: an address may come or go).
async fn node_rules(ssh_ips: &BTreeSet<IpAddr>, guard: &Defaults) -> anyhow::Result<Rules> {
    let (links, addrs) = links_and_addresses().await?;
    Ok(Rules {
        ssh_ips: ssh_ips.clone(),
        node_addrs: netdev::own_addresses(&links, &addrs),
        all_node_addrs: named_addresses(&links, &addrs),
        guard: guard.clone(),
    })
}

/// Every address of the node, with its interface, as it is now: where no
/// endpoint may be (a hostNetwork pod's).
async fn node_addrs() -> anyhow::Result<BTreeMap<IpAddr, String>> {
    let (links, addrs) = links_and_addresses().await?;
    Ok(named_addresses(&links, &addrs))
}

async fn links_and_addresses() -> anyhow::Result<(Vec<netdev::Link>, Vec<(u32, IpAddr)>)> {
    let netlink = Netlink::open()?;
    Ok((netlink.links().await?, netlink.addresses().await?))
}

fn named_addresses(links: &[netdev::Link], addrs: &[(u32, IpAddr)]) -> BTreeMap<IpAddr, String> {
    let names: BTreeMap<u32, &str> = links.iter().map(|l| (l.index, l.name.as_str())).collect();
    addrs
        .iter()
        .filter_map(|(index, ip)| Some((*ip, (*names.get(index)?).to_owned())))
        .collect()
}

#[cfg(test)]
mod tests;
