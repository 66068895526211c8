//! Attaching the programs to interfaces through pinned links, so they stay
//! when the agent exits and a new agent can replace them atomically; and
//! reading back which hooks are attached.
//!
//! The agent keeps no file descriptor of a link: its pin is the only thing
//! that holds it, so removing the pin detaches the program (what `ssh-fwd
//! teardown` relies on), and a pin deleted behind the agent's back is found
//! missing and attached anew ([`restore_interface`]).
//!
//! Where the kernel has no tcx ([`TcMechanism::Clsact`]), the tc programs
//! go into cls_bpf filters ssh-fwd owns on a clsact qdisc instead
//! ([`super::clsact`]); their pins (`*-clsact`) are the programs, not
//! links, and removing one does not detach: the filter is deleted first.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf,
    programs::{
        LinkOrder, TcAttachType, XdpMode,
        links::{FdLink, PinnedLink},
        tc::{SchedClassifierLink, TcAttachOptions},
        xdp::XdpLink,
    },
};

use super::{
    clsact::{self, Slot},
    features::{Plan, TcMechanism},
    netdev::{self, Kind},
    object::{PROG_EGRESS_TC, PROG_INGRESS_TC, PROG_REPLY_TC, classifier, loaded_xdp},
};

/// `--attach`: where the DNAT program hooks in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachMode {
    /// Native XDP on NICs whose driver supports it, tc ingress otherwise
    /// (and on veth, where tc is faster).
    Auto,
    /// Native (driver) XDP; fails if the driver lacks it.
    Xdp,
    /// Generic (skb) XDP: works everywhere, mostly for testing.
    XdpGeneric,
    /// tc ingress: through tcx links, or where the kernel has no tcx
    /// (before 6.6) through cls_bpf filters on a clsact qdisc;
    /// `ssh-fwd list hooks` shows which.
    Tc,
}

/// A resolved ingress hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    XdpNative,
    XdpGeneric,
    TcIngress,
}

impl Hook {
    const ALL: [Hook; 3] = [Hook::XdpNative, Hook::XdpGeneric, Hook::TcIngress];

    pub fn name(self) -> &'static str {
        match self {
            Hook::XdpNative => "xdp",
            Hook::XdpGeneric => "xdp-generic",
            Hook::TcIngress => "tc",
        }
    }

    fn pin_name(self) -> String {
        format!("ingress-{}", self.name())
    }
}

const EGRESS_PIN: &str = "egress-tc";
/// What a pin of a program in a clsact filter adds to its hook's name.
const CLSACT_SUFFIX: &str = "-clsact";

/// bpffs rejects dots in names (EPERM), but interface names may hold them
/// (`eth0.100`); Linux never allows `:` in an interface name, so the escape is
/// reversible.
fn iface_dir(links_dir: &Path, iface: &str) -> PathBuf {
    links_dir.join(iface.replace('.', ":"))
}

fn iface_from_dir(dir: &str) -> String {
    dir.replace(':', ".")
}

