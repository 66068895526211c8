//! `--announce l2`: the SSH IPs this node answers ARP (IPv4) and neighbour
//! solicitations (IPv6) for, kept in the data path's `ANNOUNCE` and
//! `ANNOUNCE6` maps, and the gratuitous ARPs and unsolicited neighbour
//! advertisements that tell the segment when announcing starts. The
//! kernel programs answer; this task only decides what they answer for
//! ([`desired`], pure, one rule for both families) and sends the
//! announcements ([`Adverts`]).
//!
//! Without Kubernetes this node announces unconditionally on every
//! external interface that is up. The entries are pinned: an agent that
//! exits leaves them, and the data path keeps answering, as it keeps
//! forwarding.

mod adverts;
mod answers;
mod foreign;
mod holding;
mod lease_io;
mod lease_name;
mod lease_write;
pub mod leases;
mod macs;
mod node_lease;
mod routes;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use tokio::{
    sync::{mpsc, watch},
    time::{MissedTickBehavior, interval},
};

pub use adverts::Adverts;

use super::args::{AgentArgs, AnnounceMode};
use foreign::ForeignClaims;

use crate::datapath::{
    announce::{
        AnnounceAt, Announcements, Desired,
        claimants::{self, AgentMacs},
        mac_text,
    },
    neighbour::NeighbourSocket,
    netdev::{self, Link, Netlink},
    pins::PinLayout,
    status::unix_ms,
};

/// How often the interfaces are read again besides on link events.
const RESCAN: Duration = Duration::from_secs(5);

/// What `/metrics` shows of the announcements.
#[derive(Clone, Default)]
pub struct AnnounceMetrics {
    /// 1 for each SSH IP this agent announces with `--announce l2`,
    /// holder or standby: an SSH IP with a series here and no
    /// [`Self::announcing`] on any node is answered by none.
    pub configured: Family<SshIpLabel, Gauge>,
    /// 1 for each SSH IP this node answers ARP or neighbour solicitations
    /// for.
    pub announcing: Family<SshIpLabel, Gauge>,
    /// When this node began to answer for it (Unix seconds).
    pub since: Family<SshIpLabel, Gauge>,
    pub garps_sent: Counter,
    /// Unsolicited neighbour advertisements, the IPv6 twin of a
    /// gratuitous ARP.
    pub adverts_sent: Counter,
    pub garp_errors: Counter,
    /// Kubernetes mode: ARP probes sent to watch the holders of IPv4 SSH
    /// IPs.
    pub probes_sent: Counter,
    /// The IPv6 twin: neighbour solicitations.
    pub solicitations_sent: Counter,
    /// Kubernetes mode: SSH IPs this node took over.
    pub takeovers: Counter,
    /// Kubernetes mode: Lease writes and watches that failed.
    pub lease_errors: Counter,
    /// Claims of an SSH IP from a MAC no agent published, by family.
    pub foreign_claims: Family<FamilyLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SshIpLabel {
    pub ssh_ip: String,
}

/// An SSH IP's address family: `ipv4` or `ipv6`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub family: String,
}

impl FamilyLabel {
    pub fn of(ip: IpAddr) -> Self {
        let family = if ip.is_ipv4() { "ipv4" } else { "ipv6" };
        Self {
            family: family.to_owned(),
        }
    }
}

