//! `--announce l2` over IPv6 on crafted frames: a neighbour solicitation
//! for an announced IPv6 SSH IP comes back as the advertisement from the
//! interface's MAC (XDP_TX in XDP, a redirect in tc), byte for byte the
//! host reference (`ssh_fwd_common::ndp::answer`), with or without the
//! link-layer address option; one for another address, or from the
//! unspecified address, passes untouched; another agent's MAC advertising
//! the SSH IP is recorded in `NDP_HEARD` and counted, and an entry flagged
//! to yield is dropped when it hears one; a MAC no agent published is
//! counted in `NDP_FOREIGN` and given way to by no entry.

use std::net::Ipv6Addr;

use aya::maps::{HashMap, Map, MapData};
use ssh_fwd::datapath::announce::claimants::ForeignClaims;
use ssh_fwd_common::{
    fixtures6::{neighbour_advert, neighbour_solicitation},
    maps::{self, ANNOUNCE_YIELD, Addr6, Announce, AnnounceKey6, Heard, MAC_OF_AGENT},
    ndp::{self, NDP_FRAME_LLA_LEN},
};
use ssh_fwd_tests::privilege;

use super::{
    Loaded,
    arp::{IFINDEX, Ingress, agents},
    counters, delta, load,
};

const NODE_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x02];
const OTHER_NODE_MAC: [u8; 6] = [0x02, 0x5f, 0, 0, 0, 0x03];

fn ssh_ip() -> Ipv6Addr {
    "fd00:198::10".parse().expect("address")
}

fn client() -> Ipv6Addr {
    "fd00:2::2".parse().expect("address")
}

fn announce_map(l: &Loaded) -> HashMap<MapData, AnnounceKey6, Announce> {
    let data = MapData::from_pin(l.layout.map(maps::ANNOUNCE6)).expect("ANNOUNCE6 pinned");
    HashMap::try_from(Map::from_map_data(data).expect("map")).expect("hash map")
}

/// The object loaded with the IPv6 SSH IP announced on `IFINDEX`.
fn announcing(flags: u16) -> Loaded {
    let l = load(&[]);
    let entry = Announce {
        mac: NODE_MAC,
        flags,
        since_ms: 0,
    };
    announce_map(&l)
        .insert(AnnounceKey6::new(IFINDEX, ssh_ip()), entry, 0)
        .expect("announce");
    l
}

/// The advertisement the host reference makes of `request`.
fn reference_answer(request: &[u8]) -> Vec<u8> {
    let mut frame = [0u8; NDP_FRAME_LLA_LEN];
    frame[..request.len()].copy_from_slice(request);
    let seen = ndp::parse(&frame, request.len()).expect("a solicitation");
    ndp::answer(&mut frame, &seen, NODE_MAC);
    frame[..request.len()].to_vec()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn solicitations_for_the_ipv6_ssh_ip_are_answered_and_others_pass() {
    privilege::require();
    for ingress in [Ingress::Xdp, Ingress::Tc] {
        let l = announcing(0);
        for lla in [true, false] {
            let request = neighbour_solicitation(CLIENT_MAC, client(), ssh_ip(), lla);
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &request);
            assert_eq!(verdict, ingress.answered(), "{ingress:?} lla {lla}");
            assert_eq!(out, reference_answer(&request), "{ingress:?} lla {lla}");
            assert_eq!(out[..6], CLIENT_MAC, "to the asker");
            assert_eq!(out[6..12], NODE_MAC, "from the interface's MAC");
            assert_eq!(delta(&before, &counters(&l)), vec![("ndp_answered", 1)]);
        }
        let passing = [
            (
                "another address",
                neighbour_solicitation(
                    CLIENT_MAC,
                    client(),
                    "fd00:2::1".parse().unwrap_or(client()),
                    true,
                ),
            ),
            (
                "duplicate address detection",
                neighbour_solicitation(CLIENT_MAC, Ipv6Addr::UNSPECIFIED, ssh_ip(), false),
            ),
            (
                "our own advertisement",
                neighbour_advert(NODE_MAC, ssh_ip()),
            ),
        ];
        for (case, frame) in passing {
            let before = counters(&l);
            let (verdict, out) = ingress.run(&l, &frame);
            assert_eq!(
                (verdict, &out),
                (ingress.passed(), &frame),
                "{ingress:?} {case}"
            );
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![("not_tcp", 1)],
                "{case}"
            );
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn another_agent_advertising_the_ipv6_ssh_ip_is_heard_and_a_yielding_entry_goes() {
    privilege::require();
    for (ingress, flags) in [
        (Ingress::Xdp, 0),
        (Ingress::Tc, 0),
        (Ingress::Xdp, ANNOUNCE_YIELD),
        (Ingress::Tc, ANNOUNCE_YIELD),
    ] {
        let l = announcing(flags);
        agents(&l, &[(OTHER_NODE_MAC, MAC_OF_AGENT)]);
        let advert = neighbour_advert(OTHER_NODE_MAC, ssh_ip());
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &advert);
        assert_eq!((verdict, out), (ingress.passed(), advert), "{ingress:?}");
        assert_eq!(delta(&before, &counters(&l)), vec![("ndp_heard", 1)]);
        let data = MapData::from_pin(l.layout.map(maps::NDP_HEARD)).expect("NDP_HEARD pinned");
        let heard: HashMap<_, Addr6, Heard> =
            HashMap::try_from(Map::from_map_data(data).expect("map")).expect("hash map");
        let entry = heard.get(&Addr6::new(ssh_ip()), 0).expect("heard");
        assert_eq!(entry.mac, OTHER_NODE_MAC);
        let still = announce_map(&l)
            .get(&AnnounceKey6::new(IFINDEX, ssh_ip()), 0)
            .is_ok();
        assert_eq!(
            still,
            flags == 0,
            "{ingress:?} flags {flags}: yields only when told"
        );
    }
}

/// A MAC no agent published, advertising the SSH IP.
const FORGED_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0, 0, 0x01];

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_yielding_ipv6_entry_gives_way_to_no_mac_an_agent_did_not_publish() {
    privilege::require();
    for ingress in [Ingress::Xdp, Ingress::Tc] {
        let l = announcing(ANNOUNCE_YIELD);
        agents(&l, &[(OTHER_NODE_MAC, MAC_OF_AGENT)]);
        let before = counters(&l);
        ingress.run(&l, &neighbour_advert(FORGED_MAC, ssh_ip()));
        assert_eq!(delta(&before, &counters(&l)), vec![("ndp_heard", 1)]);
        let still = announce_map(&l)
            .get(&AnnounceKey6::new(IFINDEX, ssh_ip()), 0)
            .is_ok();
        assert!(still, "{ingress:?}: kept its entry");
        let request = neighbour_solicitation(CLIENT_MAC, client(), ssh_ip(), true);
        assert_eq!(
            ingress.run(&l, &request).0,
            ingress.answered(),
            "{ingress:?}: still answers"
        );
        let foreign = ForeignClaims::open_pinned(&l.layout)
            .expect("foreign maps")
            .read()
            .expect("read");
        let claims = foreign.get(&ssh_ip().into()).expect("counted");
        assert_eq!((claims.mac, claims.claims), (FORGED_MAC, 1), "{ingress:?}");
        let data = MapData::from_pin(l.layout.map(maps::NDP_HEARD)).expect("NDP_HEARD pinned");
        let heard: HashMap<_, Addr6, Heard> =
            HashMap::try_from(Map::from_map_data(data).expect("map")).expect("hash map");
        assert!(heard.get(&Addr6::new(ssh_ip()), 0).is_err(), "not heard");
    }
}
