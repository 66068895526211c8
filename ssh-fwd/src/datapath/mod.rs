//! The kernel side as userspace drives it: loading the eBPF object,
//! attaching its programs (or adopting what a previous agent pinned), and
//! reading and writing its maps.
//!
//! Invariants:
//! - Everything lives under one pinned, versioned layout ([`pins`]): stopping
//!   the agent leaves forwarding on, and the next agent adopts it.
//! - Map writes follow a [`plan`] computed purely from what is installed and
//!   what is desired, applied in an order that never exposes half a mapping.
//! - Connection state is created by the kernel programs only; the agent
//!   only removes it ([`conntrack`]: sweep and purge).
//! - Nothing here knows where mappings come from (file or Kubernetes).

pub mod announce;
mod batch;
pub mod capacity;
pub mod cgroup;
pub mod clsact;
pub mod conntrack;
pub mod events;
pub mod external_iface;
pub mod family;
pub mod features;
pub mod footprint;
pub mod hairpin;
pub mod hooks;
pub mod kernel_log;
pub mod key;
pub mod lock;
pub mod maps;
pub mod neighbour;
pub mod netdev;
pub mod object;
mod outdated;
pub mod owners;
pub mod pins;
pub mod plan;
pub mod pod_links;
pub mod preflight;
pub mod repair;
pub mod routes;
pub mod ssh_ips;
pub mod stats;
pub mod status;
pub mod upgrade;

use std::{collections::BTreeSet, net::IpAddr, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use aya::Ebpf;

use conntrack::ConnTables;
use hooks::{AttachMode, Hook};
use lock::AgentLock;
use maps::Maps;
use netdev::{Kind, Netlink};
use object::{DenyAction, RedirectMode};
use pins::PinLayout;
use pod_links::PodLinks;
use repair::MapPins;
use ssh_fwd_common::maps::{LOADED_QUOTA_BY_KERNEL, LoadedSettings};
use ssh_ips::SshIps;
use status::{SettingsMap, StatusMap};
use upgrade::Takeover;

/// What [`Datapath::start`] attaches, and where.
pub struct Config<'a> {
    pub layout: &'a PinLayout,
    /// External interfaces (`--external-iface`).
    pub ifaces: &'a [String],
    /// Interfaces to other nodes (`--cluster-iface`); empty: those of the
    /// routes with a gateway, other than the external ones.
    pub cluster_ifaces: &'a [String],
    pub mode: AttachMode,
    /// Attach the reply program to pods' interfaces (`--pod-iface-reply auto`).
    pub pod_ifaces: bool,
    pub settings: object::Settings,
    /// How long replies of connections an upgraded-from data path forwarded
    /// keep being restored untracked (until the server's ACK adopts them):
    /// `--conn-idle-timeout`, as for any connection.
    pub legacy_grace: Duration,
    /// Hairpin for in-cluster clients (`--hairpin`, `--cgroup-root`).
    pub hairpin: hairpin::Settings,
    /// `--ssh-ip`: closed to all but their mapped ports before any
    /// program runs.
    pub ssh_ips: &'a [IpAddr],
}

/// The loaded object, its maps and its hooks, for the agent to drive.
pub struct Datapath {
    /// Owns the programs (the links are pinned, so they outlive it).
    ebpf: Ebpf,
    pub maps: Maps,
    pub conns: ConnTables,
    pub status: StatusMap,
    /// The addresses that expose only their mapped ports.
    pub ssh_ips: SshIps,
    /// What this kernel has, and what the agent runs with for it.
    pub kernel: Kernel,
    pod_links: PodLinks,
    layout: PinLayout,
    /// Handles to the pinned maps, to pin again one whose pin is deleted.
    map_pins: MapPins,
    /// The external and cluster interfaces, with the ingress hook each got.
    hooks: Vec<(String, Hook)>,
    /// The cgroup the hairpin programs are attached to.
    hairpin_root: Option<PathBuf>,
    /// The interfaces to other nodes the programs are attached to.
    pub cluster_ifaces: Vec<String>,
    /// The maps were pinned by a previous agent and are adopted.
    pub adopted: bool,
    /// Held while the agent runs: no second agent, no teardown under it;
    /// moved to the directory made again if `--bpffs` is removed.
    lock: AgentLock,
}

