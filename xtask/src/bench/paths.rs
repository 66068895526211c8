//! The forwarding paths the benchmark compares, and how each is put in
//! place in a fresh [`Bed`]. Everything a path installs lives inside the
//! bed's node namespace (rules, processes, attached programs), so it goes
//! away with the bed.

use std::{path::Path as FsPath, process::Child};

use anyhow::Context as _;
use serde::Serialize;
use ssh_fwd_tests::{Agent, Bpffs, NetNs, agent::write_mappings, cmd, topology::EXT_IFACE};

use super::{
    bed::{self, Bed, Target},
    kube_rules,
};

/// ssh-fwd's ingress attach modes (`--attach`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Attach {
    Xdp,
    XdpGeneric,
    Tc,
}

impl Attach {
    fn arg(self) -> &'static str {
        match self {
            Attach::Xdp => "xdp",
            Attach::XdpGeneric => "xdp-generic",
            Attach::Tc => "tc",
        }
    }
}

/// ssh-fwd's `--pod-ifaces`: with `Off`, replies take the node's stack and
/// the egress program (the data path before the reply program existed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PodIfaces {
    Auto,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Path {
    /// Straight to the pod IP, no NAT: the reference.
    Routing,
    /// The same over IPv6, to the pod's IPv6 address.
    Routing6,
    SshFwd(Attach, PodIfaces),
    /// ssh-fwd with an IPv6 frontend to the pod's IPv6 address.
    SshFwd6(Attach),
    /// kube-proxy iptables mode with N Services.
    Iptables(usize),
    /// kube-proxy nftables mode with N Services.
    Nftables(usize),
    /// kube-proxy IPVS mode with N Services.
    Ipvs(usize),
    /// tokio copy_bidirectional in the node namespace.
    Proxy,
}

impl Path {
    pub fn label(self) -> String {
        match self {
            Path::Routing => "plain routing".into(),
            Path::Routing6 => "plain routing, IPv6".into(),
            Path::SshFwd(a, PodIfaces::Auto) => format!("ssh-fwd {}", a.arg()),
            Path::SshFwd(a, PodIfaces::Off) => format!("ssh-fwd {}, pod-ifaces off", a.arg()),
            Path::SshFwd6(a) => format!("ssh-fwd {}, IPv6", a.arg()),
            Path::Iptables(n) => format!("iptables, {n} Services"),
            Path::Nftables(n) => format!("nftables, {n} Services"),
            Path::Ipvs(n) => format!("IPVS, {n} Services"),
            Path::Proxy => "userspace proxy".into(),
        }
    }

    pub fn target(self) -> Target {
        match self {
            Path::Routing => Target::pod(),
            Path::Routing6 => Target::pod6(),
            Path::SshFwd6(_) => Target::frontend6(),
            _ => Target::frontend(),
        }
    }
}

/// What a path left running; dropping it stops those processes (the
/// namespace takes the rest).
pub enum Installed {
    Nothing,
    /// Field order is drop order: the agent stops, then its pins go.
    SshFwd {
        _agent: Agent,
        bpffs: Bpffs,
        _dir: tempfile::TempDir,
    },
    Proxy(Child),
}

impl Installed {
    /// For ssh-fwd: the share of rewritten packets, both ways, that were
    /// redirected (skipping the node's IP stack), from the agent's counters.
    pub fn redirected_share(&self) -> Option<f64> {
        let Installed::SshFwd { bpffs, .. } = self else {
            return None;
        };
        let listing = bpffs.list().ok()?;
        let c = |name: &str| listing["counters"][name].as_f64().unwrap_or(0.0);
        let rewritten = c("dnat") + c("reverse_nat");
        let redirected = c("redirected") + c("reply_redirected");
        (rewritten > 0.0).then(|| redirected / rewritten)
    }

