//! IPv6 through a node running ssh-fwd, under tc and XDP: ssh through an
//! IPv6 frontend lands in the pod, which sees the client's own address;
//! 64 MiB go each way bit for bit; traffic to a pod's own IPv6 address (no
//! frontend) passes the programs untouched and counted; IPv4 frontends
//! keep working beside IPv6 ones.

use crate::common::{Bed, FRONTEND, Session};
use ssh_fwd_tests::{
    Topology, privilege,
    topology::{CLIENT_IP6, EXTERNAL_IP6, pod_ip6},
};

/// The IPv6 frontend, to pod 1's IPv6 address.
const FRONTEND6: &str = "[fd00:198::10]:8022";
const BACKEND6: &str = "[fd00:244:1::5]:22";

/// One node with pod 1, IPv6 added, an IPv4 and an IPv6 mapping to the
/// pod, the agent attached `mode`.
fn dual_stack(mode: &str) -> Bed {
    let topo = Topology::single_node(1).unwrap();
    topo.add_ipv6().unwrap();
    Bed::start(
        topo,
        &[
            ("job", FRONTEND, "10.244.1.5:22"),
            ("job6", FRONTEND6, BACKEND6),
        ],
        &["--attach", mode],
    )
    .unwrap()
}

fn through_ipv6_frontend(mode: &str) {
    let bed = dual_stack(mode);
    let ssh = bed.ssh();
    let seen = ssh
        .run(
            bed.client(),
            EXTERNAL_IP6,
            8022,
            "hostname; echo $SSH_CLIENT",
        )
        .unwrap();
    let mut lines = seen.lines();
    assert_eq!(
        lines.next(),
        Some("pod-1"),
        "{mode}: the IPv6 frontend's pod"
    );
    let client = lines.next().unwrap_or_default();
    assert!(
        client.starts_with(&format!("{CLIENT_IP6} ")),
        "{mode}: the pod sees the client's own address, not the node's: {client:?}"
    );
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1", "IPv4 beside it");
    let list = bed.bpffs[0].list().unwrap();
    let job6 = list["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "job6")
        .cloned()
        .unwrap();
    assert_eq!(job6["frontend"], FRONTEND6, "{list}");
    assert!(job6["packets_in"].as_u64().unwrap() > 5, "{job6}");
    assert!(job6["packets_out"].as_u64().unwrap() > 5, "{job6}");
    assert!(list["counters"]["conn_established"].as_u64().unwrap() >= 2);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ssh_through_an_ipv6_frontend_lands_in_the_pod_under_tc() {
    privilege::require();
    through_ipv6_frontend("tc");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ssh_through_an_ipv6_frontend_lands_in_the_pod_under_generic_xdp() {
    privilege::require();
    through_ipv6_frontend("xdp-generic");
}

/// 64 MiB up and 64 MiB down through the IPv6 frontend; with
/// `software_checksums`, every veth's receiver verifies each checksum,
/// without, the pod's replies reach the programs with their checksum still
/// to be completed.
fn bulk_ipv6(mode: &str, software_checksums: bool) {
    let bed = dual_stack(mode);
    if software_checksums {
        bed.topo.software_checksums().unwrap();
    }
    crate::common::copy_64mib_both_ways(&bed, EXTERNAL_IP6, mode);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_over_ipv6_is_bit_identical_with_tc_ingress() {
    privilege::require();
    bulk_ipv6("tc", true);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_over_ipv6_is_bit_identical_with_checksum_offload_on() {
    privilege::require();
    bulk_ipv6("tc", false);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bulk_64mib_each_way_over_ipv6_is_bit_identical_with_generic_xdp() {
    privilege::require();
    bulk_ipv6("xdp-generic", true);
}

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

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_backend_behind_two_frontends_answers_with_the_frontend_each_client_used() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    topo.add_ipv6().unwrap();
    let bed = Bed::start(
        topo,
        &[
            ("first", FRONTEND6, BACKEND6),
            ("second", "[fd00:198::10]:9022", BACKEND6),
        ],
        &["--attach", "tc"],
    )
    .unwrap();
    let ssh = bed.ssh();
    let mut one = Session::open_at(&ssh, bed.client(), EXTERNAL_IP6, 8022).unwrap();
    let mut two = Session::open_at(&ssh, bed.client(), EXTERNAL_IP6, 9022).unwrap();
    one.echo("one").unwrap();
    two.echo("two").unwrap();
    let sockets =
        ssh_fwd_tests::cmd::run(
            bed.client()
                .command("ss")
                .args(["-Htn", "state", "established"]),
        )
        .unwrap();
    assert!(
        sockets.contains("[fd00:198::10]:8022") && sockets.contains("[fd00:198::10]:9022"),
        "each client's connection to the frontend it dialled: {sockets}"
    );
    let list = bed.bpffs[0].list().unwrap();
    assert!(list["tracked_connections"].as_u64().unwrap() >= 2, "{list}");
    assert!(
        list["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["shared_backend"] == true),
        "{list}"
    );
    one.echo("still").unwrap();
}
