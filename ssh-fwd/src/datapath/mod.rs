//! The kernel side as userspace drives it: loading the eBPF object,
//! attaching its programs (or adopting what a previous agent pinned), and
//! reading and writing its maps.
//!
//! Invariants:
//! - Everything lives under one pinned, versioned layout ([`pins`]): stopping
//!   the agent leaves forwarding on, and the next agent adopts it.
//! - Map writes follow a [`plan`] computed purely from what is installed and
//!   what is desired, applied in an order that never exposes half a mapping.
//! - Nothing here knows where mappings come from (file or Kubernetes).

pub mod hooks;
pub mod kernel_log;
pub mod maps;
pub mod netdev;
pub mod object;
pub mod pins;
pub mod plan;
pub mod pod_links;
pub mod preflight;
pub mod stats;
pub mod status;

use std::collections::BTreeSet;

use anyhow::Context as _;
use aya::Ebpf;

use hooks::AttachMode;
use maps::Maps;
use netdev::{Kind, Netlink};
use pins::PinLayout;
use pod_links::PodLinks;
use status::StatusMap;

/// What [`Datapath::start`] attaches, and where.
pub struct Config<'a> {
    pub layout: &'a PinLayout,
    /// External interfaces (`--iface`).
    pub ifaces: &'a [String],
    pub mode: AttachMode,
    /// Attach the reply program to pods' interfaces (`--pod-ifaces auto`).
    pub pod_ifaces: bool,
}

/// The loaded object, its maps and its hooks, for the agent to drive.
pub struct Datapath {
    /// Owns the programs (the links are pinned, so they outlive it).
    ebpf: Ebpf,
    pub maps: Maps,
    pub status: StatusMap,
    pod_links: PodLinks,
    /// The maps were pinned by a previous agent and are adopted.
    pub adopted: bool,
}

impl Datapath {
    /// Checks the host, loads the object (adopting pinned maps), and
    /// attaches to every external interface, swapping our programs into
    /// the links a previous agent pinned. Fails before changing anything
    /// when a check fails.
    pub async fn start(config: &Config<'_>) -> anyhow::Result<Self> {
        let layout = config.layout;
        preflight::check_capabilities(pins::needs_mount(layout.root()))?;
        preflight::check_kernel()?;
        if let Some(other) = layout.other_versions().first() {
            anyhow::bail!(
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
        let mut kinds = Vec::with_capacity(config.ifaces.len());
        for iface in config.ifaces {
            netdev::index(iface)?;
            let kind = links
                .iter()
                .find(|l| &l.name == iface)
                .map_or(Kind::Other, |l| l.kind);
            kinds.push(kind);
        }
        layout.prepare()?;
        let adopted = layout.has_maps();
        let mut ebpf = object::load(layout)?;
        kernel_log::forward(&mut ebpf);
        object::load_programs(&mut ebpf).map_err(|e| {
            match preflight::explain_bpf_error(e.root_cause()) {
                Some(hint) => e.context(hint),
                None => e,
            }
        })?;
        for (iface, kind) in config.ifaces.iter().zip(kinds) {
            let hook =
                hooks::attach_interface(&mut ebpf, &layout.links_dir(), iface, kind, config.mode)
                    .with_context(|| format!("attaching to interface {iface}"))?;
            tracing::info!(iface, ingress = hook.name(), "attached");
        }
        let keep: BTreeSet<String> = config.ifaces.iter().cloned().collect();
        hooks::detach_others(&layout.links_dir(), &keep)?;
        let maps = Maps::from_ebpf(&mut ebpf)?;
        let status = StatusMap::from_ebpf(&mut ebpf)?;
        let pod_links =
            PodLinks::new(&mut ebpf, netlink, layout, config.ifaces, config.pod_ifaces)?;
        Ok(Self {
            ebpf,
            maps,
            status,
            pod_links,
            adopted,
        })
    }

    /// Attaches the reply program to new pods' interfaces, drops the links
    /// of vanished ones and rewrites the interface flags.
    pub async fn scan_pods(&mut self) -> anyhow::Result<()> {
        self.pod_links.sync(&mut self.ebpf).await
    }
}