impl AnnounceMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "announce_configured",
            "1 for each SSH IP this agent announces (--announce l2), as holder or standby",
            self.configured.clone(),
        );
        r.register(
            "announcing",
            "1 for each SSH IP this node answers ARP or neighbour solicitations for (--announce l2)",
            self.announcing.clone(),
        );
        r.register(
            "announcing_since_timestamp_seconds",
            "When this node began to answer ARP or neighbour solicitations for the SSH IP (Unix time)",
            self.since.clone(),
        );
        r.register(
            "garps_sent",
            "Gratuitous ARP replies sent for the IPv4 SSH IPs this node announces",
            self.garps_sent.clone(),
        );
        r.register(
            "neighbour_adverts_sent",
            "Unsolicited neighbour advertisements sent for the IPv6 SSH IPs this node announces",
            self.adverts_sent.clone(),
        );
        r.register(
            "garp_errors",
            "Gratuitous ARP replies, neighbour advertisements, ARP probes and neighbour solicitations the kernel refused to send",
            self.garp_errors.clone(),
        );
        r.register(
            "announce_probes_sent",
            "ARP probes a standby sent to watch the data path of an IPv4 SSH IP's holder",
            self.probes_sent.clone(),
        );
        r.register(
            "announce_solicitations_sent",
            "Neighbour solicitations a standby sent to watch the data path of an IPv6 SSH IP's holder",
            self.solicitations_sent.clone(),
        );
        r.register(
            "announce_takeovers",
            "SSH IPs this node took over: their Lease taken, answering ARP or neighbour solicitations from then on (--announce l2 with --kubernetes)",
            self.takeovers.clone(),
        );
        r.register(
            "announce_lease_errors",
            "Failed writes and watches of the SSH IPs' Leases (each retried; a holder keeps answering meanwhile)",
            self.lease_errors.clone(),
        );
        // Both families from the start, so that a first claim is a rise.
        for ip in [IpAddr::from([0u8; 4]), IpAddr::from([0u8; 16])] {
            drop(self.foreign_claims.get_or_create(&FamilyLabel::of(ip)));
        }
        r.register(
            "announce_foreign_claims",
            "Claims of an SSH IP heard from a MAC no agent published (gratuitous ARPs, ARP replies, neighbour advertisements, answers to a standby's probes), by family: never given way to",
            self.foreign_claims.clone(),
        );
    }
}

/// The checks made before anything is touched: the flags agree, and no
/// SSH IP is an address of this node (the kernel would answer ARP or
/// neighbour solicitations for it and the node's own services would be
/// reachable on it). Opens the socket the gratuitous ARPs and neighbour
/// advertisements go out on, which needs `CAP_NET_RAW`.
pub async fn prepare(agent: &AgentArgs) -> anyhow::Result<Option<NeighbourSocket>> {
    super::args::check_announce(agent).map_err(anyhow::Error::msg)?;
    let (args, ssh_ips) = (&agent.announce, &agent.ssh_ips[..]);
    if args.announce != AnnounceMode::L2 {
        return Ok(None);
    }
    let netlink = Netlink::open()?;
    let links = netlink.links().await?;
    let addrs = netlink.addresses().await?;
    if let Some((ip, iface)) = on_interfaces(ssh_ips, &links, &addrs).into_iter().next() {
        bail!(
            "--announce l2: {ip} is an address of {iface} on this node; the data path answers \
             {} for an SSH IP that is on no interface (on one, the kernel answers for it too \
             and the node's own services become reachable on it): remove it (`{}`), or run \
             with --announce off",
            asks(ip),
            remove_command(ip, &iface)
        );
    }
    let socket = NeighbourSocket::open().context(
        "--announce l2 sends gratuitous ARPs and neighbour advertisements on a packet socket, \
         which needs CAP_NET_RAW: add NET_RAW to the agent's capabilities",
    )?;
    Ok(Some(socket))
}

/// What the data path answers for an SSH IP: `ARP` or `neighbour
/// solicitations`, for logs and errors.
pub fn asks(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "ARP",
        IpAddr::V6(_) => "neighbour solicitations",
    }
}

/// What a standby watches `ip`'s holder with: `ARP probe` or `neighbour
/// solicitation`, for logs.
pub fn probe(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "ARP probe",
        IpAddr::V6(_) => "neighbour solicitation",
    }
}

/// The command that takes `ip` off `iface`.
fn remove_command(ip: IpAddr, iface: &str) -> String {
    match ip {
        IpAddr::V4(ip) => format!("ip addr del {ip}/32 dev {iface}"),
        IpAddr::V6(ip) => format!("ip -6 addr del {ip}/128 dev {iface}"),
    }
}

