//! The IPv6 cases of the tc programs: the IPv4 cases' twins over the bed's
//! IPv6 addresses, through the IPv6 tables (`FRONTENDS6`, `CONNS6`...).
//! Only builds that track connections as their server confirms them have
//! IPv6 ([`Expect::ipv6`]), and a build without it skips them; the cases
//! of the frontend carried to another node need one that has that too
//! (3f04f10).

use std::net::Ipv6Addr;

use ssh_fwd_common::{ipopt, maps::Endpoint6};

use super::{
    CONFIRMED, CROSS_NODE_KEY, Case, Established, INTO_POD, ISN_CROSS_NODE6, ISN_EGRESS_OPTION6,
    ISN_FRESH_SYN6, ISN_PROBE6, ISN_SEALED6, LEARNED, PORT_CROSS_NODE, PORT_ESTABLISHED,
    PORT_HALF_OPEN, PORT_PROBE6, REPEAT, REPLY_OUT, SYN_INTO_POD, TC_ACT_REDIRECT, TC_ACT_UNSPEC,
};
use crate::bench::{
    bed::{ECHO_PORT, IPERF_FRONTEND_PORT, IPERF_PORT},
    progs::packets::{Conn, Expect, Program, Step, effect, step},
};

/// The pod's IPv6 address in the bed (`topology::pod_ip6(1)`).
pub const POD6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x244, 1, 0, 0, 0, 0, 5);
/// The SSH IP's IPv6 twin on the node's `lo` (`topology::EXTERNAL_IP6`).
pub const EXTERNAL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10);
/// The frontend of the pod's iperf port over IPv6: what an IPv6 SYN from
/// another node carries in its Destination Options header.
pub const CROSS_NODE_FRONTEND6: (Ipv6Addr, u16) = (EXTERNAL6, IPERF_FRONTEND_PORT);

const fn to_pod6(client_port: u16) -> Conn<Ipv6Addr> {
    Conn {
        client_port,
        backend: (POD6, ECHO_PORT),
    }
}

/// A connection from another node: to the pod's iperf port, a backend no
/// frontend of the node maps to itself.
const fn cross_node6(client_port: u16) -> Conn<Ipv6Addr> {
    Conn {
        client_port,
        backend: (POD6, IPERF_PORT),
    }
}

fn frontend6() -> Endpoint6 {
    Endpoint6::new6(CROSS_NODE_FRONTEND6.0, CROSS_NODE_FRONTEND6.1)
}

/// The IPv6 connection the bed establishes before any case runs.
pub fn established() -> Established {
    let c = to_pod6(PORT_ESTABLISHED);
    let claimed = Expect::ipv6(effect(
        TC_ACT_REDIRECT,
        &["dnat", "conn_claimed", "redirected_peer"],
    ));
    let mut steps = c.handshake(Expect::ipv6(SYN_INTO_POD), Expect::ipv6(REPLY_OUT), claimed);
    steps.push(step(
        Program::Reply,
        c.reply_data(),
        Expect::ipv6(CONFIRMED),
    ));
    Established {
        client: c.client(),
        backend: c.backend(),
        steps,
    }
}

/// A SYN from another node carrying its frontend in a sealed Destination
/// Options header, on a client port no case uses: a build that learns the
/// frontend counts `frontend_option_learned` (`Subject::learns_frontend6`).
pub fn probe6() -> Step {
    let syn = cross_node6(PORT_PROBE6).syn_isn(ISN_PROBE6);
    let carried = ipopt::add_sealed6(&syn.build(), frontend6(), CROSS_NODE_KEY);
    step(Program::Ingress, carried, Expect::ipv6(LEARNED))
}

