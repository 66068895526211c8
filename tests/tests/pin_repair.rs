//! Pins deleted behind a running agent's back (an `rm -rf` on bpffs, a
//! cleanup script) come back at its next resync: the maps are pinned again
//! from the agent's own handles, and the links, gone with their pins, are
//! attached and pinned again, so forwarding, hairpin and `ssh-fwd
//! list`/`status` come back by themselves. The agent here adopted its
//! links from a previous agent's pins, as after any restart or upgrade.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND, Session};
use aya::programs::{SchedClassifier, TcAttachType};
use ssh_fwd_common::maps::LAYOUT_VERSION;
use ssh_fwd_tests::{
    Agent, NetNs, Topology, cgroup::TestCgroup, cmd, privilege, topology::EXT_IFACE,
};

/// Every pin under `dir`, as paths relative to it, sorted.
fn pins(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                out.push(path.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `sock-probe tcp EXTERNAL_IP port` from `ns` in `cgroup`: `peer
/// FRONTEND` when hairpin translated the connect.
fn probe(cgroup: &TestCgroup, ns: &NetNs, port: u16) -> String {
    let bin = env!("CARGO_BIN_EXE_sock-probe");
    let out = cmd::run(
        cgroup
            .command(Some(ns), bin)
            .args(["tcp", EXTERNAL_IP, &port.to_string()]),
    )
    .unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

/// The programs attached with tcx to `iface` in `ns`: (ingress, egress).
fn tcx_programs(ns: &NetNs, iface: &str) -> (usize, usize) {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread().unwrap();
            let count = |t| SchedClassifier::query_tcx(iface, t).unwrap().1.len();
            (count(TcAttachType::Ingress), count(TcAttachType::Egress))
        })
        .join()
        .unwrap()
    })
}

/// The hairpin programs attached to `cgroup`.
fn cgroup_programs(cgroup: &TestCgroup) -> usize {
    let out = cmd::run(
        Command::new("bpftool")
            .args(["cgroup", "show"])
            .arg(cgroup.path()),
    )
    .unwrap();
    out.lines()
        .filter(|l| l.contains("connect") || l.contains("getpeername"))
        .count()
}

