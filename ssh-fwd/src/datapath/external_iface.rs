//! The external interfaces (`--external-iface`) found on this node, so that one
//! setting fits nodes whose uplinks have different names: a name is taken
//! as it is, a pattern (`eno*`, `bond+`) picks the one matching interface
//! that is up, `auto` takes the default routes' interfaces, `auto:ADDR`
//! the interface of the route to a client-facing address. What the kernel
//! holds is asked over rtnetlink ([`Netlink`]); the choice is pure
//! ([`choose`], [`rule`], [`route`]).

mod route;
pub mod rule;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use netlink_packet_route::route::RouteMessage;
pub use rule::IfaceRule;

use super::netdev::{Link, Netlink};
use crate::mapping::Family;

/// One external interface and the rule that chose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub name: String,
    pub rule: IfaceRule,
    /// Why, in words ("the IPv4 default route leaves through it").
    pub why: String,
}

/// Why the rules pick nothing, or cannot pick: each says what is present
/// and what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    #[error(
        "interface {name} does not exist in this network namespace (present: {present}); name \
         the interface clients reach this node on, or use a pattern (eno*, bond+) or auto (the \
         default route's interface)"
    )]
    NoSuchName { name: String, present: String },
    #[error(
        "`{pattern}` matches no interface that is up and not a port of another (a bond's or a \
         bridge's); present: {present}. Name the interface clients reach this node on (--external-iface \
         NAME, or the Node annotation ssh-fwd.io/iface), use a pattern that matches it, or auto \
         (the default route's interface)"
    )]
    PatternNone { pattern: String, present: String },
    #[error(
        "`{pattern}` matches several interfaces that are up: {}. Name the one clients reach \
         this node on (--external-iface {}), narrow the pattern, give each its own --external-iface if every one \
         is external, or use auto (the default route's interface)",
        matched.join(", "),
        matched.first().map_or("NAME", String::as_str)
    )]
    PatternSeveral {
        pattern: String,
        matched: Vec<String>,
    },
    #[error(
        "auto: no default route ({}) in the main table leaves through an interface that is up \
         (`ip route show default`, `ip -6 route show default`); name the interface clients \
         reach this node on, or use auto:ADDR with an address of the clients' network",
        families.iter().map(ToString::to_string).collect::<Vec<_>>().join(" or ")
    )]
    NoDefaultRoute { families: Vec<Family> },
    #[error(
        "auto:{addr}: no route to {addr} (`ip route get {addr}`); use an address clients \
         connect from, or name the interface"
    )]
    NoRouteTo { addr: IpAddr },
    #[error(
        "auto:{addr}: {addr} is an address of this node, so its route leaves through no \
         interface; use an address clients connect from (or one of their network)"
    )]
    RouteToLocal { addr: IpAddr },
}

impl Unresolved {
    /// Whether waiting may help: an interface, a route or a link's carrier
    /// that is not there yet (a bond still negotiating, a DHCP lease still
    /// to come). A pattern matching several, or a local address, is a
    /// setting to change.
    pub fn may_appear_later(&self) -> bool {
        !matches!(
            self,
            Self::PatternSeveral { .. } | Self::RouteToLocal { .. }
        )
    }
}

/// What the kernel holds that the rules are judged against.
#[derive(Debug, Default)]
pub struct Seen {
    pub links: Vec<Link>,
    /// Every route of either family (asked only for `auto`).
    pub routes: Vec<RouteMessage>,
    /// The kernel's answer to a route lookup of each `auto:ADDR`'s
    /// address; `None`: no route.
    pub lookups: BTreeMap<IpAddr, Option<RouteMessage>>,
}

impl Seen {
    /// Reads what `rules` need.
    pub async fn read(netlink: &Netlink, rules: &[IfaceRule]) -> anyhow::Result<Self> {
        let mut seen = Self {
            links: netlink.links().await?,
            ..Self::default()
        };
        if rules.contains(&IfaceRule::DefaultRoute) {
            seen.routes = netlink.routes().await?;
        }
        for rule in rules {
            if let IfaceRule::RouteTo(addr) = rule {
                seen.lookups.insert(*addr, netlink.route_to(*addr).await?);
            }
        }
        Ok(seen)
    }
}

/// The interfaces `rules` pick in `seen`, in the rules' order, each once.
/// `families`: those whose default routes `auto` follows (the SSH IPs').
pub fn choose(
    rules: &[IfaceRule],
    seen: &Seen,
    families: &[Family],
) -> Result<Vec<Chosen>, Unresolved> {
    let name_of = |index: u32| seen.links.iter().find(|l| l.index == index);
    let mut chosen: Vec<Chosen> = Vec::new();
    for rule in rules {
        let mut picked: Vec<(String, String)> = Vec::new();
        match rule {
            IfaceRule::Name(name) => {
                if !seen.links.iter().any(|l| l.name == *name) {
                    return Err(Unresolved::NoSuchName {
                        name: name.clone(),
                        present: rule::present(&seen.links),
                    });
                }
                picked.push((name.clone(), "named".into()));
            }
            IfaceRule::Pattern(pattern) => {
                let link = rule::pick(pattern, &seen.links)?;
                let why = format!("the one interface up that matches {pattern}");
                picked.push((link.name.clone(), why));
            }
            IfaceRule::DefaultRoute => {
                let found = route::default_ifaces(&seen.routes, families);
                let mut by_iface: BTreeMap<String, BTreeSet<Family>> = BTreeMap::new();
                for (family, index) in found {
                    if let Some(link) = name_of(index) {
                        by_iface
                            .entry(link.name.clone())
                            .or_default()
                            .insert(family);
                    }
                }
                if by_iface.is_empty() {
                    return Err(Unresolved::NoDefaultRoute {
                        families: families.to_vec(),
                    });
                }
                picked.extend(by_iface.into_iter().map(|(name, families)| {
                    let families: Vec<String> = families.iter().map(ToString::to_string).collect();
                    let why = format!(
                        "the {} default route leaves through it",
                        families.join(" and ")
                    );
                    (name, why)
                }));
            }
            IfaceRule::RouteTo(addr) => {
                let answer = seen.lookups.get(addr).and_then(Option::as_ref);
                let index = answer
                    .ok_or(Unresolved::NoRouteTo { addr: *addr })
                    .and_then(|a| route::route_to_iface(*addr, a))?;
                let link = name_of(index).ok_or(Unresolved::NoRouteTo { addr: *addr })?;
                let why = format!("the route to {addr} leaves through it");
                picked.push((link.name.clone(), why));
            }
        }
        for (name, why) in picked {
            if !chosen.iter().any(|c| c.name == name) {
                chosen.push(Chosen {
                    name,
                    rule: rule.clone(),
                    why,
                });
            }
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests;
