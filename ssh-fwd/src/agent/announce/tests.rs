use std::{collections::BTreeSet, net::Ipv4Addr};

use ssh_fwd_common::maps::AnnounceKey;

use super::*;
use crate::datapath::netdev::Link;

const SSH_IPS: [Ipv4Addr; 2] = [Ipv4Addr::new(198, 18, 0, 10), Ipv4Addr::new(198, 18, 0, 11)];
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
    let keys: Vec<AnnounceKey> = want.keys().copied().collect();
    assert_eq!(
        keys,
        vec![
            AnnounceKey::new(2, SSH_IPS[0]),
            AnnounceKey::new(2, SSH_IPS[1])
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
        (1, SSH_IPS[1].into()),
        (1, "2001:db8::10".parse().unwrap()),
    ];
    let found = on_interfaces(&SSH_IPS, &links, &addrs);
    assert_eq!(found, BTreeMap::from([(SSH_IPS[1], "lo".to_owned())]));
}