/// The SSH IPs among the node's addresses, with the interface holding each.
pub fn on_interfaces(
    ssh_ips: &[IpAddr],
    links: &[Link],
    addrs: &[(u32, IpAddr)],
) -> BTreeMap<IpAddr, String> {
    let names: BTreeMap<u32, &str> = links.iter().map(|l| (l.index, l.name.as_str())).collect();
    addrs
        .iter()
        .filter(|(_, ip)| ssh_ips.contains(ip))
        .map(|(index, ip)| {
            (
                *ip,
                names
                    .get(index)
                    .map_or_else(|| index.to_string(), |n| (*n).to_owned()),
            )
        })
        .collect()
}

/// Pure: the MACs of this node's external interfaces, up or not: what it
/// publishes as its own, and what no claim from it is news of.
pub fn own_macs(external: &BTreeSet<String>, links: &[Link]) -> BTreeSet<[u8; 6]> {
    links
        .iter()
        .filter(|l| external.contains(&l.name))
        .filter_map(|l| l.mac)
        .collect()
}

/// Pure: every SSH IP, of either family, on every external interface that
/// is up and has a MAC, with that MAC.
pub fn desired(ssh_ips: &[IpAddr], external: &BTreeSet<String>, links: &[Link]) -> Desired {
    links
        .iter()
        .filter(|l| l.up && external.contains(&l.name))
        .filter_map(|l| Some((l.index, l.mac?)))
        .flat_map(|(index, mac)| {
            ssh_ips
                .iter()
                .map(move |ip| (AnnounceAt::new(index, *ip), mac))
        })
        .collect()
}

/// The running task, and how to stop it.
pub struct Handle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    within: Duration,
}

impl Handle {
    /// Tells the task the agent is exiting and waits for it to hand over
    /// (Kubernetes mode; in file mode the data path keeps answering).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(self.within, self.task).await;
    }
}

/// Starts `--announce`'s task, if asked for: `route`, the routes; `l2` in
/// Kubernetes mode (a `client`) ownership by Lease, else unconditional.
/// `ready`: the agent has attached and synced. An error stops announcing
/// changes, never the agent: the data path keeps answering as it was last
/// told. `external`: the external interfaces chosen (`--external-iface`).
pub fn spawn(
    args: &AgentArgs,
    external: &[String],
    layout: &PinLayout,
    socket: Option<NeighbourSocket>,
    client: Option<kube::Client>,
    metrics: AnnounceMetrics,
    ready: impl Fn() -> bool + Send + 'static,
) -> Option<Handle> {
    let (stop, stopped) = watch::channel(false);
    let a = &args.announce;
    if a.announce == AnnounceMode::L2 && socket.is_some() {
        for ip in &args.ssh_ips {
            let label = SshIpLabel {
                ssh_ip: ip.to_string(),
            };
            metrics.configured.get_or_create(&label).set(1);
        }
    }
    let layout = layout.clone();
    let task: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>> =
        match (a.announce, client, socket) {
            (AnnounceMode::Route, _, _) => Box::pin(routes::run(
                a.announce_table.unwrap_or_default(),
                args.ssh_ips.clone(),
                external.iter().cloned().collect(),
                ready,
                stopped,
            )),
            (AnnounceMode::Off, _, _) | (_, _, None) => return None,
            (AnnounceMode::L2, Some(client), Some(socket)) => Box::pin(leases::run(
                layout,
                leases::Settings {
                    ssh_ips: args.ssh_ips.clone(),
                    external: external.iter().cloned().collect(),
                    duration: a.announce_lease_duration,
                    renew: a.announce_renew,
                    namespace: a.lease_namespace.clone(),
                    me: identity(args.node_name.as_deref()),
                    garp_interval: a.announce_garp_interval,
                    nodes: a.announce_nodes.clone(),
                },
                client,
                socket,
                metrics,
                ready,
                stopped,
            )),
            (AnnounceMode::L2, None, Some(socket)) => Box::pin(run(
                layout,
                args.ssh_ips.clone(),
                external.to_vec(),
                a.announce_garp_interval,
                socket,
                metrics,
            )),
        };
    let task = tokio::spawn(async move {
        if let Err(e) = task.await {
            tracing::error!(
                error = format!("{e:#}"),
                "announcing stopped; the data path keeps answering ARP and neighbour solicitations as it was last told"
            );
        }
    });
    Some(Handle {
        stop,
        task,
        within: a.announce_lease_duration + a.announce_renew * 2,
    })
}