    /// The process doing the forwarding in user space, if any (for CPU).
    pub fn forwarder_pid(&self) -> Option<u32> {
        match self {
            Installed::Proxy(child) => Some(child.id()),
            _ => None,
        }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Installed::Proxy(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn install(path: Path, bed: &Bed) -> anyhow::Result<Installed> {
    let node = &bed.node;
    match path {
        Path::Routing | Path::Routing6 => Ok(Installed::Nothing),
        Path::SshFwd(attach, pod_ifaces) => {
            ssh_fwd(node, attach, pod_ifaces, Target::frontend(), Target::pod())
        }
        Path::SshFwd6(attach) => ssh_fwd(
            node,
            attach,
            PodIfaces::Auto,
            Target::frontend6(),
            Target::pod6(),
        ),
        Path::Iptables(n) => {
            restore(node, "iptables-restore", &[], &kube_rules::iptables(n))?;
            Ok(Installed::Nothing)
        }
        Path::Nftables(n) => {
            for batch in kube_rules::nftables(n) {
                restore(node, "nft", &["-f", "-"], &batch)?;
            }
            Ok(Installed::Nothing)
        }
        Path::Ipvs(n) => {
            restore(node, "ipvsadm-restore", &[], &kube_rules::ipvs(n))?;
            Ok(Installed::Nothing)
        }
        Path::Proxy => {
            let mut c = bed::helper(node)?;
            c.arg("proxy");
            let to = Target::pod();
            let from = Target::frontend();
            for (listen, target) in [
                (from.iperf_port, to.iperf_port),
                (from.echo_port, to.echo_port),
            ] {
                c.arg("--route")
                    .arg(format!("{}:{listen}={}:{target}", from.ip, to.ip));
            }
            let child = bed::spawn(&mut c)?;
            let installed = Installed::Proxy(child);
            bed::wait_listening(node, from.iperf_port)?;
            bed::wait_listening(node, from.echo_port)?;
            Ok(installed)
        }
    }
}

/// The release agent in static-file mode with the two benchmark mappings,
/// `from`'s ports to `to`'s.
fn ssh_fwd(
    node: &NetNs,
    attach: Attach,
    pod_ifaces: PodIfaces,
    from: Target,
    to: Target,
) -> anyhow::Result<Installed> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("mappings.yaml");
    let iperf = (from.socket(from.iperf_port), to.socket(to.iperf_port));
    let echo = (from.socket(from.echo_port), to.socket(to.echo_port));
    write_mappings(
        &file,
        &[
            ("iperf", iperf.0.as_str(), iperf.1.as_str()),
            ("echo", echo.0.as_str(), echo.1.as_str()),
        ],
    )?;
    let bpffs = Bpffs::new()?;
    super::cleanup::remember_bpffs(bpffs.path());
    let pod_ifaces = match pod_ifaces {
        PodIfaces::Auto => "auto",
        PodIfaces::Off => "off",
    };
    let agent = Agent::start(
        node,
        &[EXT_IFACE],
        &file,
        &bpffs,
        &["--attach", attach.arg(), "--pod-ifaces", pod_ifaces],
    )
    .with_context(|| format!("starting the agent with --attach {}", attach.arg()))?;
    Ok(Installed::SshFwd {
        _agent: agent,
        bpffs,
        _dir: dir,
    })
}

/// Feeds `input` to a restore tool inside the node namespace.
fn restore(node: &NetNs, tool: &str, args: &[&str], input: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rules");
    std::fs::write(&file, input)?;
    let stdin = std::fs::File::open(&file)?;
    cmd::run(node.command(tool).args(args).stdin(stdin))
        .with_context(|| format!("{tool} rejected the generated rules"))?;
    Ok(())
}

/// Why IPVS cannot be measured here, if it cannot.
pub fn ipvs_unavailable() -> Option<String> {
    if FsPath::new("/proc/net/ip_vs").exists() {
        return None;
    }
    let loaded = std::process::Command::new("modprobe")
        .arg("ip_vs")
        .output()
        .is_ok_and(|o| o.status.success());
    if loaded && FsPath::new("/proc/net/ip_vs").exists() {
        return None;
    }
    Some("this kernel has no ip_vs module (modprobe ip_vs failed), so IPVS was not measured".into())
}
