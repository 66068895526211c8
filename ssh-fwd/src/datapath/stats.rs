//! The installed state read back for operators: each mapping with its
//! counters, and every hook attached, from the pinned maps and links. What
//! `ssh-fwd list`, `ssh-fwd status` and `/metrics` show.

use std::net::SocketAddr;

use ssh_fwd_common::maps::{FLAG_SHARED_BACKEND, MappingConnCounters, MappingCounters};

use super::{hairpin, hooks, maps::Maps, netdev, pins::PinLayout, plan::installed_guard};
use crate::mapping::Guard;

/// One installed mapping and what went through it.
#[derive(Clone, Debug)]
pub struct MappingStats {
    pub name: String,
    /// Of either family (both of one).
    pub frontend: SocketAddr,
    pub backend: SocketAddr,
    /// The backend is also behind another frontend.
    pub shared_backend: bool,
    pub counters: MappingCounters,
    /// Its connections, counted on the pod's node (denied and limited
    /// SYNs on the node that received them).
    pub conns: MappingConnCounters,
    /// Who may connect, and how fast, as installed.
    pub guard: Guard,
}

/// Every installed mapping, by frontend.
pub fn mappings(maps: &Maps) -> anyhow::Result<Vec<MappingStats>> {
    let installed = maps.read_installed()?;
    installed
        .frontends
        .iter()
        .map(|(frontend, target)| {
            Ok(MappingStats {
                name: installed
                    .names
                    .get(&target.slot)
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                frontend: *frontend,
                backend: target.endpoint,
                shared_backend: target.flags & FLAG_SHARED_BACKEND != 0,
                counters: maps.mapping_counters(target.slot)?,
                conns: maps.mapping_conn_counters(target.slot)?,
                guard: installed_guard(&installed, target),
            })
        })
        .collect()
}

/// Where a hook is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// An external interface (`--external-iface`).
    Interface,
    /// The host end of a pod's interface.
    PodInterface,
    /// A cgroup (hairpin); `iface` holds its path.
    Cgroup,
}

/// One attached program, as pinned.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Hook {
    pub target: Target,
    /// The interface name; empty for a pod interface that is gone (the
    /// agent's next scan removes its link).
    pub iface: String,
    pub ifindex: Option<u32>,
    /// The pinned link's name: `ingress-tc`, `egress-tc`, `reply-tc`...
    /// (`ingress-tc-clsact`, `egress-tc-clsact` for clsact filters).
    pub hook: String,
    /// How it is attached: `tcx`, `clsact` (a cls_bpf filter, where the
    /// kernel has no tcx), or `link` (XDP's and cgroups' bpf_link).
    pub mechanism: &'static str,
}

/// The mechanism of an interface's hook, from its pin's name.
fn interface_mechanism(hook: &str) -> &'static str {
    if hook.starts_with("ingress-xdp") {
        "link"
    } else {
        hooks::mechanism_of(hook).name()
    }
}

/// Every hook pinned under `layout`.
pub fn hooks(layout: &PinLayout) -> Vec<Hook> {
    let interfaces = hooks::attached(&layout.links_dir())
        .into_iter()
        .map(|(iface, hook)| Hook {
            target: Target::Interface,
            ifindex: netdev::index(&iface).ok(),
            iface,
            mechanism: interface_mechanism(&hook),
            hook,
        });
    let pods = layout.pod_links().into_iter().map(|index| Hook {
        target: Target::PodInterface,
        iface: netdev::name_of(index).unwrap_or_default(),
        ifindex: Some(index),
        hook: "reply-tc".into(),
        // A clsact filter's pin holds the program; a tcx one, the link.
        mechanism: if super::clsact::holds_program(&layout.pod_links_dir().join(index.to_string()))
        {
            "clsact"
        } else {
            "tcx"
        },
    });
    let cgroups = hairpin::attached(layout)
        .into_iter()
        .map(|(cgroup, hook)| Hook {
            target: Target::Cgroup,
            iface: cgroup.display().to_string(),
            ifindex: None,
            hook,
            mechanism: "link",
        });
    let mut all: Vec<Hook> = interfaces.chain(pods).chain(cgroups).collect();
    all.sort();
    all
}