/// Attaches egress, then ingress, to one interface and returns the ingress
/// hook used. Links pinned by a previous agent are updated in place (the
/// kernel swaps the program atomically), so forwarding never pauses; links of
/// another ingress hook are removed only after the new one is in place.
pub fn attach_interface(
    ebpf: &mut Ebpf,
    links_dir: &Path,
    name: &str,
    kind: Kind,
    mode: AttachMode,
    plan: &Plan,
) -> anyhow::Result<Hook> {
    netdev::index(name)?;
    let links_dir = &iface_dir(links_dir, name);
    std::fs::create_dir_all(links_dir)
        .with_context(|| format!("creating {}", links_dir.display()))?;
    let tc = plan.tc;
    // Egress first: replies must be handled before the first request is.
    attach_tc(ebpf, links_dir, name, TcSpec::EGRESS, tc)?;
    let hook = match mode {
        AttachMode::Xdp => switch_xdp(ebpf, links_dir, name, Hook::XdpNative, tc)?,
        AttachMode::XdpGeneric => switch_xdp(ebpf, links_dir, name, Hook::XdpGeneric, tc)?,
        AttachMode::Tc => attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc)?,
        AttachMode::Auto if !plan.xdp => {
            tracing::info!(
                iface = name,
                hook = "tc",
                "attach mode chosen: tc ingress, because this kernel cannot attach the XDP \
                 program (see the missing kernel feature logged at start)"
            );
            attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc)?
        }
        AttachMode::Auto => attach_auto(ebpf, links_dir, name, kind, tc)?,
    };
    for other in Hook::ALL.into_iter().filter(|h| *h != hook) {
        for pin in [
            links_dir.join(other.pin_name()),
            links_dir.join(format!("{}{CLSACT_SUFFIX}", other.pin_name())),
        ] {
            if pin.exists() {
                tracing::info!(
                    iface = name,
                    old = other.name(),
                    new = hook.name(),
                    "replacing previous ingress hook"
                );
                remove_pin(name, &pin)?;
            }
        }
    }
    Ok(hook)
}

/// Attaches again the links of `name` whose pins are gone, each in the hook
/// it had (`hook`: the ingress hook [`attach_interface`] chose), and
/// returns their pins. A link lives only as long as its pin, so a missing
/// pin means a detached program.
pub fn restore_interface(
    ebpf: &mut Ebpf,
    links_dir: &Path,
    name: &str,
    hook: Hook,
    tc: TcMechanism,
) -> anyhow::Result<Vec<PathBuf>> {
    let links_dir = &iface_dir(links_dir, name);
    std::fs::create_dir_all(links_dir)
        .with_context(|| format!("creating {}", links_dir.display()))?;
    let mut restored = Vec::new();
    let egress = links_dir.join(TcSpec::EGRESS.pin_name(tc));
    if !egress.exists() {
        attach_tc(ebpf, links_dir, name, TcSpec::EGRESS, tc)?;
        restored.push(egress);
    }
    let ingress = match hook {
        Hook::TcIngress => links_dir.join(TcSpec::INGRESS.pin_name(tc)),
        Hook::XdpNative | Hook::XdpGeneric => links_dir.join(hook.pin_name()),
    };
    if !ingress.exists() {
        match hook {
            Hook::TcIngress => attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc)?,
            Hook::XdpNative | Hook::XdpGeneric => attach_xdp(ebpf, links_dir, name, hook)?,
        };
        restored.push(ingress);
    }
    Ok(restored)
}

/// Attaches XDP in `hook`'s mode. Native and generic XDP cannot share an
/// interface, so a switch between them bridges through tc ingress: forwarding
/// never stops, it only takes the slower hook for a moment.
fn switch_xdp(
    ebpf: &mut Ebpf,
    links_dir: &Path,
    name: &str,
    hook: Hook,
    tc: TcMechanism,
) -> anyhow::Result<Hook> {
    let other = if hook == Hook::XdpNative {
        Hook::XdpGeneric
    } else {
        Hook::XdpNative
    };
    let other_pin = links_dir.join(other.pin_name());
    if other_pin.exists() {
        tracing::info!(
            iface = name,
            old = other.name(),
            new = hook.name(),
            "switching XDP mode through tc ingress"
        );
        attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc)?;
        unpin(&other_pin)?;
    }
    attach_xdp(ebpf, links_dir, name, hook)
}

