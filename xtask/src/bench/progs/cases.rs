//! The packets `bench progs` times, and what each data-path layout must do
//! with them: its verdict, and the outcome counters (`ssh-fwd list
//! counters`) each packet adds one to. The counters prove that a case
//! measures the state it names (a half-open entry written, a handshake
//! promoted, an option learned) rather than a miss that happens to get the
//! same verdict.
//!
//! A test run with `repeat` runs the program on one skb again and again and
//! keeps every iteration's writes, so the bed maps a frontend to itself (see
//! `subject.rs`), and each case says what a repeat does to the connection
//! state. Where the first iteration changes what the next one sees (an
//! option added or removed, a handshake promoted), the case runs one
//! iteration per test run, many test runs back to back (each starts from
//! the frame again), with fresh state each time where it needs it: its
//! `packets` get the instance's number.
//!
//! This file holds the IPv4 cases of the tc programs; `cases/ipv6.rs` the
//! IPv6 ones, `cases/xdp.rs` those of the XDP ingress program.

mod ipv6;
mod xdp;

use std::net::{Ipv4Addr, SocketAddr};

use ssh_fwd_common::{fixtures::Frame, ipopt, maps::Endpoint};

pub use self::ipv6::{CROSS_NODE_FRONTEND6, POD6, probe6};
use super::packets::{CLIENT, Conn, Effect, Expect, Program, Step, effect, step};
use crate::bench::bed::{ECHO_PORT, IPERF_FRONTEND_PORT, IPERF_PORT};

pub const POD: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 5);
/// A self-mapped frontend the node has no route to: the DNAT and the route
/// lookup without the redirect.
pub const UNROUTED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
pub const UNROUTED_PORT: u16 = 2222;
/// The frontend of the pod's iperf port (a backend that is no frontend):
/// what a SYN from another node carries in its IP option.
pub const CROSS_NODE_FRONTEND: (Ipv4Addr, u16) =
    (Ipv4Addr::new(198, 18, 0, 10), IPERF_FRONTEND_PORT);

pub const TC_ACT_UNSPEC: u64 = u32::MAX as u64;
pub const TC_ACT_REDIRECT: u64 = 7;
pub const XDP_PASS: u64 = 2;
/// Iterations per test run: below the 254 a TTL of 255 allows.
pub const REPEAT: u32 = 200;

/// Client ports, one per connection state the cases need (the same in
/// both families: their tables are apart).
const PORT_ESTABLISHED: u16 = 40_000;
const PORT_HALF_OPEN: u16 = 40_001;
const PORT_NO_STATE: u16 = 40_002;
const PORT_CROSS_NODE: u16 = 40_003;
/// No request ever: the ACK of PORT_NO_STATE leaves a claim the server's
/// reply would confirm.
const PORT_UNTRACKED: u16 = 40_004;
const PORT_GUARDED: u16 = 40_005;
/// Whether a build learns an IPv6 frontend (`ipv6::probe6`).
const PORT_PROBE6: u16 = 40_006;
/// The handshake-completion and confirmation cases take a fresh port per
/// run each.
const PORT_FRESH_BASE: u16 = 41_000;
const PORT_CONFIRM_BASE: u16 = 51_000;
/// Client ISNs of the cases that need a half-open entry of their own each
/// time: a SYN finds the entry of an earlier one with the same ISN (a
/// retransmission) and writes nothing. Apart by more than any case's
/// instances.
const ISN_RETRANSMITTED: u32 = 2_000_000;
const ISN_FRESH_SYN: u32 = 3_000_000;
const ISN_CROSS_NODE: u32 = 4_000_000;
const ISN_SYN_ACK: u32 = 5_000_000;
const ISN_EGRESS_OPTION: u32 = 6_000_000;
const ISN_SEALED: u32 = 7_000_000;
const ISN_GUARDED: u32 = 8_000_000;
/// The XDP and IPv6 cases' (`cases/xdp.rs`, `cases/ipv6.rs`).
const ISN_XDP_CROSS_NODE: u32 = 9_000_000;
const ISN_FRESH_SYN6: u32 = 10_000_000;
const ISN_CROSS_NODE6: u32 = 11_000_000;
const ISN_SEALED6: u32 = 12_000_000;
const ISN_EGRESS_OPTION6: u32 = 13_000_000;
const ISN_XDP_CROSS_NODE6: u32 = 14_000_000;
const ISN_PROBE6: u32 = 15_000_000;

