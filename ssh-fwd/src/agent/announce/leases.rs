//! `--announce l2` with `--kubernetes`: one `coordination.k8s.io` Lease
//! per SSH IP in `--lease-namespace`, labelled with [`vocabulary::ANNOUNCE`],
//! and only its holder answers ARP (IPv4) or neighbour solicitations (IPv6)
//! for the SSH IP ([`super::holding`] decides, the same for both families). Every agent watches those Leases, so a standby sees each
//! renewal as it happens and takes an expired Lease over within a tenth
//! of `--announce-renew` of its expiry, or sooner a holder that missed a
//! renewal and whose data path stopped answering the standby's ARP probes
//! or neighbour solicitations ([`super::holding`], [`Answers`]); each API
//! call is given up after `--announce-renew`. On SIGTERM the holder hands
//! its Leases back, and answers until it hears the new holder's
//! gratuitous ARP or neighbour advertisement (bounded by the Lease
//! duration): a drain hands over without a gap.
//!
//! Every holder publishes the MACs it answers from on its Lease, and every
//! agent its own on a Lease of its own ([`super::node_lease`]); the data
//! path gives way only to those MACs (`AGENT_MACS`), and a standby
//! believes only the holder's answers to its probes. Claims from any
//! other MAC are foreign: counted and told ([`ForeignClaims`]).

use std::{
    collections::BTreeSet,
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api,
    runtime::{reflector::ObjectRef, watcher},
};
use ssh_fwd_common::maps::{ANNOUNCE_YIELD, Heard};
use tokio::sync::{mpsc, watch};

use super::{
    Adverts, AnnounceMetrics,
    answers::{Answers, Holders},
    asks, desired,
    foreign::ForeignClaims,
    holding::{Action, Holding, Seen},
    lease_io::LeaseIo,
    lease_name::lease_name,
    lease_write::Write,
    macs,
    node_lease::NodeLease,
    own_macs, record, sleep_until,
};
use crate::{
    datapath::{
        announce::{
            Announcements, Desired,
            claimants::{self, AgentMacs, Macs},
        },
        neighbour::NeighbourSocket,
        netdev::{self, Netlink},
        pins::PinLayout,
        status::unix_ms,
    },
    k8s::{
        label_selector::LabelSelector,
        reflector::{Changes, drop_managed_fields, reflector_task},
    },
    vocabulary,
};

/// What the task needs from the flags.
pub struct Settings {
    pub ssh_ips: Vec<IpAddr>,
    pub external: BTreeSet<String>,
    pub duration: Duration,
    pub renew: Duration,
    pub namespace: String,
    /// This node's name in the Leases.
    pub me: String,
    pub garp_interval: Option<Duration>,
    /// `--announce-nodes`: this node's Node must match it.
    pub nodes: Option<LabelSelector>,
}

/// How often this node's Node is read for `--announce-nodes`.
const NODE_EVERY: Duration = Duration::from_secs(5);

/// One SSH IP.
struct Ip {
    ip: IpAddr,
    name: String,
    holding: Holding,
    /// A failed write was logged; the next success says so.
    failing: bool,
}

/// The task's state.
struct Announcer {
    settings: Settings,
    io: LeaseIo,
    store: kube::runtime::reflector::Store<Lease>,
    synced: Arc<AtomicBool>,
    map: Announcements,
    adverts: Adverts,
    metrics: AnnounceMetrics,
    ips: Vec<Ip>,
    /// What this node could announce: its external interfaces that are up.
    local: Desired,
    /// The answers to our probes: when the holder last answered for each
    /// SSH IP, and its MAC.
    answers: Answers,
    /// This node's external interfaces' MACs, up or not: what its own
    /// Lease publishes.
    own: BTreeSet<[u8; 6]>,
    node_lease: NodeLease,
    /// `AGENT_MACS`, and what it should hold as of the last pass.
    agent_macs: AgentMacs,
    macs: Macs,
    /// `ARP_FOREIGN` and `NDP_FOREIGN`, and what they and the probes'
    /// answers came to.
    foreign_maps: claimants::ForeignClaims,
    foreign: ForeignClaims,
}

