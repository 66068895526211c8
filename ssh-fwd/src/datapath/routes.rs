//! `--announce route`: the SSH IPs' /32 routes in a routing table of the
//! operator's choosing, for a BGP speaker on the node (BIRD, FRR) to
//! export. Only routes of [`PROTOCOL`] are ever touched, so the table may
//! hold others.

use std::{collections::BTreeSet, net::Ipv4Addr};

use anyhow::Context as _;
use futures::TryStreamExt as _;
use netlink_packet_route::{
    AddressFamily,
    route::{RouteAttribute, RouteMessage, RouteProtocol, RouteScope},
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

    /// The SSH IPs with a route of ours in the table.
    pub async fn installed(&self) -> anyhow::Result<BTreeSet<Ipv4Addr>> {
        let all: Vec<RouteMessage> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .context("rtnetlink route dump")?;
        Ok(all
            .iter()
            .filter(|r| ours(r, self.table))
            .filter_map(destination)
            .collect())
    }

    /// `ip route replace IP/32 dev IFINDEX table N proto 177 scope global`:
    /// scope global, as a BGP speaker learns only routes of that scope.
    pub async fn add(&self, ip: Ipv4Addr, ifindex: u32) -> anyhow::Result<()> {
        let route = self.route(ip).output_interface(ifindex).build();
        self.handle
            .route()
            .add(route)
            .replace()
            .execute()
            .await
            .with_context(|| format!("adding the route {ip}/32 to table {}", self.table))
    }

    pub async fn remove(&self, ip: Ipv4Addr) -> anyhow::Result<()> {
        let route = self.route(ip).build();
        self.handle
            .route()
            .del(route)
            .execute()
            .await
            .with_context(|| format!("removing the route {ip}/32 from table {}", self.table))
    }

    fn route(&self, ip: Ipv4Addr) -> RouteMessageBuilder<Ipv4Addr> {
        RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(ip, 32)
            .table_id(self.table)
            .protocol(RouteProtocol::from(PROTOCOL))
            .scope(RouteScope::Universe)
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
    r.header.address_family == AddressFamily::Inet
        && in_table == table
        && u8::from(r.header.protocol) == PROTOCOL
        && r.header.destination_prefix_length == 32
}

fn destination(r: &RouteMessage) -> Option<Ipv4Addr> {
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(netlink_packet_route::route::RouteAddress::Inet(ip)) => {
            Some(*ip)
        }
        _ => None,
    })
}
