//! Following the source of desired state: the mappings file, polled for
//! changes (which also catches ConfigMap symlink swaps that inotify misses),
//! or the Kubernetes caches, once their first lists are complete.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::{Duration, Instant},
};

pub mod events;

use anyhow::{Context as _, bail};
use tokio::time::{Interval, MissedTickBehavior, interval};

use super::{
    args::AgentArgs,
    audit::{Directory, Label},
    cross_node_check::CrossNodeCheck,
    metrics::AgentMetrics,
};
use crate::{
    datapath::netdev::{self, Netlink},
    k8s,
    mapping::{Family, Mapping, MappingSet, guard::Defaults, printable},
    source::{
        file,
        kubernetes::{
            desired::{Note, Policy},
            watch::KubeSource,
        },
        validate::Rules,
    },
    vocabulary,
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

/// The mappings file.
pub struct FileSource {
    path: PathBuf,
    /// `--ssh-ip`: when empty, frontends are checked against the node's
    /// own addresses instead, read again at every load.
    ssh_ips: BTreeSet<IpAddr>,
    /// `--max-mappings`: a file listing more is refused.
    capacity: usize,
    /// `--allow`, `--syn-rate`...: what entries that say nothing get.
    guard: Defaults,
    /// The last accepted content: even if applying it fails, the resync
    /// retries this, not an older file.
    applied: MappingSet,
    /// The content last loaded (accepted or rejected).
    last_text: Snapshot,
    /// Backends whose node would ignore the frontend option, refused at
    /// each load once the external interfaces are known.
    cross_node: Option<CrossNodeCheck>,
    /// Whether the data path was made to serve IPv6 ([`Source::serves_ipv6`]);
    /// without it, an IPv6 mapping is refused at each load.
    ipv6: bool,
    /// A change seen and when, waiting to stay the same for `settle`.
    pending: Option<(Snapshot, Instant)>,
    settle: Duration,
    poll: Interval,
}

/// One read of the mappings file: its bytes, or why it could not be read.
/// What is parsed is always a snapshot compared before, never a read of
/// its own (the file may have changed in between).
#[derive(Debug)]
struct Snapshot(std::io::Result<Vec<u8>>);

impl Snapshot {
    fn read(path: &std::path::Path) -> Self {
        Self(std::fs::read(path))
    }

    #[cfg(test)]
    fn bytes(&self) -> Option<&[u8]> {
        self.0.as_deref().ok()
    }
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a.kind() == b.kind(),
            _ => false,
        }
    }
}

impl FileSource {
    async fn open(path: PathBuf, args: &AgentArgs) -> anyhow::Result<Self> {
        let last_text = Snapshot::read(&path);
        let mut source = Self {
            path,
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            capacity: args.max_mappings as usize,
            guard: args.guard.defaults(),
            applied: MappingSet::default(),
            last_text,
            cross_node: None,
            ipv6: true,
            pending: None,
            settle: args.settle_interval,
            poll: interval(args.watch_interval),
        };
        source
            .poll
            .set_missed_tick_behavior(MissedTickBehavior::Skip);
        source.applied = source.load(&source.last_text).await?;
        tracing::info!(file = %source.path.display(), mappings = source.applied.len(), "watching the mappings file");
        Ok(source)
    }

    /// Checks `text`, as read from the file, against the rules of this
    /// moment.
    async fn load(&self, text: &Snapshot) -> anyhow::Result<MappingSet> {
        let rules = node_rules(&self.ssh_ips, &self.guard).await?;
        let read = text.0.as_deref().map_err(file::clone_io);
        let set = file::parse_read(read, &self.path, &rules, self.capacity)?;
        if !self.ipv6
            && let Some(m) = set.iter().find(|m| m.family() == Family::V6)
        {
            bail!(
                "{}: mapping {} has the IPv6 frontend {}, but this agent started without IPv6                  (no IPv6 --ssh-ip, and no IPv6 mapping in the file at start), so its IPv6                  tables hold nothing; restart the agent to make them (open sessions are kept),                  or give it an IPv6 --ssh-ip",
                self.path.display(),
                m.name,
                m.frontend
            );
        }
        if let Some(check) = &self.cross_node {
            check
                .check(&set)
                .await
                .with_context(|| format!("{}", self.path.display()))?;
        }
        Ok(set)
    }

