//! What a node that is itself a container (a kind node, minikube's docker
//! driver, a lab's network namespace) does to the data path, found once at
//! start, before anything is attached. Each finding is one warning naming
//! what will not work and the mount or flag that fixes it (docs/kind.md).
//!
//! None refuses the start: each names a setting that works elsewhere, or
//! works until later (pins until the container goes), and the agent cannot
//! always tell (a veth's peer may get its XDP program after the agent
//! starts). Each check is built so that a bare-metal node, whose agent runs
//! in the machine's own namespaces or in a pod on them, finds nothing.

mod mountinfo;

use std::{os::unix::fs::MetadataExt as _, path::Path};

use mountinfo::{Mount, Propagation};

use super::AgentArgs;
use crate::datapath::{
    cgroup,
    hairpin::HairpinMode,
    hooks::AttachMode,
    netdev::{Kind, Netlink, Peer},
};

/// The inode numbers the kernel gives its initial PID and network
/// namespaces (`include/linux/proc_ns.h`; the network one only on kernels
/// that fix it, 6.x).
const INITIAL_PID_NS: u64 = 0xEFFF_FFFC;
const INITIAL_NET_NS: u64 = 0xEFFF_FFF9;

/// Logs one warning per finding.
pub async fn check(args: &AgentArgs, ifaces: &[String]) {
    let mut found = Vec::new();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = &args.bpffs.bpffs;
    found.extend(pins_finding(
        in_container(),
        dir,
        mountinfo::holding(&mountinfo, dir).as_ref(),
    ));
    if args.hairpin != HairpinMode::Off
        && let Some(root) = args.cgroup_root.clone().or_else(cgroup::default_root)
        && cgroup::is_cgroup2(&root).unwrap_or(false)
    {
        let machine_root = !root.join("cgroup.events").exists();
        found.extend(hairpin_finding(own_netns(), &root, machine_root));
    }
    if args.attach == AttachMode::Xdp {
        found.extend(veth_findings(ifaces).await);
    }
    for warning in found {
        tracing::warn!("{warning}");
    }
}

/// In a PID namespace other than the machine's: a container.
fn in_container() -> bool {
    ns_inode("pid").is_some_and(|ino| ino != INITIAL_PID_NS)
}

/// In a network namespace other than the machine's: a node in a container,
/// or a lab's namespace. Where the kernel does not fix the initial one's
/// number, a sysctl only the initial namespace has tells.
fn own_netns() -> bool {
    let initial = ns_inode("net") == Some(INITIAL_NET_NS)
        || Path::new("/proc/sys/net/core/bpf_jit_enable").exists();
    !initial
}

