//! Who may put a frontend option (or IPv6 header) on a SYN. Pods cross
//! the cluster interface too: a pod that writes the option itself must
//! not get its SYN out of its node with it, and a node with the cluster's
//! key believes only sealed ones, so a pod on a node without ssh-fwd gains
//! nothing either.

use ssh_fwd::datapath::object::PROG_EGRESS_TC;
use ssh_fwd_common::{
    ipopt,
    maps::{IFACE_CLUSTER, IFACE_POD_PEER},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB,
    conntrack::{CLIENT_ISN, each_ingress, frontend},
    counters, delta,
    ipv6::{self, own6},
    load, option,
    option6::{self, JOB6},
    set_iface_index_flags, test_run_tc_on,
    unchecked::no_state,
};

/// A pod's interface.
const POD: u32 = 9;
const KEY: [u64; 2] = [0x0123_4567_89ab_cdef, 0x0fed_cba9_8765_4321];

/// A pod's SYN to the pod of the mapping, spoofing the client's address.
fn pod_syn() -> Vec<u8> {
    option::syn_to_pod(CLIENT_ISN)
}

fn pod_syn6() -> Vec<u8> {
    option6::syn_to_pod(CLIENT_ISN)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_a_pod_wrote_the_option_on_does_not_leave_its_node() {
    privilege::require();
    for key in [None, Some(KEY)] {
        for (what, frame) in [
            ("IPv4", ipopt::add(&pod_syn(), frontend(8022))),
            (
                "IPv4 sealed",
                ipopt::add_sealed(&pod_syn(), frontend(8022), KEY),
            ),
            ("IPv6", ipopt::add6(&pod_syn6(), ipv6::frontend())),
            (
                "IPv6 sealed",
                ipopt::add_sealed6(&pod_syn6(), ipv6::frontend(), KEY),
            ),
        ] {
            let l = load(&[JOB, JOB6]);
            if key.is_some() {
                option6::write_key(&l, Some(KEY));
            }
            set_iface_index_flags(&l, POD, IFACE_POD_PEER);
            for from in [POD, 0] {
                let before = counters(&l);
                let (verdict, _) = test_run_tc_on(&l, PROG_EGRESS_TC, &frame, from, 0);
                assert_eq!(verdict, 2, "{what} from {from}, key {key:?}: TC_ACT_SHOT");
                assert_eq!(
                    delta(&before, &counters(&l)),
                    vec![("frontend_option_untrusted", 1)],
                    "{what} from {from}, key {key:?}"
                );
            }
            // The same SYN without the option leaves as it is.
            let plain = if what.starts_with("IPv4") {
                pod_syn()
            } else {
                pod_syn6()
            };
            let (verdict, out) = test_run_tc_on(&l, PROG_EGRESS_TC, &plain, POD, 0);
            assert_eq!((verdict, out), (u32::MAX, plain), "{what}: TC_ACT_UNSPEC");
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_node_with_the_key_believes_no_plain_option_even_on_a_cluster_interface() {
    privilege::require();
    each_ingress(|ingress| {
        for (what, frame, clean) in [
            ("IPv4", ipopt::add(&pod_syn(), frontend(8022)), pod_syn()),
            (
                "IPv6",
                ipopt::add6(&pod_syn6(), ipv6::frontend()),
                pod_syn6(),
            ),
        ] {
            let l = load(&[JOB, JOB6]);
            own6(&l);
            option6::write_key(&l, Some(KEY));
            set_iface_index_flags(&l, 1, IFACE_CLUSTER);
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &frame);
            assert_eq!(out, clean, "{ingress:?}, {what}: removed");
            let d = delta(&before, &counters(&l));
            assert!(
                d.contains(&("frontend_option_untrusted", 1)),
                "{ingress:?}, {what}: {d:?}"
            );
            assert!(no_state(&l), "{ingress:?}, {what}: no state");
        }
    });
}