impl Datapath {
    /// Checks the host, loads the object (adopting pinned maps), and
    /// attaches to every external and cluster interface, swapping our
    /// programs into the links a previous agent pinned. Fails before
    /// changing anything when a check fails.
    pub async fn start(config: &Config<'_>) -> anyhow::Result<Self> {
        let layout = config.layout;
        preflight::check_capabilities(pins::needs_mount(layout.root()))?;
        let kernel = Kernel::probe(config)?;
        let plan = &kernel.plan;
        let previous = Takeover::dir(layout);
        if let Some(other) = layout
            .other_versions()
            .into_iter()
            .find(|dir| *dir != previous)
        {
            bail!(
                "{} holds the data path of another ssh-fwd version (a different pinned layout), \
                 which may still be attached: stop that agent, run `ssh-fwd teardown --bpffs {}` \
                 (it removes every layout; sessions through the old data path end), then start \
                 this agent",
                other.display(),
                layout.root().display()
            );
        }
        let netlink = Netlink::open()?;
        let links = netlink.links().await?;
        let kind_of = |iface: &str| -> anyhow::Result<Kind> {
            netdev::index(iface)?;
            Ok(links
                .iter()
                .find(|l| l.name == iface)
                .map_or(Kind::Other, |l| l.kind))
        };
        let cluster = cluster_ifaces(&netlink, &links, config).await?;
        let hairpin_root = hairpin::resolve(&config.hairpin)?;
        let mut attach = Vec::new();
        for iface in config.ifaces {
            attach.push((iface.clone(), kind_of(iface)?, config.mode));
        }
        let hairpin_root = if plan.hairpin { hairpin_root } else { None };
        for iface in &cluster {
            attach.push((iface.clone(), kind_of(iface)?, AttachMode::Tc));
        }
        let takeover = Takeover::find(layout)?;
        // Locked before anything is made in it: a teardown may be running.
        let lock = AgentLock::take(layout, || layout.prepare_root())?;
        layout.prepare()?;
        let adopted = layout.has_maps();
        let mut ebpf = object::load(layout, &config.settings)?;
        let map_pins = MapPins::open(layout)?;
        let mut loaded = SettingsMap::from_ebpf(&mut ebpf)?;
        let previous = if adopted { Some(loaded.read()?) } else { None };
        if let Some(previous) = previous {
            announce_mode_change(previous, &config.settings);
        }
        kernel_log::forward(&mut ebpf);
        object::load_programs(&mut ebpf).map_err(preflight::with_hint)?;
        let mut conns = ConnTables::from_ebpf(&mut ebpf)?;
        if let Some(takeover) = &takeover {
            begin_takeover(takeover, layout, adopted, &mut conns, config.legacy_grace)?;
        }
        // Before any program of this agent runs: a node's services are
        // never open on an SSH IP, not even while the agent starts.
        let ssh_ips = SshIps::from_ebpf(&mut ebpf, config.ssh_ips)?;
        let mut pod_links = PodLinks::new(
            &mut ebpf,
            netlink,
            layout,
            config.ifaces,
            &cluster,
            pod_ifaces(config),
            config.settings.ipv6,
        )?;
        pod_links.tc = plan.tc;
        pod_links.prime(&links).await?;
        let mut hooks = Vec::new();
        for (iface, kind, mode) in &attach {
            let hook =
                hooks::attach_interface(&mut ebpf, &layout.links_dir(), iface, *kind, *mode, plan)
                    .with_context(|| format!("attaching to interface {iface}"))?;
            tracing::info!(
                iface,
                ingress = hook.name(),
                tc = plan.tc.name(),
                "attached"
            );
            hooks.push((iface.clone(), hook));
        }
        let keep: BTreeSet<String> = attach.iter().map(|(iface, ..)| iface.clone()).collect();
        hooks::detach_others(&layout.links_dir(), &keep)?;
        hairpin::apply(&mut ebpf, layout, hairpin_root.as_deref())?;
        let maps = Maps::from_ebpf(&mut ebpf)?;
        let status = StatusMap::from_ebpf(&mut ebpf)?;
        // Once today's programs confirm, before the record says so.
        if previous.is_some_and(|p| p.flags & LOADED_QUOTA_BY_KERNEL == 0) {
            let counted = conns.count_adopted();
            tracing::info!(
                counted,
                "counted the open connections of the previous data path toward \
                 --conns-per-source"
            );
        }
        loaded.write(config.settings.recorded())?;
        if let Some(takeover) = takeover {
            takeover.finish()?;
            tracing::info!(
                version = upgrade::FROM_VERSION,
                "upgrade done: the older data path's pins are removed"
            );
        }
        Ok(Self {
            ebpf,
            maps,
            conns,
            status,
            ssh_ips,
            kernel,
            pod_links,
            layout: layout.clone(),
            map_pins,
            hooks,
            hairpin_root,
            cluster_ifaces: cluster,
            adopted,
            lock,
        })
    }