/// Removes the links of interfaces that are no longer in `--external-iface`.
pub fn detach_others(links_dir: &Path, keep: &BTreeSet<String>) -> anyhow::Result<()> {
    let entries = match std::fs::read_dir(links_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", links_dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let iface = iface_from_dir(&entry.file_name().to_string_lossy());
        if !keep.contains(&iface) {
            tracing::warn!(
                iface,
                "detaching from an interface no longer in --external-iface"
            );
            for pin in std::fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                remove_pin(&iface, &pin.path())?;
            }
            std::fs::remove_dir_all(entry.path())
                .with_context(|| format!("removing pinned links in {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The interfaces that have pinned links, with their ingress hook.
pub fn attached(links_dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(links_dir).into_iter().flatten().flatten() {
        let iface = iface_from_dir(&dir.file_name().to_string_lossy());
        for link in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push((
                iface.clone(),
                link.file_name().to_string_lossy().into_owned(),
            ));
        }
    }
    out.sort();
    out
}

fn unpin(pin: &Path) -> anyhow::Result<()> {
    std::fs::remove_file(pin).with_context(|| format!("removing pinned link {}", pin.display()))
}

/// Removes a hook's pin of `iface`; a clsact one's filter is deleted
/// first, since its pin holds the program, not the attachment.
fn remove_pin(iface: &str, pin: &Path) -> anyhow::Result<()> {
    let name = pin.file_name().unwrap_or_default().to_string_lossy();
    if let Some(hook) = name.strip_suffix(CLSACT_SUFFIX) {
        let spec = if hook == EGRESS_PIN {
            TcSpec::EGRESS
        } else {
            TcSpec::INGRESS
        };
        // A vanished interface took its filters with it.
        if let Ok(index) = netdev::index(iface) {
            clsact::detach(index, spec.slot())
                .with_context(|| format!("deleting ssh-fwd's tc filter on {iface}"))?;
        }
    }
    match std::fs::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", pin.display()))
        }
        _ => Ok(()),
    }
}

/// Deletes the clsact filters the pins under `layout` name (teardown), on
/// external and cluster interfaces and pods' alike, and returns `(interface,
/// hook)` of each; the pins stay for the caller to remove. Filters of
/// tcx links need nothing: removing their pins detaches them.
pub fn detach_filters(layout: &super::pins::PinLayout) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (iface, pin) in attached(&layout.links_dir()) {
        if mechanism_of(&pin) == TcMechanism::Clsact {
            remove_pin(&iface, &iface_dir(&layout.links_dir(), &iface).join(&pin))?;
            out.push((iface, pin));
        }
    }
    for index in layout.pod_links() {
        let pin = layout.pod_links_dir().join(index.to_string());
        if clsact::holds_program(&pin) && clsact::detach(index, TcSpec::REPLY.slot())? {
            out.push((
                netdev::name_of(index).unwrap_or_default(),
                "reply-tc-clsact".into(),
            ));
        }
    }
    Ok(out)
}

/// Which mechanism a hook's pin name says: a clsact filter or a link.
pub fn mechanism_of(pin_name: &str) -> TcMechanism {
    if pin_name.ends_with(CLSACT_SUFFIX) {
        TcMechanism::Clsact
    } else {
        TcMechanism::Tcx
    }
}

/// Opens a link pinned by a previous agent, if any.
fn adopt(pin: &Path) -> anyhow::Result<Option<FdLink>> {
    if !pin.exists() {
        return Ok(None);
    }
    let link = PinnedLink::from_pin(pin)
        .with_context(|| format!("opening pinned link {}", pin.display()))?;
    Ok(Some(FdLink::from(link)))
}

fn attach_xdp(ebpf: &mut Ebpf, links_dir: &Path, name: &str, hook: Hook) -> anyhow::Result<Hook> {
    let pin = links_dir.join(hook.pin_name());
    let prog = loaded_xdp(ebpf)?;
    if let Some(old) = adopt(&pin)? {
        match XdpLink::try_from(old)
            .map_err(anyhow::Error::from)
            .and_then(|l| prog.attach_to_link(l).map_err(anyhow::Error::from))
            // The pin holds the link; the program's copy of its fd goes.
            .and_then(|id| prog.take_link(id).map_err(anyhow::Error::from))
        {
            Ok(_) => {
                tracing::debug!(
                    iface = name,
                    hook = hook.name(),
                    "replaced program in pinned link"
                );
                return Ok(hook);
            }
            Err(e) => {
                // The interface may have been recreated; the old link is dead.
                tracing::warn!(
                    iface = name,
                    error = format!("{e:#}"),
                    "cannot reuse pinned XDP link; attaching anew"
                );
                unpin(&pin)?;
            }
        }
    }
    let mode = match hook {
        Hook::XdpNative => XdpMode::Driver,
        _ => XdpMode::Skb,
    };
    let id = prog
        .attach(name, mode)
        .map_err(|e| explain_xdp_error(name, hook, e))?;
    let link = prog.take_link(id)?;
    let fd = FdLink::try_from(link).map_err(|e| {
        anyhow!("XDP on {name} was attached without a bpf_link, which cannot be pinned (needs Linux 5.9+): {e}")
    })?;
    fd.pin(&pin)
        .with_context(|| format!("pinning link {}", pin.display()))?;
    Ok(hook)
}

