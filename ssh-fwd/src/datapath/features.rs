//! The kernel features the data path relies on, what the agent does where
//! one is missing, and what that costs: pure decisions over what
//! [`probe`] found, so every fallback is tested without the kernel that
//! lacks it.
//!
//! The agent probes at start instead of reading the kernel's version: a
//! distribution kernel (RHEL 9's 5.14) carries features from far newer
//! releases, and a custom one may lack some of its own.

pub mod probe;

use std::{collections::BTreeMap, fmt};

/// One kernel feature the agent probes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// tcx links: tc programs attached as pinnable, atomically replaceable
    /// links.
    Tcx,
    /// XDP through a bpf_link (pinnable, replaceable).
    XdpLink,
    /// `BPF_MAP_TYPE_RINGBUF`: the connection log.
    RingBuffer,
    /// `BPF_MAP_LOOKUP_BATCH` and `BPF_MAP_UPDATE_BATCH`.
    BatchMapOps,
    /// An LRU hash with `BPF_F_NO_COMMON_LRU` (an LRU list per CPU).
    PerCpuLru,
    /// cgroup `connect4`/`connect6` programs (hairpin).
    CgroupConnect,
    /// cgroup `getpeername4`/`getpeername6` programs (hairpin).
    CgroupGetpeername,
    /// Every helper the tc programs call, from tc.
    TcHelpers,
    /// Every helper the XDP program calls, from XDP.
    XdpHelpers,
    /// Every helper the hairpin programs call, from cgroup sock_addr.
    HairpinHelpers,
}

impl Feature {
    pub const ALL: [Feature; 10] = [
        Feature::Tcx,
        Feature::XdpLink,
        Feature::RingBuffer,
        Feature::BatchMapOps,
        Feature::PerCpuLru,
        Feature::CgroupConnect,
        Feature::CgroupGetpeername,
        Feature::TcHelpers,
        Feature::XdpHelpers,
        Feature::HairpinHelpers,
    ];

    /// The stable name: the `feature` label in `/metrics`, the key in
    /// `ssh-fwd status`, and what the tests name to pretend it missing.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Tcx => "tcx",
            Feature::XdpLink => "xdp_link",
            Feature::RingBuffer => "ring_buffer",
            Feature::BatchMapOps => "batch_map_ops",
            Feature::PerCpuLru => "percpu_lru",
            Feature::CgroupConnect => "cgroup_connect",
            Feature::CgroupGetpeername => "cgroup_getpeername",
            Feature::TcHelpers => "tc_helpers",
            Feature::XdpHelpers => "xdp_helpers",
            Feature::HairpinHelpers => "hairpin_helpers",
        }
    }

    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The upstream release that brought it (docs/kernels.md).
    pub fn since(self) -> &'static str {
        match self {
            Feature::Tcx => "6.6",
            Feature::XdpLink => "5.9",
            Feature::RingBuffer => "5.8",
            Feature::BatchMapOps => "5.6",
            Feature::PerCpuLru => "4.10",
            Feature::CgroupConnect => "4.17 (connect6 with IPv4-mapped addresses: 4.17)",
            Feature::CgroupGetpeername => "5.8",
            // The newest helper each group calls: bpf_check_mtu (5.12)
            // from tc, bpf_xdp_load_bytes (5.18) from XDP.
            Feature::TcHelpers => "5.12",
            Feature::XdpHelpers => "5.18",
            Feature::HairpinHelpers => "5.8",
        }
    }

    /// What the agent does without it.
    pub fn fallback(self) -> Fallback {
        match self {
            Feature::Tcx => Fallback::Clsact,
            Feature::XdpLink | Feature::XdpHelpers => Fallback::NoXdp,
            Feature::CgroupConnect | Feature::CgroupGetpeername | Feature::HairpinHelpers => {
                Fallback::NoHairpin
            }
            Feature::RingBuffer
            | Feature::BatchMapOps
            | Feature::PerCpuLru
            | Feature::TcHelpers => Fallback::Refuse,
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the agent does where a feature is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// tc programs attach through a clsact qdisc with cls_bpf filters.
    Clsact,
    /// No XDP: `--attach auto` takes tc, `--attach xdp|xdp-generic` is
    /// refused.
    NoXdp,
    /// No hairpin: in-cluster clients cannot reach frontends.
    NoHairpin,
    /// The agent cannot run: the programs or maps need it.
    Refuse,
}

impl Fallback {
    /// What is lost, for the log line and `ssh-fwd status`.
    pub fn lost(self) -> &'static str {
        match self {
            Fallback::Clsact => {
                "tc programs attach through a clsact qdisc (cls_bpf, direct action) at ssh-fwd's \
                 own priority and handle instead of tcx links; restarts adopt the filters by \
                 handle and program tag and replace them atomically; nothing of forwarding is lost"
            }
            Fallback::NoXdp => {
                "no XDP: --attach auto uses tc ingress everywhere, --attach xdp and xdp-generic \
                 are refused"
            }
            Fallback::NoHairpin => {
                "no hairpin: pods and node processes cannot reach frontends through the SSH IP \
                 (external clients are unaffected)"
            }
            Fallback::Refuse => "the data path cannot load without it",
        }
    }
}