/// GET /metrics from the agent inside the node namespace.
fn metrics(node: &NetNs) -> String {
    let script = "exec 3<>/dev/tcp/127.0.0.1/9102; printf 'GET /metrics HTTP/1.1\\r\\nHost: agent\\r\\nConnection: close\\r\\n\\r\\n' >&3; cat <&3";
    cmd::run(node.command("timeout").args(["10", "bash", "-c", script])).unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn deleted_map_and_link_pins_are_restored_by_the_resync_and_forwarding_comes_back() {
    privilege::require();
    let cgroup = TestCgroup::new().unwrap();
    let root = cgroup.path().display().to_string();
    let args = [
        "--resync-interval",
        "1s",
        "--hairpin",
        "auto",
        "--cgroup-root",
        &root,
        "--metrics-addr",
        "127.0.0.1:9102",
    ];
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &args,
    )
    .unwrap();
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    // A restarted agent: every link is adopted from its pin.
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &args,
    )
    .unwrap();
    let node = &bed.topo.nodes[0].ns;
    let pod_iface = &bed.topo.pods[0].node_iface;
    let attached = || {
        (
            tcx_programs(node, EXT_IFACE),
            tcx_programs(node, pod_iface),
            cgroup_programs(&cgroup),
        )
    };
    assert_eq!(attached(), ((1, 1), (1, 0), 4));
    assert_eq!(probe(&cgroup, node, 8022), format!("peer {FRONTEND}"));
    let version = bed.bpffs[0].path().join(format!("v{LAYOUT_VERSION}"));
    let before = pins(&version);
    for pin in [
        "maps/FRONTENDS",
        "maps/CONNS",
        "maps/AGENT_STATUS",
        "links/ext0/ingress-tc",
        "links/ext0/egress-tc",
    ] {
        assert!(before.contains(&PathBuf::from(pin)), "{pin} in {before:?}");
    }
    let pod_link = before
        .iter()
        .find(|p| p.starts_with("pod-links"))
        .cloned()
        .expect("a reply link on the pod's interface");
    let hairpin: Vec<&PathBuf> = before.iter().filter(|p| p.starts_with("hairpin")).collect();
    assert_eq!(
        hairpin.len(),
        4,
        "connect and getpeername, 4 and 6: {before:?}"
    );
    let hooks = bed.bpffs[0].list_of("hooks").unwrap();

    // The map pins one by one, the links' directories whole.
    for map in std::fs::read_dir(version.join("maps")).unwrap() {
        std::fs::remove_file(map.unwrap().path()).unwrap();
    }
    for dir in ["links", "pod-links", "hairpin"] {
        std::fs::remove_dir_all(version.join(dir)).unwrap();
    }

    assert!(
        cmd::wait_until(Duration::from_secs(15), || pins(&version) == before),
        "pins not restored: {:?}, was {before:?}",
        pins(&version)
    );
    // Each program is attached once again: the links are new, none doubled.
    assert_eq!(attached(), ((1, 1), (1, 0), 4));
    // Forwarding is back: the open session (its connection state was kept),
    // new logins, and hairpin.
    session.echo("after-repair").unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(probe(&cgroup, node, 8022), format!("peer {FRONTEND}"));
    // The restored pins are read back by list and status.
    let list = bed.bpffs[0].list().unwrap();
    assert_eq!(list["mappings"].as_array().map_or(0, Vec::len), 1, "{list}");
    assert_eq!(list["hooks"], hooks, "the same hooks as before");
    assert!(list["tracked_connections"].as_u64().unwrap() >= 1, "{list}");
    let status = cmd::run(
        Command::new(ssh_fwd_tests::agent::binary().unwrap())
            .args(["status", "-o", "json", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["agent"], "running", "{status}");
    assert_eq!(status["mappings"], 1, "{status}");

    // Each repair is logged once, naming its pin, and counted.
    let log = bed.agents[0].log();
    for pin in [
        "maps/FRONTENDS",
        "links/ext0/ingress-tc",
        "links/ext0/egress-tc",
    ]
    .map(PathBuf::from)
    .iter()
    .chain([&pod_link])
    .chain(hairpin.iter().copied())
    {
        let path = version.join(pin).display().to_string();
        let lines = log
            .lines()
            // Quoted: FRONTENDS is a prefix of FRONTENDS6.
            .filter(|l| l.contains("restored") && l.contains(&format!("\"{path}\"")))
            .count();
        assert_eq!(lines, 1, "one log line restoring {path}:\n{log}");
    }
    let restored = before.len();
    assert!(
        metrics(node).contains(&format!("ssh_fwd_pins_restored_total {restored}")),
        "{}",
        metrics(node)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_deleted_xdp_link_pin_is_attached_again_in_its_mode() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &["--resync-interval", "1s", "--attach", "xdp-generic"],
    )
    .unwrap();
    let links = bed.bpffs[0]
        .path()
        .join(format!("v{LAYOUT_VERSION}/links/{EXT_IFACE}"));
    let before = pins(&links);
    assert_eq!(
        before,
        [PathBuf::from("egress-tc"), "ingress-xdp-generic".into()]
    );
    std::fs::remove_dir_all(&links).unwrap();
    assert!(
        cmd::wait_until(Duration::from_secs(15), || pins(&links) == before),
        "pins not restored: {:?}",
        pins(&links)
    );
    let xdp = cmd::run(
        bed.topo.nodes[0]
            .ns
            .command("ip")
            .args(["link", "show", EXT_IFACE]),
    )
    .unwrap();
    assert!(xdp.contains("xdpgeneric"), "{xdp}");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(
        bed.agents[0].count_in_log("restored"),
        2,
        "{}",
        bed.agents[0].log()
    );
}