fn explain_xdp_error(name: &str, hook: Hook, e: aya::programs::ProgramError) -> anyhow::Error {
    let errno = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<aya::sys::SyscallError>())
        .and_then(|s| s.io_error.raw_os_error());
    let hint = match errno {
        Some(libc::EBUSY) | Some(libc::EEXIST) => format!(
            "interface {name} already has another XDP program (see `ip link show {name}`); \
             remove it or use --attach tc"
        ),
        Some(libc::EOPNOTSUPP) => format!(
            "the driver of {name} has no native XDP support; use --attach tc or --attach xdp-generic"
        ),
        _ => format!("attaching {} to {name} failed", hook.name()),
    };
    anyhow::Error::new(e).context(hint)
}

/// Which tc program goes where.
#[derive(Clone, Copy)]
struct TcSpec {
    program: &'static str,
    attach: TcAttachType,
    first: bool,
    egress: bool,
}

impl TcSpec {
    /// DNAT first, before other ingress programs see the packet.
    const INGRESS: TcSpec = TcSpec {
        program: PROG_INGRESS_TC,
        attach: TcAttachType::Ingress,
        first: true,
        egress: false,
    };
    /// Reverse NAT last, after other egress programs saw the pod address.
    const EGRESS: TcSpec = TcSpec {
        program: PROG_EGRESS_TC,
        attach: TcAttachType::Egress,
        first: false,
        egress: true,
    };
    /// On a pod's interface: last, so a CNI's own programs (policy, its
    /// connection tracking) see the reply first; one that ends the chain
    /// leaves the reply to the egress program, which is just as correct.
    const REPLY: TcSpec = TcSpec {
        program: PROG_REPLY_TC,
        attach: TcAttachType::Ingress,
        first: false,
        egress: false,
    };

    fn pin_name(&self, tc: TcMechanism) -> String {
        let base = if self.egress {
            EGRESS_PIN.into()
        } else {
            Hook::TcIngress.pin_name()
        };
        match tc {
            TcMechanism::Tcx => base,
            TcMechanism::Clsact => format!("{base}{CLSACT_SUFFIX}"),
        }
    }

    /// Its slot on a clsact qdisc: both NAT programs first, since a filter
    /// that ends the chain keeps the later ones from running (see
    /// [`clsact`]); the reply program last, as with tcx.
    fn slot(&self) -> Slot {
        Slot {
            attach: self.attach,
            priority: if self.first || self.egress {
                clsact::FIRST_PRIORITY
            } else {
                clsact::LAST_PRIORITY
            },
        }
    }
}

fn attach_tc(
    ebpf: &mut Ebpf,
    links_dir: &Path,
    name: &str,
    spec: TcSpec,
    tc: TcMechanism,
) -> anyhow::Result<Hook> {
    let pin = links_dir.join(spec.pin_name(tc));
    attach_tc_pinned(ebpf, &pin, name, spec, tc)?;
    // The other mechanism's attachment, from an agent on another kernel
    // or told otherwise, goes once this one is in place.
    let other = match tc {
        TcMechanism::Tcx => TcMechanism::Clsact,
        TcMechanism::Clsact => TcMechanism::Tcx,
    };
    let other_pin = links_dir.join(spec.pin_name(other));
    if other_pin.exists() {
        remove_pin(name, &other_pin)?;
    }
    Ok(Hook::TcIngress)
}