/// How tc programs are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcMechanism {
    /// tcx links, pinned.
    Tcx,
    /// cls_bpf filters on a clsact qdisc, owned by priority and handle.
    Clsact,
}

impl TcMechanism {
    pub fn name(self) -> &'static str {
        match self {
            TcMechanism::Tcx => "tcx",
            TcMechanism::Clsact => "clsact",
        }
    }
}

/// What the probes found: each feature present or not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probed(BTreeMap<Feature, bool>);

impl Probed {
    /// Every feature present (for tests, and the start of a probe).
    pub fn all_present() -> Self {
        Self(Feature::ALL.into_iter().map(|f| (f, true)).collect())
    }

    pub fn set(&mut self, feature: Feature, present: bool) {
        self.0.insert(feature, present);
    }

    /// Present unless probed missing.
    pub fn has(&self, feature: Feature) -> bool {
        self.0.get(&feature).copied().unwrap_or(true)
    }

    pub fn iter(&self) -> impl Iterator<Item = (Feature, bool)> + '_ {
        self.0.iter().map(|(f, p)| (*f, *p))
    }

    /// Marks `names` (comma-separated feature names) missing whatever was
    /// probed: what the tests use to take every fallback on any kernel.
    /// An unknown name is an error naming the known ones.
    pub fn pretend_missing(&mut self, names: &str) -> Result<Vec<Feature>, String> {
        let mut out = Vec::new();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let feature = Feature::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
                format!("unknown feature {name:?}; known: {}", known.join(", "))
            })?;
            self.set(feature, false);
            out.push(feature);
        }
        Ok(out)
    }
}

/// What the agent was asked for that a missing feature may take away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    /// `--attach xdp` or `xdp-generic`: XDP, and nothing else.
    pub xdp_only: bool,
    /// Hairpin asked for (`--hairpin auto`).
    pub hairpin: bool,
}

/// What the agent runs with, given the probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub tc: TcMechanism,
    /// XDP may be attached (`--attach auto` tries it on NICs).
    pub xdp: bool,
    /// Hairpin is attached, if asked for.
    pub hairpin: bool,
    /// Each missing feature with what it costs, for one log line each.
    pub missing: Vec<(Feature, Fallback)>,
}

/// Why the agent cannot start on this kernel.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "this kernel lacks {}, which the data path needs (upstream Linux {} has it); see \
         docs/kernels.md",
        .0.name(),
        .0.since()
    )]
    Required(Feature),
    #[error(
        "--attach xdp or xdp-generic was asked for, but this kernel lacks {} (upstream Linux {} \
         has it): use --attach tc or --attach auto",
        .0.name(),
        .0.since()
    )]
    NoXdp(Feature),
}

/// The fallbacks for what `probed` lacks; refused only where the data path
/// cannot run at all, or where `asked` insists on what is missing.
pub fn plan(probed: &Probed, asked: Asked) -> Result<Plan, Refusal> {
    let missing: Vec<(Feature, Fallback)> = Feature::ALL
        .into_iter()
        .filter(|f| !probed.has(*f))
        .map(|f| (f, f.fallback()))
        .collect();
    if let Some((feature, _)) = missing.iter().find(|(_, fb)| *fb == Fallback::Refuse) {
        return Err(Refusal::Required(*feature));
    }
    let lacks = |fallback: Fallback| missing.iter().find(|(_, fb)| *fb == fallback);
    if let (true, Some((feature, _))) = (asked.xdp_only, lacks(Fallback::NoXdp)) {
        return Err(Refusal::NoXdp(*feature));
    }
    Ok(Plan {
        tc: if probed.has(Feature::Tcx) {
            TcMechanism::Tcx
        } else {
            TcMechanism::Clsact
        },
        xdp: lacks(Fallback::NoXdp).is_none(),
        hairpin: asked.hairpin && lacks(Fallback::NoHairpin).is_none(),
        missing,
    })
}

#[cfg(test)]
mod tests;
