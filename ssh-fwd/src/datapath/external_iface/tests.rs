use netlink_packet_route::{
    AddressFamily,
    route::{RouteAttribute, RouteHeader, RouteType},
};

use super::*;
use crate::datapath::netdev::Kind;

fn link(index: u32, name: &str, up: bool, master: Option<u32>) -> Link {
    Link {
        index,
        name: name.into(),
        up,
        master,
        kind: if index == 1 {
            Kind::Loopback
        } else {
            Kind::Other
        },
        ..Link::default()
    }
}

fn route(v6: bool, prefix: u8, oif: u32) -> RouteMessage {
    let mut r = RouteMessage::default();
    r.header.address_family = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    r.header.destination_prefix_length = prefix;
    r.header.kind = RouteType::Unicast;
    r.header.table = RouteHeader::RT_TABLE_MAIN;
    r.attributes.push(RouteAttribute::Oif(oif));
    r
}

/// A bare-metal node: eno1 and eno2 bonded into bond0 (the default route,
/// both families), eno3 on a management network.
fn node() -> Seen {
    Seen {
        links: vec![
            link(1, "lo", true, None),
            link(2, "eno1", true, Some(5)),
            link(3, "eno2", true, Some(5)),
            link(4, "eno3", true, None),
            link(5, "bond0", true, None),
        ],
        routes: vec![route(false, 24, 4), route(false, 0, 5), route(true, 0, 5)],
        lookups: [
            ("10.1.0.7".parse().unwrap(), Some(route(false, 32, 4))),
            ("203.0.113.9".parse().unwrap(), None),
        ]
        .into(),
    }
}

const BOTH: [Family; 2] = [Family::V4, Family::V6];

fn rules(values: &[&str]) -> Vec<IfaceRule> {
    values.iter().map(|v| v.parse().unwrap()).collect()
}

fn names(chosen: &[Chosen]) -> Vec<&str> {
    chosen.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn auto_takes_the_bond_the_default_routes_of_both_families_leave_through() {
    let chosen = choose(&rules(&["auto"]), &node(), &BOTH).unwrap();
    assert_eq!(
        chosen,
        [Chosen {
            name: "bond0".into(),
            rule: IfaceRule::DefaultRoute,
            why: "the IPv4 and IPv6 default route leaves through it".into(),
        }]
    );
    let only_v6 = choose(&rules(&["auto"]), &node(), &[Family::V6]).unwrap();
    assert_eq!(only_v6[0].why, "the IPv6 default route leaves through it");
}

#[test]
fn auto_with_an_address_takes_the_interface_of_the_route_to_it() {
    let chosen = choose(&rules(&["auto:10.1.0.7"]), &node(), &BOTH).unwrap();
    assert_eq!(names(&chosen), ["eno3"]);
    assert_eq!(chosen[0].why, "the route to 10.1.0.7 leaves through it");
    let e = choose(&rules(&["auto:203.0.113.9"]), &node(), &BOTH).unwrap_err();
    assert_eq!(
        e,
        Unresolved::NoRouteTo {
            addr: "203.0.113.9".parse().unwrap()
        }
    );
    assert!(e.to_string().contains("ip route get 203.0.113.9"), "{e}");
}

#[test]
fn rules_are_taken_in_order_and_an_interface_two_rules_pick_is_chosen_once() {
    let chosen = choose(&rules(&["eno3", "auto", "bond+"]), &node(), &BOTH).unwrap();
    assert_eq!(names(&chosen), ["eno3", "bond0"]);
    assert_eq!(chosen[1].rule, IfaceRule::DefaultRoute);
    assert_eq!(chosen[0].why, "named");
}

#[test]
fn a_missing_name_or_default_route_names_what_is_there_and_may_yet_appear() {
    let e = choose(&rules(&["eth0"]), &node(), &BOTH).unwrap_err();
    assert!(e.may_appear_later());
    assert_eq!(
        e.to_string(),
        "interface eth0 does not exist in this network namespace (present: lo (loopback), eno1 \
         (port of bond0), eno2 (port of bond0), eno3, bond0); name the interface clients reach \
         this node on, or use a pattern (eno*, bond+) or auto (the default route's interface)"
    );
    let no_routes = Seen {
        routes: vec![route(false, 24, 4)],
        ..node()
    };
    let e = choose(&rules(&["auto"]), &no_routes, &BOTH).unwrap_err();
    assert!(e.may_appear_later());
    assert!(
        e.to_string()
            .starts_with("auto: no default route (IPv4 or IPv6) in the main table"),
        "{e}"
    );
}