/// Attaches the reply program to the host end of a pod's interface, pinned
/// at `pin`, or swaps it into the link (or filter) a previous agent left
/// there.
pub fn attach_reply(
    ebpf: &mut Ebpf,
    pin: &Path,
    name: &str,
    tc: TcMechanism,
) -> anyhow::Result<()> {
    attach_tc_pinned(ebpf, pin, name, TcSpec::REPLY, tc)
}

fn attach_tc_pinned(
    ebpf: &mut Ebpf,
    pin: &Path,
    name: &str,
    spec: TcSpec,
    tc: TcMechanism,
) -> anyhow::Result<()> {
    let prog = classifier(ebpf, spec.program)?;
    if tc == TcMechanism::Clsact {
        // A tcx link pinned here (a pod's pin has one name for both) is
        // unpinned, which detaches it, once the filter is in place.
        return clsact::attach(prog, name, spec.slot(), pin);
    }
    if clsact::holds_program(pin) {
        // A clsact filter's program pinned here: its filter goes once the
        // link below is in place; until then both run, and each passes
        // what the other translated.
        let index = netdev::index(name)?;
        unpin(pin)?;
        attach_tcx(prog, pin, name, spec)?;
        clsact::detach(index, spec.slot())?;
        return Ok(());
    }
    if let Some(old) = adopt(pin)? {
        match SchedClassifierLink::try_from(old)
            .map_err(anyhow::Error::from)
            .and_then(|l| prog.attach_to_link(l).map_err(anyhow::Error::from))
            // The pin holds the link; the program's copy of its fd goes.
            .and_then(|id| prog.take_link(id).map_err(anyhow::Error::from))
        {
            Ok(_) => return Ok(()),
            Err(e) => {
                tracing::warn!(
                    iface = name,
                    error = format!("{e:#}"),
                    "cannot reuse pinned tc link; attaching anew"
                );
                unpin(pin)?;
            }
        }
    }
    attach_tcx(prog, pin, name, spec)
}

fn attach_tcx(
    prog: &mut aya::programs::SchedClassifier,
    pin: &Path,
    name: &str,
    spec: TcSpec,
) -> anyhow::Result<()> {
    let order = if spec.first {
        LinkOrder::first()
    } else {
        LinkOrder::last()
    };
    let id = prog
        .attach_with_options(name, spec.attach, TcAttachOptions::TcxOrder(order))
        .with_context(|| {
            format!(
                "attaching {} to {name} with tcx (needs Linux 6.6+)",
                spec.program
            )
        })?;
    let link = prog.take_link(id)?;
    let fd =
        FdLink::try_from(link).map_err(|e| anyhow!("tcx link on {name} cannot be pinned: {e}"))?;
    fd.pin(pin)
        .with_context(|| format!("pinning link {}", pin.display()))?;
    Ok(())
}

fn attach_auto(
    ebpf: &mut Ebpf,
    links_dir: &Path,
    name: &str,
    kind: Kind,
    tc: TcMechanism,
) -> anyhow::Result<Hook> {
    if kind == Kind::Veth {
        tracing::info!(
            iface = name,
            hook = "tc",
            "attach mode chosen: tc ingress, because native XDP on a veth turns every skb \
             into an XDP frame and back, which costs more than tc"
        );
        return attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc);
    }
    match attach_xdp(ebpf, links_dir, name, Hook::XdpNative) {
        Ok(hook) => {
            tracing::info!(
                iface = name,
                hook = "xdp",
                "attach mode chosen: native XDP, the earliest hook, before the kernel builds \
                 an skb"
            );
            Ok(hook)
        }
        Err(e) => {
            tracing::info!(
                iface = name,
                hook = "tc",
                error = format!("{e:#}"),
                "attach mode chosen: tc ingress, because the interface's driver refused \
                 native XDP"
            );
            attach_tc(ebpf, links_dir, name, TcSpec::INGRESS, tc)
        }
    }
}