/// The guarded mapping: its backend, a port of the pod nothing listens on
/// (a test run needs no listener), self-mapped like the echo one; the bed
/// gives it an allowlist of the client and a rate no bench run reaches.
pub const GUARDED_PORT: u16 = 7022;
pub const GUARDED_FRONTEND_PORT: u16 = 8022;

/// The cluster's key in the bed (with claims, the build seals the option
/// it adds and checks the sealed ones it reads).
pub const CROSS_NODE_KEY: [u64; 2] = [0x5eed_0000_0000_0001, 0x5eed_0000_0000_0002];

/// One packet case: the timed packet, and the untimed ones sent first (to
/// give it fresh state), given the instance's number (unique in the bench).
pub struct Case {
    pub what: &'static str,
    pub repeat: u32,
    pub packets: fn(u16) -> (Vec<Step>, Step),
}

const INTO_POD: Effect = effect(TC_ACT_REDIRECT, &["dnat", "redirected_peer"]);
const SYN_INTO_POD: Effect = effect(TC_ACT_REDIRECT, &["dnat", "half_opened", "redirected_peer"]);
const REPLY_OUT: Effect = effect(TC_ACT_REDIRECT, &["reverse_nat", "reply_redirected"]);
const NOT_FROM_BACKEND: Expect = Expect::both(effect(TC_ACT_UNSPEC, &["not_from_a_backend"]));
/// A server's first segment after the client's ACK: it confirms the claim
/// (and is a plain reply where the ACK established the connection).
const CONFIRMED: Effect = effect(
    TC_ACT_REDIRECT,
    &["reverse_nat", "conn_established", "reply_redirected"],
);
const CONFIRMS: Expect = Expect {
    confirmed: Some(CONFIRMED),
    ..Expect::both(REPLY_OUT)
};
/// A SYN from another node whose frontend is learned, the header or
/// option removed, and the SYN passed on to the stack (tc).
const LEARNED: Effect = effect(
    TC_ACT_UNSPEC,
    &[
        "frontend_option_learned",
        "half_opened",
        "not_to_a_frontend",
    ],
);

const fn to_pod(client_port: u16) -> Conn {
    Conn {
        client_port,
        backend: (POD, ECHO_PORT),
    }
}

/// A connection the bed establishes before any case runs.
pub struct Established {
    pub client: SocketAddr,
    pub backend: SocketAddr,
    /// Its handshake and the server's first segment.
    pub steps: Vec<Step>,
}

/// The connections the bed establishes before any case runs (the
/// established hits below): to the pod, to the unrouted self-mapping, and
/// to the pod over IPv6.
pub fn established() -> Vec<Established> {
    let mut all = established4();
    all.push(ipv6::established());
    all
}

fn established4() -> Vec<Established> {
    let to_pod = to_pod(PORT_ESTABLISHED);
    let unrouted = Conn {
        client_port: PORT_ESTABLISHED,
        backend: (UNROUTED, UNROUTED_PORT),
    };
    let to_stack = Expect::both(effect(TC_ACT_UNSPEC, &["dnat"]));
    let syn_to_stack = Expect::tracking(
        Some(effect(TC_ACT_UNSPEC, &["dnat"])),
        Some(effect(TC_ACT_UNSPEC, &["dnat", "half_opened"])),
    );
    // The server's first segment confirms each.
    let confirmed = |c: &Conn, mut steps: Vec<Step>| {
        steps.push(step(Program::Reply, c.reply_data(), CONFIRMS));
        Established {
            client: c.client(),
            backend: c.backend(),
            steps,
        }
    };
    let claimed_to_stack = Expect {
        confirmed: Some(effect(TC_ACT_UNSPEC, &["dnat", "conn_claimed"])),
        ..to_stack
    };
    vec![
        confirmed(
            &to_pod,
            to_pod.handshake(syn_expect(), Expect::both(REPLY_OUT), completed_ack()),
        ),
        confirmed(
            &unrouted,
            unrouted.handshake(syn_to_stack, Expect::both(REPLY_OUT), claimed_to_stack),
        ),
    ]
}

