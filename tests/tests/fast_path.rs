//! The pod-interface fast path end to end (`--pod-iface-reply`): requests handed
//! straight into the pod's namespace, replies reverse-NATed on the pod's
//! interface and sent straight out of the external one - and in-cluster
//! traffic to a mapped pod left alone.

use std::time::Duration;

use crate::common::{Bed, FRONTEND};
use ssh_fwd_tests::{Topology, cmd, privilege};

/// A node with `pods` pods and an agent mapping the frontend to pod 1.
fn pod_1_mapped(pods: usize) -> Bed {
    Bed::start(
        Topology::single_node(pods).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap()
}

/// Whether some interface carries the pod flag (`IFACE_POD_PEER`) in the
/// node's `IFACES` map (values as bpftool prints them: hex bytes).
fn pod_flagged(bed: &Bed) -> bool {
    let map = bed.bpffs[0].path().join(format!(
        "v{}/maps/IFACES",
        ssh_fwd_common::maps::LAYOUT_VERSION
    ));
    let out = cmd::run(
        std::process::Command::new("bpftool")
            .args(["-j", "map", "dump", "pinned"])
            .arg(map),
    )
    .unwrap();
    let flag = format!("0x{:02x}", ssh_fwd_common::maps::IFACE_POD_PEER);
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .any(|entry| entry["value"][0] == flag.as_str())
}

fn counter(bed: &Bed, name: &str) -> u64 {
    bed.bpffs[0].list().unwrap()["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ssh_session_takes_the_fast_path_both_ways() {
    privilege::require();
    let bed = pod_1_mapped(1);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let list = bed.bpffs[0].list().unwrap();
    // `list` runs outside the node's namespace here, so compare indexes.
    let pod1 = cmd::run(
        bed.topo.nodes[0]
            .ns
            .command("ip")
            .args(["-o", "link", "show", "pod1"]),
    )
    .unwrap();
    let index: u64 = pod1.split(':').next().unwrap().trim().parse().unwrap();
    assert_eq!(
        list["pod_interfaces"].as_array().map(Vec::len),
        Some(1),
        "{list:#}"
    );
    assert_eq!(list["pod_interfaces"][0]["index"].as_u64(), Some(index));
    let c = &list["counters"];
    let (peer, replies) = (
        c["redirected_peer"].as_u64().unwrap(),
        c["reply_redirected"].as_u64().unwrap(),
    );
    // The first request to a pod finds no neighbour entry and goes through
    // neighbour resolution; the rest of the session goes into the pod.
    assert!(peer > 5, "requests handed into the pod: {c}");
    assert!(replies > 5, "replies sent straight out: {c}");
    assert_eq!(
        c["reverse_nat"].as_u64(),
        Some(replies),
        "every reply was reverse-NATed on the pod's interface, none at egress: {c}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pods_own_ssh_to_a_mapped_pod_is_left_alone() {
    privilege::require();
    // MPI ranks ssh to each other's pod IP: no frontend translated those
    // connections, so their replies are nobody's to rewrite, whatever the
    // route; they keep the pod's address.
    let bed = pod_1_mapped(2);
    let rank1 = &bed.topo.pods[1].ns;
    let hostname = bed.ssh().run(rank1, "10.244.1.5", 22, "hostname").unwrap();
    assert_eq!(hostname, "pod-1");
    assert!(counter(&bed, "reply_untracked") > 5);
    assert_eq!(counter(&bed, "reverse_nat"), 0, "nothing was rewritten");
    // And the frontend still works alongside.
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert!(counter(&bed, "reply_redirected") > 5);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_interface_with_a_qdisc_gets_no_peer_redirects() {
    privilege::require();
    let bed = pod_1_mapped(1);
    // A bandwidth limit on the pod's interface, as the CNI bandwidth plugin
    // sets one: a peer redirect would bypass it.
    assert!(pod_flagged(&bed), "flagged before the qdisc");
    let node = &bed.topo.nodes[0].ns;
    cmd::run(node.command("tc").args([
        "qdisc", "add", "dev", "pod1", "root", "tbf", "rate", "1gbit", "burst", "256kb", "latency",
        "50ms",
    ]))
    .unwrap();
    // The next rescan (every 2 s) withdraws the flag.
    let withdrawn = cmd::wait_until(Duration::from_secs(10), || !pod_flagged(&bed));
    assert!(withdrawn, "pod1 still flagged for peer redirects");
    let before = counter(&bed, "redirected_peer");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(counter(&bed, "redirected_peer"), before, "no peer redirect");
    assert!(
        counter(&bed, "redirected") > 5,
        "still redirected, the ordinary way"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_restarted_agent_swaps_its_program_into_the_pod_links_it_inherits() {
    privilege::require();
    let mut bed = pod_1_mapped(1);
    let dir = bed.bpffs[0].path().join(format!(
        "v{}/pod-links",
        ssh_fwd_common::maps::LAYOUT_VERSION
    ));
    let pin = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .expect("one pod link pinned")
        .unwrap()
        .path();
    let program = || {
        let out = cmd::run(
            std::process::Command::new("bpftool")
                .args(["-j", "link", "show", "pinned"])
                .arg(&pin),
        )
        .unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["prog_id"]
            .as_u64()
            .unwrap()
    };
    let old = program();
    // An upgrade: the old agent goes, the link stays; a new one starts.
    bed.agents.clear();
    assert_eq!(program(), old, "the link outlives the agent");
    bed.agents.push(
        ssh_fwd_tests::Agent::start(
            &bed.topo.nodes[0].ns,
            &[ssh_fwd_tests::topology::EXT_IFACE],
            &bed.mappings,
            &bed.bpffs[0],
            &[],
        )
        .unwrap(),
    );
    // The first interface scan runs before the agent reports ready.
    assert_ne!(program(), old, "the new agent's program runs in the link");
    let before = counter(&bed, "reply_redirected");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert!(counter(&bed, "reply_redirected") > before);
}