/// This node's name in the Leases: `--node-name`, else the host name.
pub fn identity(node_name: Option<&str>) -> String {
    node_name.map_or_else(
        || {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "unknown-node".into())
        },
        str::to_owned,
    )
}

/// The task: keeps `ANNOUNCE` and `ANNOUNCE6` equal to [`desired`] as
/// interfaces come and go, and sends the gratuitous ARPs and neighbour
/// advertisements. Runs until the agent exits.
pub async fn run(
    layout: PinLayout,
    ssh_ips: Vec<IpAddr>,
    ifaces: Vec<String>,
    garp_interval: Option<Duration>,
    socket: NeighbourSocket,
    metrics: AnnounceMetrics,
) -> anyhow::Result<()> {
    let mut map = Announcements::open_pinned(&layout)?;
    let mut agent_macs = AgentMacs::open_pinned(&layout)?;
    let claims = claimants::ForeignClaims::open_pinned(&layout)?;
    let mut foreign = ForeignClaims::new(metrics.foreign_claims.clone());
    let netlink = Netlink::open()?;
    let external: BTreeSet<String> = ifaces.into_iter().collect();
    let mut adverts = Adverts::new(socket, garp_interval, metrics.clone());
    let (tx, mut links_changed) = mpsc::channel(1);
    if let Err(e) = netdev::watch_links(tx) {
        tracing::warn!(
            error = format!("{e:#}"),
            "no link events; interfaces are read every 5 s"
        );
    }
    let mut rescan = interval(RESCAN);
    rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let wake = adverts.next_due();
        tokio::select! {
            _ = rescan.tick() => {}
            Some(()) = links_changed.recv() => {}
            () = sleep_until(wake) => {
                adverts.send_due(Instant::now());
                continue;
            }
        }
        let links = match netlink.links().await {
            Ok(links) => links,
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot read interfaces; announcements unchanged"
                );
                continue;
            }
        };
        // No other agent: only this node's own MACs are no news.
        agent_macs.set(&macs::agent_macs([], "", &own_macs(&external, &links)))?;
        foreign.read(&claims.read()?, Instant::now());
        let want = desired(&ssh_ips, &external, &links);
        let plan = map.set(&want, 0, unix_ms(SystemTime::now()))?;
        for (key, entry) in plan.started() {
            tracing::info!(
                ssh_ip = %key.ip,
                iface = netdev::name_of(key.ifindex).unwrap_or_default(),
                mac = mac_text(entry.mac),
                "answering {} for the SSH IP",
                asks(key.ip)
            );
        }
        for key in &plan.deletes {
            tracing::info!(ssh_ip = %key.ip, ifindex = key.ifindex, "no longer answering {} for the SSH IP", asks(key.ip));
        }
        adverts.track(&want, &plan, Instant::now());
        record(&metrics, &map)?;
    }
}

/// Waits until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The gauges from what the map holds.
fn record(metrics: &AnnounceMetrics, map: &Announcements) -> anyhow::Result<()> {
    let installed = map.installed()?;
    metrics.announcing.clear();
    metrics.since.clear();
    for (key, entry) in installed {
        let label = SshIpLabel {
            ssh_ip: key.ip.to_string(),
        };
        metrics.announcing.get_or_create(&label).set(1);
        let since = i64::try_from(entry.since_ms / 1000).unwrap_or(i64::MAX);
        let gauge = metrics.since.get_or_create(&label);
        if gauge.get() == 0 || since < gauge.get() {
            gauge.set(since);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
