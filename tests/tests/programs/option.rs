//! The frontend option through the real programs: added to a translated
//! SYN as it leaves for another node, learned and removed on the node of
//! the pod, byte for byte against `ssh_fwd_common::ipopt`.

use ssh_fwd::datapath::object::PROG_EGRESS_TC;
use ssh_fwd_common::{
    conntrack::TCP_SYN,
    fixtures::Frame,
    ipopt,
    maps::Endpoint,
    packet::{self, Side},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB,
    conntrack::{BACKEND, CLIENT, CLIENT_ISN, Ingress, entries, frontend, request},
    counters, delta, load,
};
use ssh_fwd::datapath::conntrack::Entry;

const SHARED: (&str, &str, &str) = ("second", "198.18.0.10:9022", "10.244.1.5:22");

/// The SYN as the pod's node receives it: translated, from the client.
fn translated_syn() -> Vec<u8> {
    Frame {
        src: CLIENT,
        sport: 40_000,
        dst: BACKEND,
        dport: 22,
        tcp_flags: TCP_SYN,
        seq: CLIENT_ISN,
        ..Frame::default()
    }
    .build()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_translated_syn_leaving_the_node_carries_its_frontend() {
    privilege::require();
    let l = load(&[JOB, SHARED]);
    let (_, translated) = Ingress::Tc.run(&l, &request(9022, TCP_SYN, CLIENT_ISN, 0, 0));
    let tcp = packet::classify(&translated).expect("classify");
    assert_eq!(
        packet::endpoint(&translated, tcp, Side::Destination),
        Endpoint::new(BACKEND, 22)
    );
    let before = counters(&l);
    let (_, out) = super::test_run_tc(&l, PROG_EGRESS_TC, &translated);
    assert_eq!(out, ipopt::add(&translated, frontend(9022)));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("frontend_option_added", 1)]
    );
    // A SYN to the pod that no frontend translated (in-cluster): nothing.
    let in_cluster = Frame {
        sport: 40_001,
        ..Frame::default()
    };
    let in_cluster = Frame {
        dst: BACKEND,
        dport: 22,
        tcp_flags: TCP_SYN,
        ..in_cluster
    }
    .build();
    assert_eq!(
        super::test_run_tc(&l, PROG_EGRESS_TC, &in_cluster).1,
        in_cluster
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_pods_node_learns_the_frontend_and_the_pod_gets_the_syn_as_sent() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB, SHARED]);
        let syn = translated_syn();
        let before = counters(&l);
        let (_, out) = ingress.run(&l, &ipopt::add(&syn, frontend(9022)));
        assert_eq!(out, syn, "{ingress:?}: the option is removed");
        assert!(delta(&before, &counters(&l)).contains(&("frontend_option_learned", 1)));
        let learned: Vec<_> = entries(&l)
            .into_iter()
            .filter_map(|e| match e {
                Entry::HalfOpen(k, h) => Some((k.client(), h.frontend)),
                Entry::Established(..) => None,
            })
            .collect();
        assert_eq!(
            learned,
            [(Endpoint::new(CLIENT, 40_000), frontend(9022))],
            "{ingress:?}"
        );
        // A SYN without the option to the pod: in-cluster, no state.
        let l = load(&[JOB]);
        assert_eq!(ingress.run(&l, &syn).1, syn);
        assert!(entries(&l).is_empty(), "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_option_naming_a_frontend_of_another_backend_is_removed_and_ignored() {
    privilege::require();
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        let l = load(&[JOB, ("other", "198.18.0.10:9500", "10.244.9.9:22")]);
        let syn = translated_syn();
        let before = counters(&l);
        let (_, out) = ingress.run(&l, &ipopt::add(&syn, Endpoint::new(frontend(0).ip(), 9500)));
        assert_eq!(out, syn, "{ingress:?}");
        assert!(delta(&before, &counters(&l)).contains(&("frontend_option_rejected", 1)));
        assert!(entries(&l).is_empty(), "{ingress:?}");
    }
}
