use std::{
    collections::BTreeSet,
    net::{Ipv4Addr, Ipv6Addr},
};

use super::*;
use crate::datapath::netdev::Link;

const SSH_IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)),
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11)),
];
const SSH_IP6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10));
const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn link(index: u32, name: &str, up: bool, mac: Option<[u8; 6]>) -> Link {
    Link {
        index,
        name: name.into(),
        up,
        mac,
        ..Link::default()
    }
}

#[test]
fn every_ssh_ip_is_announced_on_every_external_interface_that_is_up() {
    let external = BTreeSet::from(["ext0".to_owned(), "ext1".to_owned()]);
    let links = [
        link(1, "lo", true, Some([0; 6])),
        link(2, "ext0", true, Some(MAC)),
        link(3, "ext1", false, Some(MAC)),
        link(4, "eth9", true, Some(MAC)),
    ];
    let want = desired(&SSH_IPS, &external, &links);
    let keys: Vec<AnnounceAt> = want.keys().copied().collect();
    assert_eq!(
        keys,
        vec![
            AnnounceAt::new(2, SSH_IPS[0]),
            AnnounceAt::new(2, SSH_IPS[1])
        ],
        "ext1 is down, lo and eth9 are not external"
    );
    assert!(want.values().all(|mac| *mac == MAC));
}

#[test]
fn an_interface_without_a_mac_announces_nothing() {
    let external = BTreeSet::from(["wg0".to_owned()]);
    assert!(desired(&SSH_IPS, &external, &[link(5, "wg0", true, None)]).is_empty());
}

#[test]
fn an_ssh_ip_on_any_interface_is_found_with_its_name() {
    let links = [link(1, "lo", true, None), link(2, "ext0", true, Some(MAC))];
    let addrs = [
        (2, Ipv4Addr::new(192, 0, 2, 1).into()),
        (1, SSH_IPS[1]),
        (1, "2001:db8::10".parse().unwrap()),
    ];
    let found = on_interfaces(&SSH_IPS, &links, &addrs);
    assert_eq!(found, BTreeMap::from([(SSH_IPS[1], "lo".to_owned())]));
}

#[test]
fn an_ipv6_ssh_ip_is_announced_as_an_ipv4_one_is() {
    let external = BTreeSet::from(["ext0".to_owned()]);
    let links = [
        link(2, "ext0", true, Some(MAC)),
        link(3, "ext1", true, Some(MAC)),
    ];
    let ips = [SSH_IPS[0], SSH_IP6];
    let want = desired(&ips, &external, &links);
    assert_eq!(
        want,
        Desired::from([
            (AnnounceAt::new(2, SSH_IPS[0]), MAC),
            (AnnounceAt::new(2, SSH_IP6), MAC)
        ])
    );
}

#[test]
fn an_ipv6_ssh_ip_on_an_interface_is_refused_with_the_command_that_removes_it() {
    let links = [link(1, "lo", true, None)];
    let found = on_interfaces(&[SSH_IP6], &links, &[(1, SSH_IP6)]);
    assert_eq!(found, BTreeMap::from([(SSH_IP6, "lo".to_owned())]));
    assert_eq!(
        remove_command(SSH_IP6, "lo"),
        "ip -6 addr del fd00:198::10/128 dev lo"
    );
    assert_eq!(
        remove_command(SSH_IPS[0], "lo"),
        "ip addr del 198.18.0.10/32 dev lo"
    );
    assert_eq!(asks(SSH_IP6), "neighbour solicitations");
}