    /// Attaches the reply program to new pods' interfaces, drops the links
    /// of vanished ones and rewrites the interface flags. Returns the pins of
    /// links that were deleted behind the agent's back and are attached
    /// again.
    pub async fn scan_pods(&mut self) -> anyhow::Result<Vec<PathBuf>> {
        // Nothing is pinned in a directory another agent holds. Other
        // failures (bpffs unmounted) are the resync's to report.
        if let Err(lock::FollowError::Lost(lost)) = self.lock.follow(&self.layout) {
            return Err(lost.into());
        }
        self.pod_links.sync(&mut self.ebpf).await
    }
}

/// Logs a change of a setting baked into the programs. Nothing else is
/// needed: this agent's programs replace the previous agent's in every
/// pinned link as it attaches (pods' interfaces at its first scan), so no
/// packet is handled in the old mode after that.
fn announce_mode_change(previous: LoadedSettings, settings: &object::Settings) {
    let before = RedirectMode::of(previous);
    if before != settings.redirect {
        tracing::info!(
            from = before.name(),
            to = settings.redirect.name(),
            "--redirect changed: the previous agent's programs are replaced by ones loaded with \
             the new mode in every pinned link"
        );
    }
    let before = DenyAction::of(previous);
    if before != settings.deny_action {
        tracing::info!(
            from = before.name(),
            to = settings.deny_action.name(),
            "--deny-action changed: the previous agent's programs are replaced by ones loaded \
             with the new action in every pinned link"
        );
    }
}

/// Whether the reply program goes on pods' interfaces: with `--redirect
/// off` it would only leave every reply to the stack.
fn pod_ifaces(config: &Config<'_>) -> bool {
    if config.pod_ifaces && config.settings.redirect == RedirectMode::Off {
        tracing::info!(
            "--redirect off: no reply program on pods' interfaces; replies take the node's \
             forwarding path and get their frontend back as they leave the external interface"
        );
        return false;
    }
    config.pod_ifaces
}

/// Steps 2 and 3 of an upgrade (see [`upgrade`]): the older data path's
/// mappings and backends written into our maps, its links moved to ours.
fn begin_takeover(
    takeover: &Takeover,
    layout: &PinLayout,
    adopted: bool,
    conns: &mut ConnTables,
    grace: Duration,
) -> anyhow::Result<()> {
    let grace_ns = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
    let until = conntrack::clock_ns().saturating_add(grace_ns);
    let kept = takeover
        .seed(layout, !adopted, conns, until)
        .context("upgrading from layout v3: seeding the maps")?;
    let moved = takeover
        .move_links(layout)
        .context("upgrading from layout v3: moving its links")?;
    tracing::info!(
        from = upgrade::FROM_VERSION,
        mappings = takeover.mappings(),
        backends = takeover.backends().len(),
        shared_backend_conns = kept,
        links = moved,
        grace = %humantime::format_duration(grace),
        "upgrading the data path of an older ssh-fwd in place: its mappings keep forwarding, \
         and each of its open connections is tracked from the server's next packet (replies \
         without state from its backends get their frontend back for the grace period)"
    );
    Ok(())
}

