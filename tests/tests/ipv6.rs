//! IPv6 through a node running ssh-fwd, under tc and generic XDP: traffic
//! to a pod's own IPv6 address (no frontend) passes the programs untouched
//! and counted, while IPv4 frontends keep working. (Native XDP on a veth
//! delivers only to a peer with a program of its own; the same parse runs
//! there.)

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use common::{Bed, FRONTEND};
use ssh_fwd_tests::{Topology, privilege, topology::pod_ip6};

fn ipv6_to_a_pod_passes_untouched(mode: &str) {
    let topo = Topology::single_node(1).unwrap();
    topo.add_ipv6().unwrap();
    let bed = Bed::start(
        topo,
        &[("job", FRONTEND, "10.244.1.5:22")],
        &["--attach", mode],
    )
    .unwrap();
    let before = not_to_a_frontend(&bed);
    let hostname = bed
        .ssh()
        .run(bed.client(), &pod_ip6(1), 22, "hostname")
        .unwrap();
    assert_eq!(hostname, "pod-1", "ssh over IPv6 to the pod's own address");
    let after = not_to_a_frontend(&bed);
    // A login is dozens of segments each way; the pod's replies are not
    // counted under `--attach xdp*` (no program on the pod's interface).
    assert!(
        after >= before + 10,
        "the login's IPv6 packets are counted as passed: {before} -> {after}"
    );
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1", "IPv4 frontend");
}

fn not_to_a_frontend(bed: &Bed) -> u64 {
    let list = bed.bpffs[0].list().unwrap();
    list["counters"]["not_to_a_frontend"].as_u64().unwrap_or(0)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ipv6_to_a_pod_passes_untouched_under_tc() {
    privilege::require();
    ipv6_to_a_pod_passes_untouched("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ipv6_to_a_pod_passes_untouched_under_generic_xdp() {
    privilege::require();
    ipv6_to_a_pod_passes_untouched("xdp-generic");
}
