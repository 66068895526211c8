//! Paths across nodes and backends behind several frontends.

use crate::common::{Bed, FRONTEND, Session, mapping_counters};
use ssh_fwd_tests::{Topology, cmd, privilege};

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn request_enters_node_a_pod_on_node_b_reply_leaves_node_b() {
    privilege::require();
    // Every node holds every mapping; the pod is 10.244.1.5 on node B.
    let bed = Bed::start(
        Topology::two_nodes().unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &[],
    )
    .unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    session.echo("across").unwrap();
    let (a_in, a_out) = mapping_counters(&bed.bpffs[0], FRONTEND).unwrap();
    let (b_in, b_out) = mapping_counters(&bed.bpffs[1], FRONTEND).unwrap();
    assert!(
        a_in > 0 && a_out == 0,
        "node A DNATs requests and sees no reply: in {a_in} out {a_out}"
    );
    assert!(
        b_in == 0 && b_out > 0,
        "node B reverse-NATs replies only: in {b_in} out {b_out}"
    );
    // The reply really left through node B: the client received it on eth1.
    let eth1 = cmd::run(
        bed.client()
            .command("ip")
            .args(["-s", "-j", "link", "show", "eth1"]),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&eth1).unwrap();
    let rx = v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0);
    assert!(
        rx >= b_out,
        "client eth1 received {rx} packets, node B sent {b_out}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn backend_behind_two_frontends_answers_with_the_frontend_each_client_used() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[
            ("first", FRONTEND, "10.244.1.5:22"),
            ("second", "198.18.0.10:9022", "10.244.1.5:22"),
        ],
        &[],
    )
    .unwrap();
    let mut one = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    let mut two = Session::open(&bed.ssh(), bed.client(), 9022).unwrap();
    one.echo("one").unwrap();
    two.echo("two").unwrap();
    let sockets = cmd::run(
        bed.client()
            .command("ss")
            .args(["-Htn", "state", "established"]),
    )
    .unwrap();
    assert!(
        sockets.contains("198.18.0.10:8022") && sockets.contains("198.18.0.10:9022"),
        "{sockets}"
    );
    let list = bed.bpffs[0].list().unwrap();
    assert!(list["tracked_connections"].as_u64().unwrap() >= 2, "{list}");
    assert_eq!(
        list["counters"]["reverse_fallback"].as_u64(),
        Some(0),
        "{list}"
    );
    assert!(
        list["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["shared_backend"] == true)
    );
    let (_, out_two) = mapping_counters(&bed.bpffs[0], "198.18.0.10:9022").unwrap();
    assert!(out_two > 0, "replies on the second frontend counted there");

    one.echo("still").unwrap();
}
