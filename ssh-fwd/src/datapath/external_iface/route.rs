//! Which interfaces routes lead out of, for `auto` and `auto:ADDR`. Pure:
//! route messages in, interface indexes out.

use std::{collections::BTreeSet, net::IpAddr};

use netlink_packet_route::{
    AddressFamily,
    route::{RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteNextHopFlags, RouteType},
};

use super::Unresolved;
use crate::mapping::Family;

/// The interfaces the default routes of `families` leave through, each
/// with its family: per family, those of the main table's default routes
/// with the lowest metric (a backup route with a higher one is passed
/// over), every next hop of a multipath route, none whose link is down.
pub fn default_ifaces(routes: &[RouteMessage], families: &[Family]) -> BTreeSet<(Family, u32)> {
    let mut found = BTreeSet::new();
    for &family in families {
        let defaults: Vec<&RouteMessage> = routes
            .iter()
            .filter(|r| family_of(r) == Some(family) && is_default(r) && !down(r.header.flags))
            .collect();
        let Some(best) = defaults.iter().map(|r| metric(r)).min() else {
            continue;
        };
        for route in defaults.into_iter().filter(|r| metric(r) == best) {
            found.extend(interfaces(route).into_iter().map(|i| (family, i)));
        }
    }
    found
}

/// The interface of the kernel's answer to a route lookup of `addr`
/// (`ip route get ADDR`).
pub fn route_to_iface(addr: IpAddr, answer: &RouteMessage) -> Result<u32, Unresolved> {
    match answer.header.kind {
        RouteType::Local => return Err(Unresolved::RouteToLocal { addr }),
        RouteType::Unicast => {}
        _ => return Err(Unresolved::NoRouteTo { addr }),
    }
    interfaces(answer)
        .into_iter()
        .next()
        .ok_or(Unresolved::NoRouteTo { addr })
}

fn family_of(route: &RouteMessage) -> Option<Family> {
    match route.header.address_family {
        AddressFamily::Inet => Some(Family::V4),
        AddressFamily::Inet6 => Some(Family::V6),
        _ => None,
    }
}

/// A unicast route to 0.0.0.0/0 or ::/0 in the main table (a table past
/// 255 is only in the attribute).
fn is_default(route: &RouteMessage) -> bool {
    let table = route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table));
    route.header.destination_prefix_length == 0
        && route.header.kind == RouteType::Unicast
        && table == u32::from(RouteHeader::RT_TABLE_MAIN)
}

fn down(flags: RouteFlags) -> bool {
    flags.intersects(RouteFlags::Linkdown | RouteFlags::Dead)
}

fn metric(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0)
}

/// The route's interface, or its next hops' (those not down).
fn interfaces(route: &RouteMessage) -> Vec<u32> {
    let mut found = Vec::new();
    for a in &route.attributes {
        match a {
            RouteAttribute::Oif(i) => found.push(*i),
            RouteAttribute::MultiPath(hops) => found.extend(
                hops.iter()
                    .filter(|h| {
                        !h.flags
                            .intersects(RouteNextHopFlags::Linkdown | RouteNextHopFlags::Dead)
                    })
                    .map(|h| h.interface_index),
            ),
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::route::{RouteAddress, RouteNextHop};

    use super::*;

    fn route(family: Family, prefix: u8, oif: u32, metric: Option<u32>) -> RouteMessage {
        let mut r = RouteMessage::default();
        r.header.address_family = match family {
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        };
        r.header.destination_prefix_length = prefix;
        r.header.kind = RouteType::Unicast;
        r.header.table = RouteHeader::RT_TABLE_MAIN;
        r.attributes.push(RouteAttribute::Oif(oif));
        if let Some(m) = metric {
            r.attributes.push(RouteAttribute::Priority(m));
        }
        r
    }

    const BOTH: [Family; 2] = [Family::V4, Family::V6];

    fn hop(interface_index: u32, linkdown: bool) -> RouteNextHop {
        let mut hop = RouteNextHop::default();
        hop.interface_index = interface_index;
        if linkdown {
            hop.flags = RouteNextHopFlags::Linkdown;
        }
        hop
    }

    #[test]
    fn auto_takes_the_default_routes_interface_not_a_more_specific_ones() {
        let routes = [
            route(Family::V4, 24, 3, None), // the node network
            route(Family::V4, 0, 6, Some(100)),
            route(Family::V4, 16, 9, None), // pods, over a tunnel
        ];
        assert_eq!(default_ifaces(&routes, &BOTH), [(Family::V4, 6)].into());
    }

    #[test]
    fn of_several_default_routes_the_lowest_metric_wins_and_ecmp_takes_every_hop() {
        let mut backup = route(Family::V4, 0, 7, Some(600));
        let primary = route(Family::V4, 0, 6, Some(100));
        assert_eq!(
            default_ifaces(&[backup.clone(), primary], &BOTH),
            [(Family::V4, 6)].into()
        );
        backup.attributes = vec![
            RouteAttribute::Priority(50),
            RouteAttribute::MultiPath(vec![hop(2, false), hop(3, false), hop(4, true)]),
        ];
        assert_eq!(
            default_ifaces(&[backup], &BOTH),
            [(Family::V4, 2), (Family::V4, 3)].into()
        );
    }

    #[test]
    fn each_family_asked_for_brings_its_own_default_route() {
        let routes = [
            route(Family::V4, 0, 6, None),
            route(Family::V6, 0, 8, Some(1024)),
        ];
        assert_eq!(
            default_ifaces(&routes, &BOTH),
            [(Family::V4, 6), (Family::V6, 8)].into()
        );
        assert_eq!(
            default_ifaces(&routes, &[Family::V6]),
            [(Family::V6, 8)].into()
        );
    }

    #[test]
    fn a_default_route_that_is_down_in_another_table_or_not_unicast_is_no_default() {
        let mut linkdown = route(Family::V4, 0, 6, None);
        linkdown.header.flags = RouteFlags::Linkdown;
        let mut other_table = route(Family::V4, 0, 7, None);
        other_table.header.table = 100;
        let mut vrf = route(Family::V4, 0, 8, None);
        vrf.header.table = 252;
        vrf.attributes.push(RouteAttribute::Table(1000));
        let mut unreachable = route(Family::V6, 0, 1, None);
        unreachable.header.kind = RouteType::Unreachable;
        let routes = [linkdown, other_table, vrf, unreachable];
        assert!(default_ifaces(&routes, &BOTH).is_empty());
    }

    #[test]
    fn the_route_to_an_address_is_its_interface_unless_the_address_is_local_or_unreachable() {
        let addr: IpAddr = "192.0.2.2".parse().unwrap();
        let mut answer = route(Family::V4, 32, 5, None);
        answer
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                "192.0.2.2".parse().unwrap(),
            )));
        assert_eq!(route_to_iface(addr, &answer), Ok(5));
        answer.header.kind = RouteType::Local;
        let e = route_to_iface(addr, &answer).unwrap_err();
        assert_eq!(e, Unresolved::RouteToLocal { addr });
        assert!(!e.may_appear_later());
        answer.header.kind = RouteType::Unreachable;
        assert_eq!(
            route_to_iface(addr, &answer),
            Err(Unresolved::NoRouteTo { addr })
        );
    }
}
