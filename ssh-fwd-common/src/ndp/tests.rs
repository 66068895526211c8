extern crate std;

use core::net::Ipv6Addr;
use std::vec::Vec;

use super::*;
use crate::fixtures::reference_checksum;
use crate::fixtures6::{neighbour_solicitation, pseudo_header};

const ASKER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

fn asker() -> Ipv6Addr {
    "fd00:2::2".parse().unwrap()
}

fn ssh_ip() -> Ipv6Addr {
    "fd00:198::10".parse().unwrap()
}

fn solicitation(src: Ipv6Addr, target: Ipv6Addr, with_lla: bool) -> Vec<u8> {
    neighbour_solicitation(ASKER_MAC, src, target, with_lla)
}

fn padded(f: &[u8]) -> [u8; NDP_FRAME_LLA_LEN] {
    let mut out = [0u8; NDP_FRAME_LLA_LEN];
    out[..f.len()].copy_from_slice(f);
    out
}

/// Whether the ICMPv6 checksum of the first `len` bytes of `f` verifies,
/// summed from scratch.
fn verifies(f: &[u8], len: usize) -> bool {
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&f[at..at + 16]).unwrap());
    let icmp = &f[ICMP_OFF..len];
    let mut all = pseudo_header(addr(22), addr(38), NEXTHDR_ICMPV6, icmp.len() as u32).to_vec();
    all.extend_from_slice(icmp);
    reference_checksum(&all) == 0
}

#[test]
fn a_solicitation_with_its_address_is_answered_with_ours() {
    let f = solicitation(asker(), ssh_ip(), true);
    assert_eq!(f.len(), NDP_FRAME_LLA_LEN);
    let mut buf = padded(&f);
    let ndp = parse(&buf, f.len()).expect("a solicitation");
    assert!(ndp.asks());
    assert_eq!(ndp.target, Addr6::new(ssh_ip()));
    assert_eq!(ndp.mac, ASKER_MAC);
    answer(&mut buf, &ndp, OUR_MAC);
    assert!(verifies(&buf, f.len()), "the answer's checksum");
    assert_eq!(&buf[..6], &ASKER_MAC, "to the asker's MAC");
    assert_eq!(&buf[6..12], &OUR_MAC);
    let back = parse(&buf, f.len()).expect("an advertisement");
    assert!(back.claims_target());
    assert_eq!(back.src, Addr6::new(ssh_ip()), "from the target address");
    assert_eq!(back.target, Addr6::new(ssh_ip()));
    assert_eq!(back.mac, OUR_MAC, "its link-layer address option");
    assert_eq!(buf[FLAGS_OFF], FLAG_SOLICITED | FLAG_OVERRIDE);
    assert_eq!(
        Ipv6Addr::from(<[u8; 16]>::try_from(&buf[38..54]).unwrap()),
        asker(),
        "back to the asker's address"
    );
}

#[test]
fn a_unicast_probe_without_an_option_is_answered_without_one() {
    // Neighbour unreachability detection: a router checking its entry.
    let f = solicitation(asker(), ssh_ip(), false);
    assert_eq!(f.len(), NDP_FRAME_LEN);
    let mut buf = padded(&f);
    let ndp = parse(&buf, f.len()).expect("a solicitation");
    assert_eq!(ndp.mac, ASKER_MAC, "the Ethernet source");
    answer(&mut buf, &ndp, OUR_MAC);
    assert!(verifies(&buf, f.len()));
    assert_eq!(
        buf[NDP_FRAME_LEN..],
        [0; NDP_LLA_LEN],
        "nothing past the frame"
    );
}

#[test]
fn only_plain_on_link_neighbour_discovery_is_read() {
    let good = solicitation(asker(), ssh_ip(), true);
    let dad = solicitation(Ipv6Addr::UNSPECIFIED, ssh_ip(), false);
    let ndp = parse(&padded(&dad), dad.len()).expect("read");
    assert!(!ndp.asks(), "duplicate address detection is not answered");
    let mut routed = good.clone();
    routed[ETH_HLEN + IPV6_HOP_LIMIT_OFF] = 254;
    let mut other_option = good.clone();
    other_option[OPT_OFF] = 14; // a nonce
    let mut echo = good.clone();
    echo[ICMP_OFF] = 128;
    let mut code = good.clone();
    code[ICMP_OFF + 1] = 1;
    let mut wrong_len = good.clone();
    wrong_len[ETH_HLEN + IPV6_PAYLOAD_LEN_OFF + 1] = 40;
    for (case, f, len) in [
        ("hop limit 254", &routed, good.len()),
        ("another option", &other_option, good.len()),
        ("an echo request", &echo, good.len()),
        ("code 1", &code, good.len()),
        ("payload length past the frame", &wrong_len, good.len()),
        ("a frame cut short", &good, good.len() - 1),
    ] {
        assert_eq!(parse(&padded(f), len), None, "{case}");
    }
}

#[test]
fn an_unsolicited_advertisement_claims_the_address_for_all_nodes() {
    let f = unsolicited(OUR_MAC, Addr6::new(ssh_ip()));
    assert!(verifies(&f, f.len()));
    assert_eq!(&f[..6], &ALL_NODES_MAC);
    assert_eq!(&f[38..54], &ALL_NODES);
    let ndp = parse(&f, f.len()).expect("an advertisement");
    assert!(ndp.claims_target());
    assert_eq!((ndp.target, ndp.mac), (Addr6::new(ssh_ip()), OUR_MAC));
    assert_eq!(f[FLAGS_OFF], FLAG_OVERRIDE, "unsolicited, overriding");
}
