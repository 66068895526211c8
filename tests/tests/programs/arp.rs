//! `--announce l2` on crafted frames: an ARP request for an announced SSH
//! IP comes back as the reply from the interface's MAC (XDP_TX in XDP, a
//! redirect in tc), byte for byte the host reference
//! (`ssh_fwd_common::arp::answer`) with the frame's padding kept; a
//! request for any other address, or for the SSH IP on another interface,
//! passes untouched; another agent's MAC (in `AGENT_MACS`) claiming the
//! SSH IP is recorded in `ARP_HEARD` and counted, and an entry flagged to
//! yield is dropped when it hears one; a MAC no agent published is
//! counted in `ARP_FOREIGN` and given way to by no entry; this node's own
//! MACs are no news.

use std::net::Ipv4Addr;

use ssh_fwd::datapath::{
    announce::{
        AnnounceMap,
        claimants::{AgentMacs, ForeignClaims, Macs},
    },
    object::PROG_INGRESS_TC,
};
use ssh_fwd_common::{
    arp::{self, ARP_FRAME_LEN},
    fixtures::arp_request,
    maps::{ANNOUNCE_YIELD, AnnounceKey, MAC_OF_AGENT, MAC_OF_NODE},
};
use ssh_fwd_tests::privilege;

use super::{
    Loaded, TC_ACT_REDIRECT, TC_ACT_UNSPEC, XDP_PASS, counters, delta, load, test_run_tc_on,
    test_run_xdp_on,
};

const XDP_TX: u32 = 3;
/// `lo`, the one device of the test's namespace: where frames "arrive".
pub const IFINDEX: u32 = 1;
const SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const NODE_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x02];
const OTHER_NODE_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x03];
/// Another external interface of this node.
const OUR_OTHER_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x04];

/// Which ingress program a frame arriving on `IFINDEX` goes through
/// (the neighbour discovery tests use it too).
#[derive(Clone, Copy, Debug)]
pub enum Ingress {
    Xdp,
    Tc,
}

impl Ingress {
    pub fn run(self, l: &Loaded, frame: &[u8]) -> (u32, Vec<u8>) {
        match self {
            Self::Xdp => test_run_xdp_on(l, frame, IFINDEX),
            Self::Tc => test_run_tc_on(l, PROG_INGRESS_TC, frame, IFINDEX, IFINDEX),
        }
    }

    pub fn answered(self) -> u32 {
        match self {
            Self::Xdp => XDP_TX,
            Self::Tc => TC_ACT_REDIRECT,
        }
    }

    pub fn passed(self) -> u32 {
        match self {
            Self::Xdp => XDP_PASS,
            Self::Tc => TC_ACT_UNSPEC,
        }
    }
}

/// The object loaded with `SSH_IP` announced on `IFINDEX` with `NODE_MAC`.
fn announcing() -> (Loaded, AnnounceMap) {
    let l = load(&[super::JOB]);
    let mut map = AnnounceMap::open_pinned(&l.layout).expect("ANNOUNCE pinned");
    let desired = [(AnnounceKey::new(IFINDEX, SSH_IP), NODE_MAC)].into();
    map.set(&desired, 0, 1).expect("announce");
    (l, map)
}

/// `AGENT_MACS` made to hold `macs`, as the agent writes it.
pub fn agents(l: &Loaded, macs: &[([u8; 6], u32)]) {
    let mut map = AgentMacs::open_pinned(&l.layout).expect("AGENT_MACS pinned");
    map.set(&macs.iter().copied().collect::<Macs>())
        .expect("write AGENT_MACS");
}

/// The reply the host reference makes of `request`.
fn reference_reply(request: &[u8]) -> Vec<u8> {
    let mut head: [u8; ARP_FRAME_LEN] = request[..ARP_FRAME_LEN].try_into().expect("42 bytes");
    let seen = arp::parse(&head).expect("an ARP request");
    arp::answer(&mut head, &seen, NODE_MAC);
    let mut out = request.to_vec();
    out[..ARP_FRAME_LEN].copy_from_slice(&head);
    out
}