    /// The next change, once it has stayed the same across the settle
    /// interval: a file rewritten in place is read only when its writer
    /// paused, never half-written, and what is applied is the very text
    /// that stayed the same. Cancel-safe: the change seen is kept.
    async fn next(&mut self) -> Next {
        loop {
            let Some(since) = self.pending.as_ref().map(|(_, since)| *since) else {
                self.poll.tick().await;
                let text = Snapshot::read(&self.path);
                if text != self.last_text {
                    self.pending = Some((text, Instant::now()));
                }
                continue;
            };
            tokio::time::sleep_until((since + self.settle).into()).await;
            let text = Snapshot::read(&self.path);
            if text == self.last_text {
                self.pending = None;
            } else if self.pending.as_ref().is_none_or(|(seen, _)| text != *seen) {
                // Still being written: wait for it to stay put.
                self.pending = Some((text, Instant::now()));
            } else {
                let next = self.reload("file changed", since, &text).await;
                self.pending = None;
                self.last_text = text;
                return next;
            }
        }
    }

    /// Loads `text` (read at a change, or on SIGHUP, which is read at once:
    /// the operator says it is complete).
    async fn reload(&mut self, why: &'static str, since: Instant, text: &Snapshot) -> Next {
        match self.load(text).await {
            Ok(desired) => {
                if desired.is_empty() {
                    tracing::warn!(
                        "the mappings file lists no mappings: every frontend port closes"
                    );
                }
                self.applied = desired;
                Next::Apply(Change::whole(why, since))
            }
            Err(e) => Next::Rejected(format!(
                "{e:#}; the running mappings stay as they are until it is fixed"
            )),
        }
    }
}

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

/// The Kubernetes watches and the desired state they keep.
pub struct KubeFollower {
    source: KubeSource,
    /// For the agent's other calls (the cross-node key's Secret).
    client: kube::Client,
    selector: String,
    /// A change was returned already (the first is the complete lists).
    started: bool,
    metrics: AgentMetrics,
    /// Events on the Services skipped or served in part.
    events: events::Events,
}

impl KubeFollower {
    async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        let api = k8s::client::open(args.kubeconfig.as_deref()).await?;
        k8s::selector_check::check(&api.client, &args.selector)
            .await
            .with_context(|| format!("Kubernetes API server {}", api.server))?;
        let policy = Policy {
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            ports: args.port_range.clone(),
            styles: args.styles(),
            capacity: args.max_mappings as usize,
            guard: args.guard.defaults(),
        };
        if policy.styles.external_ips {
            tracing::warn!(
                "--honour-styles honours externalips: any Service with the SSH IP in spec.externalIPs takes the ports it lists that the controller granted to nobody, forwarded to whatever its selector finds; everyone who may write a Service in any namespace is trusted with the SSH IP. Leave externalips out unless that is so"
            );
        }
        // The node's addresses, where no endpoint may be (a hostNetwork
        // pod's): read again at each resync and when they change.
        let client = api.client.clone();
        let source = KubeSource::start(
            api.client,
            &args.selector,
            policy,
            node_addrs().await?,
            &metrics.api_errors,
        );
        tracing::info!(
            selector = args.selector,
            "waiting for complete lists of Services and EndpointSlices; until then the maps stay as they are"
        );
        let node = args
            .node_name
            .clone()
            .unwrap_or_else(|| vocabulary::AGENT.to_owned());
        Ok(Self {
            source,
            events: events::Events::start(client.clone(), node),
            client,
            selector: args.selector.clone(),
            started: false,
            metrics: metrics.clone(),
        })
    }

    /// The next change: no delay on a quiet system; whatever arrived while
    /// the last change was being written comes as one.
    async fn next(&mut self) -> anyhow::Result<Change> {
        // The watchers retry API errors themselves; this fails only if they
        // stopped.
        let (since, touched) = self.source.changed().await?;
        self.report();
        let why = if self.started {
            "cluster changed"
        } else {
            "first complete list"
        };
        self.started = true;
        Ok(Change {
            why,
            since,
            touched,
        })
    }

    /// Checks backends against the node's addresses as they are now; a
    /// failed read keeps the last ones.
    async fn refresh_node_addrs(&mut self) {
        match node_addrs().await {
            Ok(addrs) => {
                self.source.set_node_addrs(addrs);
                self.report();
            }
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot read the node's addresses; checking endpoints against the last ones read"
            ),
        }
    }

    /// The current desired state, checked against a full recompute.
    fn current(&mut self) -> Option<&MappingSet> {
        if !self.source.is_ready() {
            return None;
        }
        if let Err(drift) = self.source.check() {
            tracing::error!(
                differing = drift.differing,
                "the incremental desired state differed from a full recompute; rebuilt it (please report this bug)"
            );
        }
        self.report();
        Some(self.source.mappings())
    }

    /// Logs the notes raised and sets the gauges of Services skipped and
    /// mappings left out.
    fn report(&mut self) {
        let notes = self.source.take_notes();
        report(&notes);
        for note in &notes {
            self.events.note(note);
        }
        let invalid = i64::try_from(self.source.invalid_services()).unwrap_or(i64::MAX);
        let left_out = i64::try_from(self.source.left_out()).unwrap_or(i64::MAX);
        self.metrics.invalid_services.set(invalid);
        self.metrics.mappings_left_out.set(left_out);
    }
}