/// The client's last ACK of a handshake into the pod: tracked at once, or
/// claimed for the server to confirm.
fn completed_ack() -> Expect {
    Expect {
        v3: Some(INTO_POD),
        v4: Some(effect(
            TC_ACT_REDIRECT,
            &["dnat", "conn_established", "redirected_peer"],
        )),
        confirmed: Some(effect(
            TC_ACT_REDIRECT,
            &["dnat", "conn_claimed", "redirected_peer"],
        )),
    }
}

/// A SYN into the pod: v3 only translates it, v4 also opens a half-open entry.
fn syn_expect() -> Expect {
    Expect::tracking(Some(INTO_POD), Some(SYN_INTO_POD))
}

/// The option a node adds to a translated SYN for the pod's node.
fn frontend_option(frontend: (Ipv4Addr, u16)) -> Vec<u8> {
    ipopt::plain_words(Endpoint::new(frontend.0, frontend.1))
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect()
}

/// Every case, in the order they run: IPv4 through the tc programs, IPv6
/// through them, then the XDP ingress program's.
pub fn all() -> Vec<Case> {
    let mut cases = requests();
    cases.extend(replies());
    cases.extend(ipv6::all());
    cases.extend(xdp::all());
    cases
}

fn requests() -> Vec<Case> {
    vec![
        Case {
            what: "request, a retransmitted SYN: half-open entry found (the run's first SYN, untimed, wrote it), DNAT, route, peer redirect into the pod",
            repeat: REPEAT,
            packets: |run| {
                let c = to_pod(PORT_HALF_OPEN);
                let syn = c.syn_isn(ISN_RETRANSMITTED + u32::from(run));
                (
                    vec![step(Program::Ingress, syn.clone(), syn_expect())],
                    step(Program::Ingress, syn, Expect::both(INTO_POD)),
                )
            },
        },
        Case {
            what: "request, SYN: half-open entry written (a fresh ISN each time), DNAT, route, peer redirect into the pod; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = to_pod(PORT_HALF_OPEN);
                let syn = c.syn_isn(ISN_FRESH_SYN + u32::from(instance));
                (vec![], step(Program::Ingress, syn, syn_expect()))
            },
        },
        Case {
            what: "request, SYN through an allowlist and the SYN limiter: trie looked up, the source's bucket read and written, then as the SYN above; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = Conn {
                    client_port: PORT_GUARDED,
                    backend: (POD, GUARDED_PORT),
                };
                let syn = c.syn_isn(ISN_GUARDED + u32::from(instance));
                let timed = step(Program::Ingress, syn, syn_expect()).through_the_guard();
                (vec![], timed)
            },
        },
        Case {
            what: "request, ACK of an established connection: entry looked up (its clock written once a second), DNAT, route, peer redirect",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_ESTABLISHED);
                (
                    vec![],
                    step(Program::Ingress, c.data(), Expect::both(INTO_POD)),
                )
            },
        },
        Case {
            what: "request, ACK with no connection state (spoofed, or its SYN entered another node): both tables missed, DNAT, route, peer redirect",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_NO_STATE);
                (
                    vec![],
                    step(Program::Ingress, c.data(), Expect::both(INTO_POD)),
                )
            },
        },
        Case {
            what: "request, the client's ACK completing a handshake (a fresh port each time, its SYN and SYN-ACK sent untimed first): before: established entry inserted, half-open removed; now: checksums verified, quota read, claim written; DNAT, route, peer redirect; one iteration per test run",
            repeat: 1,
            packets: |run| {
                let c = to_pod(PORT_FRESH_BASE + run);
                let completed = Expect {
                    v3: Some(INTO_POD),
                    v4: Some(effect(
                        TC_ACT_REDIRECT,
                        &["dnat", "conn_established", "redirected_peer"],
                    )),
                    confirmed: Some(effect(
                        TC_ACT_REDIRECT,
                        &["dnat", "conn_claimed", "redirected_peer"],
                    )),
                };
                (
                    c.opening(syn_expect(), Expect::both(REPLY_OUT)),
                    step(Program::Ingress, c.handshake_ack(), completed),
                )
            },
        },
        Case {
            what: "request, ACK of an established connection to a backend the node has no route to: DNAT, route lookup fails, to the stack",
            repeat: REPEAT,
            packets: |_| {
                let c = Conn {
                    client_port: PORT_ESTABLISHED,
                    backend: (UNROUTED, UNROUTED_PORT),
                };
                let to_stack = Expect::both(effect(TC_ACT_UNSPEC, &["dnat"]));
                (vec![], step(Program::Ingress, c.data(), to_stack))
            },
        },
        Case {
            what: "request to no frontend: passed (with connection tracking after a second lookup, of REVERSE)",
            repeat: REPEAT,
            packets: |_| {
                let c = Conn {
                    client_port: PORT_ESTABLISHED,
                    backend: (POD, 9),
                };
                let passed = Expect::both(effect(TC_ACT_UNSPEC, &["not_to_a_frontend"]));
                (vec![], step(Program::Ingress, c.data(), passed))
            },
        },
        Case {
            what: "request from another node on a cluster interface of a node without the key, SYN carrying its frontend in a plain IP option: option read and checked, half-open entry written, option removed; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = Conn {
                    client_port: PORT_CROSS_NODE,
                    backend: (POD, IPERF_PORT),
                };
                let learned = Expect::tracking(None, Some(LEARNED));
                let syn = Frame {
                    ip_options: frontend_option(CROSS_NODE_FRONTEND),
                    ..c.syn_isn(ISN_CROSS_NODE + u32::from(instance))
                };
                (
                    vec![],
                    step(Program::Ingress, syn, learned)
                        .arriving_from_another_node()
                        .on_a_node_without_a_key(),
                )
            },
        },
        Case {
            what: "request from another node, SYN carrying its frontend in a sealed IP option (16 bytes: the tag checked, SipHash-2-4 under the cluster's key): option read and checked, half-open entry written, option removed; one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = Conn {
                    client_port: PORT_CROSS_NODE,
                    backend: (POD, IPERF_PORT),
                };
                let learned = Expect {
                    v3: None,
                    v4: None,
                    confirmed: Some(LEARNED),
                };
                let isn = ISN_SEALED + u32::from(instance);
                let frontend = Endpoint::new(CROSS_NODE_FRONTEND.0, CROSS_NODE_FRONTEND.1);
                let tag = ipopt::tag(
                    CROSS_NODE_KEY,
                    Endpoint::new(CLIENT, c.client_port),
                    Endpoint::new(c.backend.0, c.backend.1),
                    isn,
                    frontend,
                );
                let syn = Frame {
                    ip_options: ipopt::sealed_words(frontend, tag)
                        .iter()
                        .flat_map(|w| w.to_ne_bytes())
                        .collect(),
                    ..c.syn_isn(isn)
                };
                (vec![], step(Program::Ingress, syn, learned))
            },
        },
    ]
}