fn requests_for_the_ssh_ip_are_answered_and_others_pass(ingress: Ingress) {
    let (l, _map) = announcing();
    let request = arp_request(CLIENT_MAC, CLIENT, SSH_IP);
    let before = counters(&l);
    let (verdict, out) = ingress.run(&l, &request);
    assert_eq!(verdict, ingress.answered(), "{ingress:?}: sent back out");
    assert_eq!(
        out,
        reference_reply(&request),
        "{ingress:?}: the reference reply"
    );
    assert_eq!(out[..6], CLIENT_MAC, "to the asker");
    assert_eq!(out[6..12], NODE_MAC, "from the interface's MAC");
    assert_eq!(out[20..22], [0, 2], "a reply");
    assert_eq!(out[28..32], SSH_IP.octets(), "the SSH IP is at NODE_MAC");
    assert_eq!(delta(&before, &counters(&l)), vec![("arp_answered", 1)]);

    let other = arp_request(CLIENT_MAC, CLIENT, Ipv4Addr::new(192, 0, 2, 1));
    let before = counters(&l);
    let (verdict, out) = ingress.run(&l, &other);
    assert_eq!(
        (verdict, out),
        (ingress.passed(), other),
        "another address: untouched"
    );
    assert_eq!(delta(&before, &counters(&l)), vec![("not_ip", 1)]);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_answers_arp_for_an_announced_ssh_ip_and_passes_the_rest_untouched() {
    privilege::require();
    requests_for_the_ssh_ip_are_answered_and_others_pass(Ingress::Xdp);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_answers_arp_for_an_announced_ssh_ip_and_passes_the_rest_untouched() {
    privilege::require();
    requests_for_the_ssh_ip_are_answered_and_others_pass(Ingress::Tc);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_the_interface_the_ssh_ip_is_announced_on_answers_and_only_while_it_is() {
    privilege::require();
    for ingress in [Ingress::Xdp, Ingress::Tc] {
        let (l, mut map) = announcing();
        let request = arp_request(CLIENT_MAC, CLIENT, SSH_IP);
        let elsewhere = [(AnnounceKey::new(IFINDEX + 100, SSH_IP), NODE_MAC)].into();
        map.set(&elsewhere, 0, 2).expect("move");
        let (verdict, out) = ingress.run(&l, &request);
        assert_eq!((verdict, &out), (ingress.passed(), &request), "{ingress:?}");
        map.set(&Default::default(), 0, 3).expect("withdraw");
        let (verdict, out) = ingress.run(&l, &request);
        assert_eq!((verdict, out), (ingress.passed(), request), "{ingress:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn another_agents_claim_is_heard_a_foreign_one_counted_and_our_own_neither() {
    privilege::require();
    let addr = u32::from_ne_bytes(SSH_IP.octets());
    for ingress in [Ingress::Xdp, Ingress::Tc] {
        let (l, map) = announcing();
        agents(
            &l,
            &[(OTHER_NODE_MAC, MAC_OF_AGENT), (OUR_OTHER_MAC, MAC_OF_NODE)],
        );
        for ours in [NODE_MAC, OUR_OTHER_MAC] {
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &pad(&arp::gratuitous(ours, addr)));
            assert_eq!(verdict, ingress.passed(), "{ingress:?}");
            assert_eq!(delta(&before, &counters(&l)), vec![("not_ip", 1)]);
        }
        assert!(map.heard().expect("heard").is_empty(), "{ingress:?}");

        let theirs = arp::gratuitous(OTHER_NODE_MAC, addr);
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &pad(&theirs));
        assert_eq!(
            (verdict, out),
            (ingress.passed(), pad(&theirs)),
            "{ingress:?}"
        );
        assert_eq!(delta(&before, &counters(&l)), vec![("arp_heard", 1)]);
        let heard = map.heard().expect("heard");
        let entry = heard.get(&SSH_IP).expect("recorded");
        assert_eq!(entry.mac, OTHER_NODE_MAC, "{ingress:?}");
        assert!(entry.at_ns > 0);

        // Another agent answering a request for the SSH IP is heard too.
        let mut answer: [u8; ARP_FRAME_LEN] = arp_request(CLIENT_MAC, CLIENT, SSH_IP)
            [..ARP_FRAME_LEN]
            .try_into()
            .expect("42 bytes");
        let seen = arp::parse(&answer).expect("request");
        arp::answer(&mut answer, &seen, OTHER_NODE_MAC);
        let before = counters(&l);
        ingress.run(&l, &pad(&answer));
        assert_eq!(delta(&before, &counters(&l)), vec![("arp_heard", 1)]);

        // A MAC no agent published: counted as foreign, not heard.
        for n in 1..=3 {
            ingress.run(&l, &pad(&arp::gratuitous(FORGED_MAC, addr)));
            let foreign = ForeignClaims::open_pinned(&l.layout)
                .expect("foreign maps")
                .read()
                .expect("read");
            let claims = foreign.get(&SSH_IP.into()).expect("counted");
            assert_eq!((claims.mac, claims.claims), (FORGED_MAC, n), "{ingress:?}");
        }
        let heard = map.heard().expect("heard");
        assert_eq!(heard[&SSH_IP].mac, OTHER_NODE_MAC, "{ingress:?}");
    }
}

/// A frame padded to Ethernet's 60 bytes.
fn pad(frame: &[u8]) -> Vec<u8> {
    let mut out = frame.to_vec();
    out.resize(60, 0);
    out
}

/// A MAC no agent published, claiming the SSH IP.
const FORGED_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0, 0, 0x01];

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_yielding_entry_gives_way_to_another_agents_mac_and_to_no_other() {
    privilege::require();
    let addr = u32::from_ne_bytes(SSH_IP.octets());
    for ingress in [Ingress::Xdp, Ingress::Tc] {
        let (l, mut map) = announcing();
        agents(&l, &[(OTHER_NODE_MAC, MAC_OF_AGENT)]);
        let key = AnnounceKey::new(IFINDEX, SSH_IP);
        map.set(&[(key, NODE_MAC)].into(), ANNOUNCE_YIELD, 1)
            .expect("yield");
        let forged = arp::gratuitous(FORGED_MAC, addr);
        ingress.run(&l, &pad(&forged));
        assert_eq!(
            map.installed().expect("read").len(),
            1,
            "{ingress:?}: kept its entry"
        );
        let request = arp_request(CLIENT_MAC, CLIENT, SSH_IP);
        assert_eq!(
            ingress.run(&l, &request).0,
            ingress.answered(),
            "{ingress:?}: still answers"
        );
        ingress.run(&l, &pad(&arp::gratuitous(OTHER_NODE_MAC, addr)));
        assert!(
            map.installed().expect("read").is_empty(),
            "{ingress:?}: gave way to the other agent"
        );
        let (verdict, out) = ingress.run(&l, &request);
        assert_eq!(
            (verdict, out),
            (ingress.passed(), request),
            "{ingress:?}: no longer answers"
        );
    }
    // Without the flag (file mode) the node keeps answering.
    let (l, map) = announcing();
    agents(&l, &[(OTHER_NODE_MAC, MAC_OF_AGENT)]);
    Ingress::Tc.run(&l, &pad(&arp::gratuitous(OTHER_NODE_MAC, addr)));
    assert_eq!(map.installed().expect("read").len(), 1);
}