/// Logs notes as they are raised (each once while it holds): conflicts,
/// ambiguities and refusals as warnings, ignored Services at debug level.
fn report(notes: &[Note]) {
    for note in notes {
        match note {
            Note::Conflict {
                frontend,
                winner,
                loser,
            } => {
                tracing::warn!(%frontend, winner, loser, "two Services claim one frontend; the older one owns it, ready or not")
            }
            Note::ManyReadyEndpoints {
                service,
                chosen,
                ready,
            } => {
                tracing::warn!(service, %chosen, ready, "Service has several ready endpoints; an SSH Service should select one pod")
            }
            Note::NoReadyEndpoint { service } => tracing::info!(
                service,
                "no ready endpoint; its port stays closed until one is ready"
            ),
            Note::NoEndpointOfFamily { service, family } => tracing::warn!(
                service,
                %family,
                "Service exposes an address of this family but has endpoints only of the other; its ports there stay closed: make it dual-stack (spec.ipFamilyPolicy: PreferDualStack, or ipFamilies listing both) or drop the address"
            ),
            Note::NodePortsAllocated { service } => tracing::warn!(
                service,
                class = vocabulary::LB_CLASS,
                "LoadBalancer Service of this class ignored: it lets Kubernetes open NodePorts on every node; set spec.allocateLoadBalancerNodePorts: false"
            ),
            Note::NotGranted {
                service,
                port: Some(port),
            } => tracing::warn!(
                service,
                port,
                "Service lists a port on the SSH IP that the controller did not grant it; that port stays closed to it (the controller puts its own Services back as it made them)"
            ),
            Note::NotGranted {
                service,
                port: None,
            } => tracing::info!(
                service,
                "Service has the SSH IP in its load-balancer status but no grant from the controller yet; its ports stay closed until the controller grants one"
            ),
            Note::StyleNotHonoured { service, style } => tracing::warn!(
                service,
                style,
                "Service ignored: --honour-styles does not honour this shape; add it to --honour-styles or change the Service"
            ),
            Note::Invalid { service, problem } => tracing::warn!(
                service = printable(service),
                problem,
                "Service skipped: it would break or hijack the node; the others apply"
            ),
            Note::OverCapacity { excess, left_out } => tracing::warn!(
                excess,
                left_out = printable(&left_out.join(", ")),
                "more mappings than this node holds (--max-mappings); the newest Services' are left out, the rest apply: raise --max-mappings (after `ssh-fwd teardown`) or narrow the port range"
            ),
            Note::Narrowed { service, cut } => tracing::warn!(
                service = printable(service),
                cut = printable(
                    &cut.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                "Service asks for more than the agent's --allow or --syn-rate admit: it gets those, narrowed, not what it asked; a Service may only narrow the operator's guard"
            ),
            other => tracing::debug!(note = ?other, "Service ignored"),
        }
    }
}

#[cfg(test)]
mod tests;
