//! The XDP ingress program's cases, in both families: the hit of an
//! established connection, and a SYN from another node whose frontend is
//! learned and removed. XDP translates in place and passes the packet to
//! the stack, which routes it (no route lookup, no redirect here), so its
//! rows compare with each other and with the tc rows' parse, lookup and
//! rewrite, not with their route and redirect.

use std::net::Ipv6Addr;

use ssh_fwd_common::{fixtures::Frame, ipopt, maps::Endpoint6};

use super::{
    CROSS_NODE_FRONTEND, Case, Effect, ISN_XDP_CROSS_NODE, ISN_XDP_CROSS_NODE6, LEARNED, POD,
    PORT_CROSS_NODE, PORT_ESTABLISHED, REPEAT, XDP_PASS, frontend_option,
    ipv6::{CROSS_NODE_FRONTEND6, POD6},
    to_pod,
};
use crate::bench::{
    bed::{ECHO_PORT, IPERF_PORT},
    progs::packets::{Conn, Expect, Program, effect, step},
};

/// Translated in place, handed to the stack.
const DNAT_PASSED: Effect = effect(XDP_PASS, &["dnat"]);
/// [`LEARNED`]'s counters, with XDP's verdict.
const LEARNED_XDP: Effect = effect(XDP_PASS, LEARNED.counts);

pub fn all() -> Vec<Case> {
    vec![
        Case {
            what: "request, ACK of an established connection: entry looked up, DNAT in place, passed to the stack",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_ESTABLISHED);
                (
                    vec![],
                    step(Program::IngressXdp, c.data(), Expect::both(DNAT_PASSED)),
                )
            },
        },
        Case {
            what: "IPv6 request, ACK of an established connection: CONNS6 entry looked up, DNAT in place, passed to the stack",
            repeat: REPEAT,
            packets: |_| {
                let c = Conn {
                    client_port: PORT_ESTABLISHED,
                    backend: (POD6, ECHO_PORT),
                };
                (
                    vec![],
                    step(Program::IngressXdp, c.data(), Expect::ipv6(DNAT_PASSED)),
                )
            },
        },
        Case {
            what: "request from another node on a cluster interface of a node without the key, SYN carrying its frontend in a plain IP option: option read and checked, half-open entry written, option removed (the headers moved); one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = Conn {
                    client_port: PORT_CROSS_NODE,
                    backend: (POD, IPERF_PORT),
                };
                let syn = Frame {
                    ip_options: frontend_option(CROSS_NODE_FRONTEND),
                    ..c.syn_isn(ISN_XDP_CROSS_NODE + u32::from(instance))
                };
                let learned = Expect::tracking(None, Some(LEARNED_XDP));
                let timed = step(Program::IngressXdp, syn, learned)
                    .arriving_from_another_node()
                    .on_a_node_without_a_key();
                (vec![], timed)
            },
        },
        Case {
            what: "IPv6 request from another node on a cluster interface of a node without the key, SYN carrying its frontend in a plain Destination Options header (24 bytes): header read and checked, half-open entry written, header removed (the headers moved up); one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c: Conn<Ipv6Addr> = Conn {
                    client_port: PORT_CROSS_NODE,
                    backend: (POD6, IPERF_PORT),
                };
                let syn = c.syn_isn(ISN_XDP_CROSS_NODE6 + u32::from(instance));
                let frontend = Endpoint6::new6(CROSS_NODE_FRONTEND6.0, CROSS_NODE_FRONTEND6.1);
                let carried = ipopt::add6(&syn.build(), frontend);
                let timed = step(Program::IngressXdp, carried, Expect::ipv6(LEARNED_XDP))
                    .arriving_from_another_node()
                    .on_a_node_without_a_key()
                    .across_nodes6();
                (vec![], timed)
            },
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::all;
    use crate::bench::progs::packets::Program;

    #[test]
    fn every_xdp_case_times_the_xdp_program_and_needs_it() {
        for case in all() {
            let (setup, timed) = (case.packets)(0);
            assert!(setup.is_empty(), "{}", case.what);
            assert_eq!(timed.program, Program::IngressXdp, "{}", case.what);
            assert!(timed.needs.xdp, "{}", case.what);
        }
    }
}
