//! `--announce route`: the SSH IPs' host routes (/32 for IPv4, /128 for
//! IPv6) in a routing table of the operator's choosing, for a BGP speaker
//! on the node (BIRD, FRR) to export. Only routes of [`PROTOCOL`] are ever
//! touched, so the table may hold others.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use anyhow::Context as _;
use futures::TryStreamExt as _;
use netlink_packet_route::{
    AddressFamily,
    route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope},
};
use rtnetlink::{Handle, RouteMessageBuilder};

/// The `proto` of the routes the agent keeps (`ip route show proto 177`):
/// unassigned in iproute2's `rt_protos`, so nobody else's.
pub const PROTOCOL: u8 = 177;

/// An rtnetlink connection for the routes.
pub struct Routes {
    handle: Handle,
    table: u32,
}

impl Routes {
    pub fn open(table: u32) -> anyhow::Result<Self> {
        let (connection, handle, _) =
            rtnetlink::new_connection().context("opening an rtnetlink socket")?;
        tokio::spawn(connection);
        Ok(Self { handle, table })
    }

    /// The SSH IPs of either family with a route of ours in the table.
    pub async fn installed(&self) -> anyhow::Result<BTreeSet<IpAddr>> {
        let mut all = self
            .dump(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .await?;
        all.extend(
            self.dump(RouteMessageBuilder::<Ipv6Addr>::new().build())
                .await?,
        );
        Ok(all
            .iter()
            .filter(|r| ours(r, self.table))
            .filter_map(destination)
            .collect())
    }

    async fn dump(&self, family: RouteMessage) -> anyhow::Result<Vec<RouteMessage>> {
        self.handle
            .route()
            .get(family)
            .execute()
            .try_collect()
            .await
            .context("rtnetlink route dump")
    }

    /// `ip route replace IP/32 dev IFINDEX table N proto 177 scope global`
    /// (`IP/128` for IPv6): scope global, as a BGP speaker learns only
    /// routes of that scope.
    pub async fn add(&self, ip: IpAddr, ifindex: u32) -> anyhow::Result<()> {
        let route = self.route(ip)?.output_interface(ifindex).build();
        self.handle
            .route()
            .add(route)
            .replace()
            .execute()
            .await
            .with_context(|| {
                format!(
                    "adding the route {ip}/{} to table {}",
                    host_prefix(ip),
                    self.table
                )
            })
    }

    pub async fn remove(&self, ip: IpAddr) -> anyhow::Result<()> {
        let route = self.route(ip)?.build();
        self.handle
            .route()
            .del(route)
            .execute()
            .await
            .with_context(|| {
                format!(
                    "removing the route {ip}/{} from table {}",
                    host_prefix(ip),
                    self.table
                )
            })
    }

    fn route(&self, ip: IpAddr) -> anyhow::Result<RouteMessageBuilder<IpAddr>> {
        Ok(RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(ip, host_prefix(ip))
            .with_context(|| format!("a route to {ip}"))?
            .table_id(self.table)
            .protocol(RouteProtocol::from(PROTOCOL))
            .scope(RouteScope::Universe))
    }
}

/// The prefix length of a route to `ip` alone.
pub const fn host_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// A route of ours in `table`.
fn ours(r: &RouteMessage, table: u32) -> bool {
    let in_table = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table));
    let host = match r.header.address_family {
        AddressFamily::Inet => 32,
        AddressFamily::Inet6 => 128,
        _ => return false,
    };
    in_table == table
        && u8::from(r.header.protocol) == PROTOCOL
        && r.header.destination_prefix_length == host
}

fn destination(r: &RouteMessage) -> Option<IpAddr> {
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(RouteAddress::Inet(ip)) => Some((*ip).into()),
        RouteAttribute::Destination(RouteAddress::Inet6(ip)) => Some((*ip).into()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route message as the kernel dumps one of ours.
    fn dumped(ip: IpAddr, prefix: u8, table: u32, protocol: u8) -> RouteMessage {
        let mut r = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(ip, prefix)
            .unwrap()
            .table_id(table)
            .protocol(RouteProtocol::from(protocol))
            .build();
        r.header.destination_prefix_length = prefix;
        r
    }

    #[test]
    fn host_routes_of_ours_are_recognised_in_both_families() {
        let v4: IpAddr = "198.18.0.10".parse().unwrap();
        let v6: IpAddr = "fd00:198::10".parse().unwrap();
        for (ip, prefix) in [(v4, 32), (v6, 128)] {
            assert_eq!(host_prefix(ip), prefix);
            let r = dumped(ip, prefix, 100, PROTOCOL);
            assert!(ours(&r, 100), "{ip}");
            assert_eq!(destination(&r), Some(ip));
            assert!(!ours(&r, 101), "{ip}: another table");
            assert!(
                !ours(&dumped(ip, prefix, 100, 4), 100),
                "{ip}: another proto"
            );
        }
        assert!(
            !ours(&dumped(v6, 64, 100, PROTOCOL), 100),
            "a /64 is not ours"
        );
    }
}