/// Runs until `stop` turns true, then hands the Leases back.
pub async fn run(
    layout: PinLayout,
    settings: Settings,
    client: kube::Client,
    socket: NeighbourSocket,
    metrics: AnnounceMetrics,
    ready: impl Fn() -> bool,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let changes = Changes::new();
    let synced = Arc::new(AtomicBool::new(false));
    let seen = synced.clone();
    let (store, task) = reflector_task(
        api.clone(),
        watcher::Config::default().labels(vocabulary::ANNOUNCE),
        keep,
        "Lease",
        &changes,
        &metrics.lease_errors,
        move |event| {
            if matches!(event, watcher::Event::InitDone) {
                seen.store(true, Ordering::Relaxed);
            }
        },
    );
    let watch = tokio::spawn(task);
    let netlink = Netlink::open()?;
    let (tx, mut links_changed) = mpsc::channel(1);
    if let Err(e) = netdev::watch_links(tx) {
        tracing::warn!(
            error = format!("{e:#}"),
            "no link events; interfaces are read every second"
        );
    }
    let me = settings.me.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut a = Announcer {
        ips: settings
            .ssh_ips
            .iter()
            .map(|ip| Ip {
                ip: *ip,
                name: lease_name(*ip),
                holding: Holding::new(&me, settings.renew),
                failing: false,
            })
            .collect(),
        io: LeaseIo::new(
            &api,
            Api::namespaced(client, &settings.namespace),
            &settings.namespace,
            &settings.me,
            settings.renew,
            settings.duration,
        ),
        adverts: Adverts::new(socket, settings.garp_interval, metrics.clone()),
        map: Announcements::open_pinned(&layout)?,
        local: Desired::new(),
        answers: Answers::open(&settings.ssh_ips),
        own: BTreeSet::new(),
        node_lease: NodeLease::new(&me, api.clone(), nodes.clone()),
        agent_macs: AgentMacs::open_pinned(&layout)?,
        macs: Macs::new(),
        foreign_maps: claimants::ForeignClaims::open_pinned(&layout)?,
        foreign: ForeignClaims::new(metrics.foreign_claims.clone()),
        store,
        synced,
        metrics,
        settings,
    };
    a.read_links(&netlink).await;
    let mut eligible = a.settings.nodes.is_none();
    let mut node_read: Option<Instant> = None;
    let mut tick = tokio::time::interval(a.settings.renew / 10);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut links_read = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = changes.changed() => {}
            Some(()) = links_changed.recv() => a.read_links(&netlink).await,
            () = sleep_until(a.adverts.next_due()) => {
                a.adverts.send_due(Instant::now());
                continue;
            }
            _ = stop.changed() => break,
        }
        if links_read.elapsed() >= Duration::from_secs(1) {
            a.read_links(&netlink).await;
            links_read = Instant::now();
        }
        if let Some(selector) = &a.settings.nodes
            && node_read.is_none_or(|at| at.elapsed() >= NODE_EVERY)
        {
            node_read = Some(Instant::now());
            eligible = selected(&nodes, &a.settings.me, selector, eligible, a.settings.renew).await;
        }
        a.pass(ready() && eligible).await?;
    }
    a.hand_over().await;
    watch.abort();
    Ok(())
}

/// Whether this node's Node matches `--announce-nodes`; `was` when it
/// cannot be read (an API outage changes nothing).
async fn selected(
    nodes: &Api<Node>,
    me: &str,
    selector: &LabelSelector,
    was: bool,
    within: Duration,
) -> bool {
    match tokio::time::timeout(within, nodes.get(me)).await {
        Ok(Ok(node)) => {
            let now =
                selector.matches(node.metadata.labels.as_ref().unwrap_or(&Default::default()));
            if now != was {
                tracing::info!(
                    node = me,
                    selected = now,
                    "--announce-nodes: this node's labels changed its eligibility"
                );
            }
            now
        }
        Ok(Err(e)) => {
            tracing::debug!(node = me, error = %e, "cannot read this node's Node; eligibility unchanged");
            was
        }
        Err(_) => was,
    }
}