pub fn all() -> Vec<Case> {
    vec![
        Case {
            what: "IPv6 request, SYN: half-open entry written in HALF_OPEN6 (a fresh ISN each time), DNAT, route, peer redirect into the pod; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let syn = to_pod6(PORT_HALF_OPEN).syn_isn(ISN_FRESH_SYN6 + u32::from(instance));
                (
                    vec![],
                    step(Program::Ingress, syn, Expect::ipv6(SYN_INTO_POD)),
                )
            },
        },
        Case {
            what: "IPv6 request, ACK of an established connection: CONNS6 entry looked up (its clock written once a second), DNAT, route, peer redirect",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod6(PORT_ESTABLISHED);
                (
                    vec![],
                    step(Program::Ingress, c.data(), Expect::ipv6(INTO_POD)),
                )
            },
        },
        Case {
            what: "IPv6 request from another node on a cluster interface of a node without the key, SYN carrying its frontend in a plain Destination Options header (24 bytes): header read and checked, half-open entry written, header removed; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let syn =
                    cross_node6(PORT_CROSS_NODE).syn_isn(ISN_CROSS_NODE6 + u32::from(instance));
                let carried = ipopt::add6(&syn.build(), frontend6());
                let timed = step(Program::Ingress, carried, Expect::ipv6(LEARNED))
                    .arriving_from_another_node()
                    .on_a_node_without_a_key()
                    .across_nodes6();
                (vec![], timed)
            },
        },
        Case {
            what: "IPv6 request from another node, SYN carrying its frontend in a sealed Destination Options header (32 bytes: the tag checked, SipHash-2-4 under the cluster's key): header read and checked, half-open entry written, header removed; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let syn = cross_node6(PORT_CROSS_NODE).syn_isn(ISN_SEALED6 + u32::from(instance));
                let carried = ipopt::add_sealed6(&syn.build(), frontend6(), CROSS_NODE_KEY);
                let timed = step(Program::Ingress, carried, Expect::ipv6(LEARNED)).across_nodes6();
                (vec![], timed)
            },
        },
        Case {
            what: "IPv6 reply of an established connection: CONNS6 entry looked up, reverse NAT, route, redirect out of ext0",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod6(PORT_ESTABLISHED);
                (
                    vec![],
                    step(Program::Reply, c.reply_data(), Expect::ipv6(REPLY_OUT)),
                )
            },
        },
        Case {
            what: "IPv6 egress, reverse NAT of an established connection's reply (--pod-ifaces off)",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod6(PORT_ESTABLISHED);
                let rewritten = Expect::ipv6(effect(TC_ACT_UNSPEC, &["reverse_nat"]));
                (vec![], step(Program::Egress, c.reply_data(), rewritten))
            },
        },
        Case {
            what: "IPv6 egress, a translated SYN leaving for the pod's node (its half-open entry written untimed first): Destination Options header added (with the bed's key: sealed, 32 bytes, its tag computed), the skb grown; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let syn = to_pod6(PORT_HALF_OPEN).syn_isn(ISN_EGRESS_OPTION6 + u32::from(instance));
                let added = Expect::ipv6(effect(TC_ACT_UNSPEC, &["frontend_option_added"]));
                (
                    vec![step(
                        Program::Ingress,
                        syn.clone(),
                        Expect::ipv6(SYN_INTO_POD),
                    )],
                    // Only a SYN this node took in from outside gets the header.
                    step(Program::Egress, syn, added)
                        .arriving_from_outside()
                        .across_nodes6(),
                )
            },
        },
    ]
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use ssh_fwd_tests::topology::{CLIENT_IP6, EXTERNAL_IP6, pod_ip6};

    use super::{EXTERNAL6, POD6, all, established, probe6};
    use crate::bench::progs::packets::{CLIENT6, Layout};

    #[test]
    fn every_ipv6_packet_needs_ipv6_and_a_layout_that_confirms() {
        let mut steps = established().steps;
        steps.push(probe6());
        for case in all() {
            let (setup, timed) = (case.packets)(0);
            steps.extend(setup);
            steps.push(timed);
        }
        for step in steps {
            assert!(step.needs.ipv6, "{:?}", step.program);
            assert!(step.expect.on(Layout::V3).is_none());
            assert!(step.expect.on(Layout::V4).is_none());
            assert!(step.expect.on(Layout::V4Confirmed).is_some());
        }
    }

    #[test]
    fn the_cases_ipv6_addresses_are_the_beds() {
        let parse = |s: &str| s.parse::<Ipv6Addr>().expect("an IPv6 address");
        assert_eq!(CLIENT6, parse(CLIENT_IP6));
        assert_eq!(EXTERNAL6, parse(EXTERNAL_IP6));
        assert_eq!(POD6, parse(&pod_ip6(1)));
    }
}