fn replies() -> Vec<Case> {
    vec![
        Case {
            what: "reply of an established connection: entry looked up (written when the server's sequence moves: once here), reverse NAT, route, redirect out of ext0",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_ESTABLISHED);
                (
                    vec![],
                    step(Program::Reply, c.reply_data(), Expect::both(REPLY_OUT)),
                )
            },
        },
        Case {
            what: "reply, the server's first segment after a handshake (its SYN, SYN-ACK and ACK sent untimed first, a fresh port each time): now it confirms the client's claim, established entry written, claim removed; before: the established entry's first reply; reverse NAT, route, redirect out of ext0; one iteration per test run",
            repeat: 1,
            packets: |run| {
                let c = to_pod(PORT_CONFIRM_BASE + run);
                let confirmed = Expect {
                    v3: Some(REPLY_OUT),
                    v4: Some(REPLY_OUT),
                    confirmed: Some(effect(
                        TC_ACT_REDIRECT,
                        &["reverse_nat", "conn_established", "reply_redirected"],
                    )),
                };
                (
                    c.handshake(syn_expect(), Expect::both(REPLY_OUT), completed_ack()),
                    step(Program::Reply, c.reply_data(), confirmed),
                )
            },
        },
        Case {
            what: "reply, the server's SYN-ACK to a half-open connection (its SYN sent untimed first): its ISN written to the entry (every repeat), reverse NAT, route, redirect out of ext0",
            repeat: REPEAT,
            packets: |run| {
                let c = to_pod(PORT_HALF_OPEN);
                let isn = ISN_SYN_ACK + u32::from(run);
                (
                    vec![step(Program::Ingress, c.syn_isn(isn), syn_expect())],
                    step(Program::Reply, c.syn_ack_to(isn), Expect::both(REPLY_OUT)),
                )
            },
        },
        Case {
            what: "reply of a connection ssh-fwd did not forward (a rank's ssh to the pod's address): lookups, route, passed untouched (before: rewritten to the frontend)",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_UNTRACKED);
                let untouched =
                    Expect::tracking(None, Some(effect(TC_ACT_UNSPEC, &["reply_untracked"])));
                (vec![], step(Program::Reply, c.reply_data(), untouched))
            },
        },
        Case {
            what: "other pod traffic: one lookup, passed",
            repeat: REPEAT,
            packets: |_| {
                (
                    vec![],
                    step(Program::Reply, other_pod_traffic(), NOT_FROM_BACKEND),
                )
            },
        },
        Case {
            what: "egress, reverse NAT of an established connection's reply (--pod-ifaces off)",
            repeat: REPEAT,
            packets: |_| {
                let c = to_pod(PORT_ESTABLISHED);
                let rewritten = Expect::both(effect(TC_ACT_UNSPEC, &["reverse_nat"]));
                (vec![], step(Program::Egress, c.reply_data(), rewritten))
            },
        },
        Case {
            what: "egress, not from a backend (or a reply the pod's interface already rewrote): one lookup",
            repeat: REPEAT,
            packets: |_| {
                (
                    vec![],
                    step(Program::Egress, other_pod_traffic(), NOT_FROM_BACKEND),
                )
            },
        },
        Case {
            what: "egress, a translated SYN leaving for the pod's node (its half-open entry written untimed first): frontend option added, the skb grown by 8 bytes (now, with the bed's key: sealed, 16 bytes, its tag computed); one iteration per test run",
            repeat: 1,
            packets: |instance| {
                let c = to_pod(PORT_HALF_OPEN);
                let syn = c.syn_isn(ISN_EGRESS_OPTION + u32::from(instance));
                let added = Expect::tracking(
                    None,
                    Some(effect(TC_ACT_UNSPEC, &["frontend_option_added"])),
                );
                (
                    vec![step(Program::Ingress, syn.clone(), syn_expect())],
                    // Only a SYN this node took in from outside gets the option.
                    step(Program::Egress, syn, added).arriving_from_outside(),
                )
            },
        },
    ]
}

/// A pod's connection to some server: not from a backend port.
fn other_pod_traffic() -> Frame {
    Conn {
        client_port: 80,
        backend: (POD, 40_000),
    }
    .reply_data()
}