fn keep(mut lease: Lease) -> Lease {
    drop_managed_fields(&mut lease);
    lease
}

impl Announcer {
    /// This node's external interfaces that are up, with each SSH IP, and
    /// the MACs of all of them.
    async fn read_links(&mut self, netlink: &Netlink) {
        match netlink.links().await {
            Ok(links) => {
                self.local = desired(&self.settings.ssh_ips, &self.settings.external, &links);
                self.own = own_macs(&self.settings.external, &links);
            }
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot read interfaces; taken as down"
                );
                self.local = Desired::new();
            }
        }
    }

    /// One look at every SSH IP, then the map made to agree.
    async fn pass(&mut self, ready: bool) -> anyhow::Result<()> {
        let ready = ready && !self.local.is_empty();
        let synced = self.synced.load(Ordering::Relaxed);
        if synced {
            self.publish(Instant::now())?;
        }
        self.listen(Instant::now())?;
        let heard = self.map.heard()?;
        let mono_now = monotonic_ns();
        for i in 0..self.ips.len() {
            let now = Instant::now();
            let name = self.ips[i].name.clone();
            let lease = self
                .store
                .get(&ObjectRef::new(&name).within(&self.settings.namespace));
            let heard_other = heard_since(
                heard.get(&self.ips[i].ip),
                self.ips[i].holding.renewed,
                mono_now,
                now,
            );
            let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
            let answered = self.answers.last(self.ips[i].ip).map(|(at, _)| at);
            let action = self.ips[i].holding.next(
                &Seen {
                    lease: spec,
                    synced,
                    ready,
                    heard_other,
                    answered,
                },
                now,
            );
            self.act(i, action, lease.as_deref()).await;
        }
        // Another agent's claim heard while the writes above were waited
        // for: give way before the map is made to agree, or it would
        // answer again for a moment.
        let heard = self.map.heard()?;
        let (mono_now, now) = (monotonic_ns(), Instant::now());
        for i in 0..self.ips.len() {
            let holding = &self.ips[i].holding;
            let heard_other =
                heard_since(heard.get(&self.ips[i].ip), holding.renewed, mono_now, now);
            if holding.gives_way(heard_other, now) {
                self.act(i, Action::Withdraw, None).await;
            }
        }
        if synced {
            let held: BTreeSet<IpAddr> = self
                .ips
                .iter()
                .filter(|i| i.holding.held)
                .map(|i| i.ip)
                .collect();
            self.apply(&held)?;
        }
        Ok(())
    }

    /// This node's MACs on its own Lease, and every other agent's, as
    /// their Leases publish them, in `AGENT_MACS`.
    fn publish(&mut self, now: Instant) -> anyhow::Result<()> {
        let leases = self.store.state();
        self.macs = macs::agent_macs(
            leases.iter().map(AsRef::as_ref),
            &self.settings.me,
            &self.own,
        );
        self.agent_macs.set(&self.macs)?;
        if let Some(name) = self.node_lease.lease_name() {
            let current = self
                .store
                .get(&ObjectRef::new(name).within(&self.settings.namespace));
            let own = macs::format(self.own.iter().copied());
            self.node_lease.keep(current.as_deref(), &own, now);
        }
        Ok(())
    }

    /// The answers to this node's probes since the last look, and the
    /// foreign claims the data path counted.
    fn listen(&mut self, now: Instant) -> anyhow::Result<()> {
        let holders = self.holders();
        for (ip, mac) in self.answers.hear(&self.local, &holders, &self.macs, now) {
            self.foreign.answered(ip, mac, now);
        }
        self.foreign.read(&self.foreign_maps.read()?, now);
        Ok(())
    }

    /// Each SSH IP another node holds, with the MACs its holder published.
    fn holders(&self) -> Holders {
        let me = self.settings.me.as_str();
        self.ips
            .iter()
            .filter_map(|i| {
                let at = ObjectRef::new(&i.name).within(&self.settings.namespace);
                let lease = self.store.get(&at)?;
                let (holder, macs) = macs::holder(&lease)?;
                (holder != me).then_some((i.ip, macs))
            })
            .collect()
    }

    /// Makes `ANNOUNCE` and `ANNOUNCE6` hold the SSH IPs in `held` on every
    /// local interface.
    fn apply(&mut self, held: &BTreeSet<IpAddr>) -> anyhow::Result<()> {
        let want: Desired = self
            .local
            .iter()
            .filter(|(key, _)| held.contains(&key.ip))
            .map(|(k, v)| (*k, *v))
            .collect();
        let plan = self
            .map
            .set(&want, ANNOUNCE_YIELD, unix_ms(SystemTime::now()))?;
        self.adverts.track(&want, &plan, Instant::now());
        record(&self.metrics, &self.map)
    }

    async fn act(&mut self, i: usize, action: Action, lease: Option<&Lease>) {
        let ip = self.ips[i].ip;
        let sent = Instant::now();
        let result = match action {
            Action::Nothing => return,
            Action::Read => {
                let read = self.io.read(&self.ips[i].name).await;
                let holding = &mut self.ips[i].holding;
                match read {
                    Ok(lease) => {
                        holding.read(lease.as_ref().and_then(|l| l.spec.as_ref()), Instant::now())
                    }
                    Err(_) => holding.read_failed(Instant::now()),
                }
                return;
            }
            Action::Withdraw => {
                self.ips[i].holding.withdrew();
                tracing::info!(ssh_ip = %ip, "another node announces the SSH IP; no longer answering {} for it (until the Lease shows it free, or its renewal goes through)", asks(ip));
                return;
            }
            Action::Probe { unicast } => {
                let to = self
                    .answers
                    .last(ip)
                    .map(|(_, mac)| mac)
                    .filter(|_| unicast);
                for (key, mac) in self.local.iter().filter(|(key, _)| key.ip == ip) {
                    self.adverts.probe(*key, *mac, to);
                }
                return;
            }
            Action::Create => self.write(None, &self.ips[i].name, ip, Write::Take).await,
            Action::Take => self.write(lease, &self.ips[i].name, ip, Write::Take).await,
            Action::TakeFromSilent { ref holder, quiet } => {
                tracing::info!(
                    ssh_ip = %ip,
                    holder = %holder,
                    quiet_ms = quiet.as_millis(),
                    probes = super::holding::PROBES,
                    "the SSH IP's holder missed a renewal of its Lease and answers no {} (its node is gone): taking it over before the Lease expires",
                    super::probe(ip)
                );
                self.write(lease, &self.ips[i].name, ip, Write::Take).await
            }
            Action::Renew => self.write(lease, &self.ips[i].name, ip, Write::Renew).await,
            Action::Release => {
                let released = self
                    .write(lease, &self.ips[i].name, ip, Write::Release)
                    .await;
                self.ips[i].holding.withdrew();
                tracing::info!(ssh_ip = %ip, handed_back = released.is_ok(), "not ready (an external interface down, or not synced): gave the SSH IP up");
                return;
            }
        };
        let entry = &mut self.ips[i];
        match result {
            Ok(()) => {
                let was_held = entry.holding.held;
                entry.holding.wrote(sent);
                if std::mem::take(&mut entry.failing) {
                    tracing::info!(ssh_ip = %ip, "the SSH IP's Lease is written again");
                }
                if action == Action::Renew && !was_held {
                    tracing::info!(ssh_ip = %ip, "renewed its Lease again after giving way: still the SSH IP's holder; answering {} for it again", asks(ip));
                } else if !was_held {
                    self.took_over(ip);
                }
            }
            Err(e) => {
                self.metrics.lease_errors.inc();
                if matches!(
                    action,
                    Action::Create | Action::Take | Action::TakeFromSilent { .. }
                ) {
                    entry.holding.take_failed(sent);
                }
                if !std::mem::replace(&mut entry.failing, true)
                    && (entry.holding.held || action != Action::Renew)
                {
                    tracing::warn!(ssh_ip = %ip, ?action, error = format!("{e:#}"), "cannot write the SSH IP's Lease; retrying (a holder keeps answering until another node announces)");
                }
            }
        }
    }

    /// One Lease write, with the MACs this node answers `ip` from.
    async fn write(
        &self,
        lease: Option<&Lease>,
        name: &str,
        ip: IpAddr,
        how: Write,
    ) -> anyhow::Result<()> {
        let macs = macs::answering(&self.local, ip);
        self.io.write(lease, name, ip, how, &macs).await
    }

    /// Counted, logged, and told in an Event on the Lease.
    fn took_over(&self, ip: IpAddr) {
        self.metrics.takeovers.inc();
        tracing::info!(ssh_ip = %ip, node = %self.settings.me, "took the SSH IP over; answering {} for it", asks(ip));
        self.io.tell_takeover(ip);
    }

    /// SIGTERM: every Lease held is handed back at once, so a ready node
    /// takes it over without waiting for it to expire; this node answers
    /// until it hears that node's gratuitous ARP or neighbour
    /// advertisement, at most a Lease duration.
    async fn hand_over(&mut self) {
        let held: Vec<usize> = (0..self.ips.len())
            .filter(|i| self.ips[*i].holding.held)
            .collect();
        if held.is_empty() {
            return;
        }
        let since = monotonic_ns();
        for &i in &held {
            let name = self.ips[i].name.clone();
            let lease = self
                .store
                .get(&ObjectRef::new(&name).within(&self.settings.namespace));
            let released = self
                .write(lease.as_deref(), &name, self.ips[i].ip, Write::Release)
                .await;
            tracing::info!(ssh_ip = %self.ips[i].ip, handed_back = released.is_ok(), "SIGTERM: handing the SSH IP over");
        }
        let deadline = Instant::now() + self.settings.duration;
        while Instant::now() < deadline {
            let heard = self.map.heard().unwrap_or_default();
            let all = held
                .iter()
                .all(|&i| heard.get(&self.ips[i].ip).is_some_and(|h| h.at_ns > since));
            if all {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Err(e) = self.apply(&BTreeSet::new()) {
            tracing::warn!(
                error = format!("{e:#}"),
                "could not stop answering ARP and neighbour solicitations"
            );
        }
    }
}

/// Pure: whether another agent claimed the SSH IP (`heard`, from
/// `ARP_HEARD` or `NDP_HEARD`, stamped on CLOCK_MONOTONIC) after our last
/// good renewal, `renewed`; `mono_now` and `now` are the same moment on
/// both clocks.
fn heard_since(
    heard: Option<&Heard>,
    renewed: Option<Instant>,
    mono_now: u64,
    now: Instant,
) -> bool {
    heard.is_some_and(|h| {
        let age = Duration::from_nanos(mono_now.saturating_sub(h.at_ns));
        let at = now.checked_sub(age).unwrap_or(now);
        renewed.is_none_or(|renewed| at > renewed)
    })
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `ARP_HEARD`'s and
/// `NDP_HEARD`'s times.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec this function owns.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_heard_after_the_last_renewal_counts_and_one_before_does_not() {
        let now = Instant::now();
        let mono_now = 10_000_000_000;
        // NDP_HEARD's entry for an IPv6 SSH IP, 100 ms ago.
        let heard = Heard {
            mac: [2, 0, 0, 0, 0, 9],
            _pad: [0; 2],
            at_ns: mono_now - 100_000_000,
        };
        let renewed_before = now - Duration::from_millis(300);
        let renewed_after = now - Duration::from_millis(50);
        assert!(heard_since(
            Some(&heard),
            Some(renewed_before),
            mono_now,
            now
        ));
        assert!(!heard_since(
            Some(&heard),
            Some(renewed_after),
            mono_now,
            now
        ));
        assert!(
            heard_since(Some(&heard), None, mono_now, now),
            "never renewed"
        );
        assert!(!heard_since(None, None, mono_now, now), "nobody heard");
    }
}