fn ns_inode(kind: &str) -> Option<u64> {
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// Pins outlive the agent only on a bpffs the node keeps. In a container,
/// a mount with no peer may be one made inside it, which goes with it;
/// where the agent must mount bpffs itself, only a shared parent carries
/// that mount out. Outside a container every mount is the node's.
fn pins_finding(in_container: bool, dir: &Path, mount: Option<&Mount>) -> Option<String> {
    let mount = mount.filter(|_| in_container)?;
    let on_bpffs = mount.fstype == "bpf";
    let leaves = match mount.propagation {
        Propagation::Shared => false,
        Propagation::Receiving => !on_bpffs,
        Propagation::Private => true,
    };
    leaves.then(|| {
        format!(
            "--bpffs {}: its mount {} ({}) is not shared with the node (no shared: or master: \
             peer in /proc/self/mountinfo), so pinned maps and links made there may go with \
             this container, and forwarding with them; mount the node's /sys/fs/bpf into the \
             container with mountPropagation: HostToContainer (Bidirectional if bpffs is \
             mounted from inside; podman and docker: -v /sys/fs/bpf:/sys/fs/bpf:rshared) \
             (docs/kind.md)",
            dir.display(),
            mount.mount_point.display(),
            if on_bpffs { "bpffs" } else { "no bpffs yet" },
        )
    })
}

/// The socket hooks act on every process below `--cgroup-root`. The root
/// of the whole hierarchy (no `cgroup.events` there) is right on a node
/// that is a machine, and wrong on a node in its own network namespace
/// that shares the machine's cgroups: a kind node without a cgroup
/// namespace of its own.
fn hairpin_finding(own_netns: bool, root: &Path, machine_root: bool) -> Option<String> {
    (own_netns && machine_root).then(|| {
        format!(
            "hairpin: --cgroup-root {} is the machine's root cgroup (it has no cgroup.events) \
             while this node has a network namespace of its own, as a kind or minikube node \
             without a cgroup namespace of its own has: the socket hooks would translate the \
             connects of every process on the machine (ssh from the host to the SSH IP \
             included) and every such node's agent would hook the same cgroup; give the node \
             container its own cgroup namespace (docker run --cgroupns=private, on cgroup v2 \
             the default) or pass --hairpin off (docs/kind.md)",
            root.display()
        )
    })
}

/// What the agent learnt of a veth's peer.
enum PeerXdp {
    Runs,
    RunsNone,
    Unreadable(String),
}

/// Native XDP on a veth hands what it sends back out (`XDP_TX`) to the
/// peer only if the peer runs a native XDP program; otherwise the kernel
/// drops it.
fn veth_finding(iface: &str, peer: Peer, xdp: &PeerXdp) -> Option<String> {
    let what = match xdp {
        PeerXdp::Runs => return None,
        PeerXdp::RunsNone => "runs none".to_owned(),
        PeerXdp::Unreadable(why) => format!("could not be read ({why})"),
    };
    Some(format!(
        "--attach xdp on veth {iface}: frames the program sends back out (XDP_TX: ARP answers \
         with --announce l2, resets with --deny-action reset) reach its peer only if the peer \
         runs a native XDP program, and the peer (index {} in network namespace id {}) {what}, \
         so such frames are dropped; use --attach tc (the default on veth) or --attach \
         xdp-generic, or attach an XDP program to the peer (docs/kind.md)",
        peer.index, peer.netns_id
    ))
}

async fn veth_findings(ifaces: &[String]) -> Vec<String> {
    let Ok(netlink) = Netlink::open() else {
        return Vec::new();
    };
    let Ok(links) = netlink.links().await else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for link in links.iter().filter(|l| ifaces.contains(&l.name)) {
        let Some(peer) = link.peer.filter(|_| link.kind == Kind::Veth) else {
            continue;
        };
        let xdp = match netlink.runs_native_xdp(peer).await {
            Ok(true) => PeerXdp::Runs,
            Ok(false) => PeerXdp::RunsNone,
            Err(e) => PeerXdp::Unreadable(format!("{e:#}")),
        };
        found.extend(veth_finding(&link.name, peer, &xdp));
    }
    found
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn mount(fstype: &str, propagation: Propagation) -> Mount {
        Mount {
            mount_point: PathBuf::from("/sys/fs/bpf"),
            fstype: fstype.into(),
            propagation,
        }
    }

    #[test]
    fn a_bare_metal_agent_never_hears_about_its_pins_whatever_the_mount() {
        let dir = Path::new("/sys/fs/bpf/ssh-fwd");
        for p in [
            Propagation::Shared,
            Propagation::Receiving,
            Propagation::Private,
        ] {
            for fs in ["bpf", "sysfs"] {
                assert_eq!(pins_finding(false, dir, Some(&mount(fs, p))), None);
            }
        }
    }

    #[test]
    fn in_a_container_only_a_mount_joined_to_the_node_keeps_the_pins() {
        let dir = Path::new("/sys/fs/bpf/ssh-fwd");
        let finding = |fs, p| pins_finding(true, dir, Some(&mount(fs, p)));
        assert_eq!(finding("bpf", Propagation::Shared), None, "Bidirectional");
        assert_eq!(
            finding("bpf", Propagation::Receiving),
            None,
            "HostToContainer"
        );
        let private = finding("bpf", Propagation::Private).unwrap();
        assert!(
            private.contains("mountPropagation: HostToContainer"),
            "{private}"
        );
        assert!(private.contains("--bpffs /sys/fs/bpf/ssh-fwd"), "{private}");
        // The agent will mount bpffs itself: only a shared parent carries
        // that mount to the node.
        assert_eq!(finding("sysfs", Propagation::Shared), None);
        let receiving = finding("sysfs", Propagation::Receiving).unwrap();
        assert!(receiving.contains("no bpffs yet"), "{receiving}");
        assert_eq!(pins_finding(true, dir, None), None, "no mountinfo");
    }

    #[test]
    fn hairpin_on_the_machines_root_is_named_only_for_a_node_in_its_own_network() {
        let root = Path::new("/host/sys/fs/cgroup");
        assert_eq!(hairpin_finding(false, root, true), None, "bare metal");
        assert_eq!(hairpin_finding(true, root, false), None, "own cgroupns");
        assert_eq!(hairpin_finding(false, root, false), None);
        let kind = hairpin_finding(true, root, true).unwrap();
        assert!(kind.contains("--cgroupns=private"), "{kind}");
        assert!(kind.contains("--hairpin off"), "{kind}");
    }

    #[test]
    fn a_veth_peer_without_xdp_or_unreadable_is_named_with_the_fix() {
        let peer = Peer {
            netns_id: 3,
            index: 7,
        };
        assert!(veth_finding("eth0", peer, &PeerXdp::Runs).is_none());
        let none = veth_finding("eth0", peer, &PeerXdp::RunsNone).unwrap();
        assert!(none.contains("veth eth0"), "{none}");
        assert!(
            none.contains("index 7 in network namespace id 3) runs none"),
            "{none}"
        );
        assert!(none.contains("--attach tc"), "{none}");
        let unread = veth_finding("eth0", peer, &PeerXdp::Unreadable("EPERM".into())).unwrap();
        assert!(unread.contains("could not be read (EPERM)"), "{unread}");
    }
}