/// The interfaces to other nodes: `--cluster-iface`, or the interfaces of the
/// routes with a gateway (to other nodes' pods, and the default route),
/// other than the external ones and `lo`.
async fn cluster_ifaces(
    netlink: &Netlink,
    links: &[netdev::Link],
    config: &Config<'_>,
) -> anyhow::Result<Vec<String>> {
    if !config.cluster_ifaces.is_empty() {
        for iface in config.cluster_ifaces {
            netdev::index(iface).with_context(|| format!("--cluster-iface {iface}"))?;
        }
        tracing::info!(ifaces = ?config.cluster_ifaces, "cluster interfaces from --cluster-iface");
        return Ok(config
            .cluster_ifaces
            .iter()
            .filter(|i| !config.ifaces.contains(i))
            .cloned()
            .collect());
    }
    let gateways = netdev::gateway_interfaces(&netlink.routes().await?);
    let found: Vec<String> = links
        .iter()
        .filter(|l| gateways.contains(&l.index))
        .map(|l| l.name.clone())
        .filter(|name| name != "lo" && !config.ifaces.contains(name))
        .collect();
    if found.is_empty() {
        tracing::info!(
            "no interface to other nodes besides the external ones (no route with a gateway \
             leaves elsewhere); pass --cluster-iface if requests reach other nodes' pods through \
             one"
        );
    } else {
        tracing::info!(ifaces = ?found, "cluster interfaces: those of the routes with a gateway");
    }
    Ok(found)
}

/// The kernel as the agent found it at start.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// `uname -r`.
    pub release: String,
    pub probed: features::Probed,
    pub plan: features::Plan,
}

/// The variable that makes the agent take listed features as missing
/// (comma-separated names, `tcx,xdp_link`), so the tests prove each
/// fallback on a kernel that has them all. For tests only: an operator
/// gains nothing from it, and the agent warns when it is set.
pub const PRETEND_MISSING_ENV: &str = "SSH_FWD_TEST_PRETEND_MISSING";

impl Kernel {
    /// Probes every feature, logs one line for each one missing (the
    /// feature, the kernel, what is lost), and decides the fallbacks; fails
    /// where the data path cannot run, or where the flags insist on what
    /// is missing.
    fn probe(config: &Config<'_>) -> anyhow::Result<Self> {
        let release = preflight::kernel_release().unwrap_or_else(|| "unknown".into());
        let (mut probed, findings) = features::probe::probe_all();
        for finding in findings.iter().filter(|f| !f.present) {
            tracing::debug!(
                feature = finding.feature.name(),
                detail = finding.detail,
                "probe"
            );
        }
        if let Some(names) = std::env::var_os(PRETEND_MISSING_ENV) {
            let names = names.to_string_lossy();
            let named = probed
                .pretend_missing(&names)
                .map_err(|e| anyhow::anyhow!("{PRETEND_MISSING_ENV}: {e}"))?;
            tracing::warn!(
                features = ?named.iter().map(|f| f.name()).collect::<Vec<_>>(),
                "{PRETEND_MISSING_ENV} is set: taking these kernel features as missing (for tests)"
            );
        }
        let asked = features::Asked {
            xdp_only: matches!(config.mode, AttachMode::Xdp | AttachMode::XdpGeneric),
            hairpin: config.hairpin.mode != hairpin::HairpinMode::Off,
        };
        let plan = features::plan(&probed, asked).with_context(|| format!("kernel {release}"))?;
        for (feature, fallback) in &plan.missing {
            tracing::warn!(
                feature = feature.name(),
                kernel = release,
                since = feature.since(),
                lost = fallback.lost(),
                "kernel feature missing: {feature} (upstream Linux {}); {}",
                feature.since(),
                fallback.lost()
            );
        }
        Ok(Self {
            release,
            probed,
            plan,
        })
    }
}
