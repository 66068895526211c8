//! The network interfaces of the agent's namespace: names and indexes, the
//! rtnetlink dumps of links and qdiscs (through the `rtnetlink` crate), link
//! and address events, and the rules for which interfaces are the host ends
//! of pods.
//!
//! Asked over netlink rather than read from /sys: a process that entered a
//! network namespace with `nsenter --net` keeps the /sys of another one.

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::CString,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use netlink_packet_route::{
    RouteNetlinkMessage,
    address::AddressAttribute,
    link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage},
    route::{RouteAttribute, RouteMessage},
    tc::TcAttribute,
};
use rtnetlink::{Handle, MulticastGroup, RouteMessageBuilder};
use tokio::sync::mpsc;

use crate::mapping::Family;

/// The interface index, or an error that says how to find the right name.
pub fn index(name: &str) -> anyhow::Result<u32> {
    let Ok(c) = CString::new(name) else {
        bail!("interface name {name:?} contains a NUL byte");
    };
    // SAFETY: `c` is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        bail!(
            "interface {name} does not exist in this network namespace; `ip -br link` lists \
             the interfaces, pass the external one with --external-iface"
        );
    }
    Ok(index)
}

/// The name of the interface with this index, if there is one.
pub fn name_of(index: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has room for IF_NAMESIZE bytes, as the call requires.
    let ptr = unsafe { libc::if_indextoname(index, buf.as_mut_ptr().cast()) };
    if ptr.is_null() {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Whether a link's `IFLA_XDP` names a program in the driver's hook.
fn runs_native_xdp(msg: &LinkMessage) -> bool {
    use netlink_packet_route::link::{LinkXdp, XdpAttached};
    msg.attributes.iter().any(|a| match a {
        LinkAttribute::Xdp(xdp) => xdp.iter().any(|x| {
            matches!(
                x,
                LinkXdp::Attached(XdpAttached::Driver) | LinkXdp::DrvProgId(_)
            )
        }),
        _ => false,
    })
}

/// The kinds of device whose peer can be a pod: `bpf_redirect_peer` works
/// on exactly these (they implement `ndo_get_peer_dev`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    Veth,
    Netkit,
    /// A dummy device, or the loopback: where an SSH IP is meant to sit.
    Dummy,
    Loopback,
    #[default]
    Other,
}

/// One interface, as the kernel describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub kind: Kind,
    /// The device is one end of a pair whose other end lives in another
    /// network namespace (`IFLA_LINK_NETNSID` is set).
    pub peer_elsewhere: bool,
    /// That other end: the namespace's id as this namespace knows it, and
    /// the device's index there (`IFLA_LINK`).
    pub peer: Option<Peer>,
    /// The bridge (or other master device) this one is a port of.
    pub master: Option<u32>,
    /// A software device (it has a kind: veth, bridge, tun...), not a NIC.
    pub software: bool,
    /// Its Ethernet address, if it has one of six bytes.
    pub mac: Option<[u8; 6]>,
    /// Administratively up with its carrier on (`IFF_UP` and
    /// `IFF_LOWER_UP`): it can send and receive.
    pub up: bool,
}

/// The other end of a pair, in another network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    pub netns_id: i32,
    pub index: u32,
}

impl Link {
    pub fn from_message(msg: &LinkMessage) -> Self {
        let mut link = Self {
            index: msg.header.index,
            ..Self::default()
        };
        if msg.header.flags.contains(LinkFlags::Loopback) {
            link.kind = Kind::Loopback;
        }
        link.up = msg
            .header
            .flags
            .contains(LinkFlags::Up | LinkFlags::LowerUp);
        let (mut netns_id, mut peer_index) = (None, None);
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(name) => link.name.clone_from(name),
                LinkAttribute::LinkNetNsId(id) => {
                    link.peer_elsewhere = true;
                    netns_id = Some(*id);
                }
                LinkAttribute::Link(index) => peer_index = Some(*index),
                LinkAttribute::Controller(master) => link.master = Some(*master),
                LinkAttribute::Address(mac) => link.mac = <[u8; 6]>::try_from(&mac[..]).ok(),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::Kind(kind) = info {
                            link.software = true;
                            link.kind = match kind {
                                InfoKind::Veth => Kind::Veth,
                                InfoKind::Netkit => Kind::Netkit,
                                InfoKind::Dummy => Kind::Dummy,
                                _ => Kind::Other,
                            };
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Some(netns_id), Some(index)) = (netns_id, peer_index) {
            link.peer = Some(Peer { netns_id, index });
        }
        link
    }
}

/// The host ends of pods' interfaces, by index: veth or netkit devices whose
/// peer is in another namespace, other than the external interfaces.
pub fn pod_ends(links: &[Link], external: &BTreeSet<String>) -> BTreeMap<u32, String> {
    links
        .iter()
        .filter(|l| matches!(l.kind, Kind::Veth | Kind::Netkit))
        .filter(|l| l.peer_elsewhere && !external.contains(&l.name))
        .map(|l| (l.index, l.name.clone()))
        .collect()
}

/// The node's addresses by the interface holding them, except those on
/// the loopback and dummy devices (where an SSH IP is meant to sit): a
/// frontend on one of these would capture the node's own services.
pub fn own_addresses(links: &[Link], addrs: &[(u32, IpAddr)]) -> BTreeMap<IpAddr, String> {
    let by_index: BTreeMap<u32, &Link> = links.iter().map(|l| (l.index, l)).collect();
    addrs
        .iter()
        .filter_map(|(index, ip)| {
            let link = by_index.get(index)?;
            (!matches!(link.kind, Kind::Dummy | Kind::Loopback)).then(|| (*ip, link.name.clone()))
        })
        .collect()
}

/// Whether a request may be handed to `link`'s peer directly
/// (`bpf_redirect_peer`). That skips the host end's transmit path: its
/// egress hook, where a CNI may enforce the pod's ingress policy, and its
/// qdisc, where a bandwidth limit may sit. So only veths with neither
/// qualify: no tcx egress program, and no qdisc but veth's default
/// `noqueue` (a clsact qdisc would carry legacy tc filters).
pub fn peer_redirect_allowed(link: &Link, has_qdisc: bool, tcx_egress_programs: usize) -> bool {
    link.kind == Kind::Veth && link.peer_elsewhere && !has_qdisc && tcx_egress_programs == 0
}

/// An rtnetlink connection of this namespace, for dumps.
pub struct Netlink {
    handle: Handle,
}

impl Netlink {
    /// Opens the socket; the connection runs on the current tokio runtime.
    pub fn open() -> anyhow::Result<Self> {
        let (connection, handle, _) =
            rtnetlink::new_connection().context("opening an rtnetlink socket")?;
        tokio::spawn(connection);
        Ok(Self { handle })
    }

    /// Every interface of the namespace.
    pub async fn links(&self) -> anyhow::Result<Vec<Link>> {
        self.handle
            .link()
            .get()
            .execute()
            .map_ok(|msg| Link::from_message(&msg))
            .try_collect()
            .await
            .context("rtnetlink link dump")
    }

    /// Every address of the namespace, IPv4 and IPv6, with its
    /// interface's index.
    pub async fn addresses(&self) -> anyhow::Result<Vec<(u32, IpAddr)>> {
        collect(self.handle.address().get())
            .await
            .context("rtnetlink address dump")
    }

    /// An rtnetlink connection whose dumps may name another namespace
    /// (`IFA_TARGET_NETNSID`, which the kernel takes only with strict
    /// checking on), for [`Netlink::addresses_in`].
    pub fn open_strict() -> anyhow::Result<Self> {
        let (mut connection, handle, _) =
            rtnetlink::new_connection().context("opening an rtnetlink socket")?;
        netlink_sys::AsyncSocket::socket_mut(connection.socket_mut())
            .set_netlink_get_strict_chk(true)
            .context("asking rtnetlink for strict checking")?;
        tokio::spawn(connection);
        Ok(Self { handle })
    }

    /// Every address of one family (`v6`: IPv6, else IPv4) of the network
    /// namespace this one knows as `netns_id` (a pod's, from a link's
    /// peer), with its interface's index there. Needs a connection from
    /// [`Netlink::open_strict`], and CAP_NET_ADMIN over that namespace.
    pub async fn addresses_in(
        &self,
        netns_id: i32,
        family: Family,
    ) -> anyhow::Result<Vec<(u32, IpAddr)>> {
        let mut request = self.handle.address().get();
        let message = request.message_mut();
        message.header.family = match family {
            Family::V4 => netlink_packet_route::AddressFamily::Inet,
            Family::V6 => netlink_packet_route::AddressFamily::Inet6,
        };
        message
            .attributes
            .push(AddressAttribute::TargetNetNsId(netns_id));
        collect(request).await.with_context(|| {
            format!("rtnetlink {family} address dump of network namespace id {netns_id}")
        })
    }

    /// Whether `peer` (a veth's other end, in the namespace this one knows
    /// by its id) runs a native XDP program: asked with
    /// `IFLA_TARGET_NETNSID`, which needs CAP_NET_ADMIN over that namespace.
    pub async fn runs_native_xdp(&self, peer: Peer) -> anyhow::Result<bool> {
        /// `IFLA_TARGET_NETNSID`, which `netlink-packet-route` does not name.
        const IFLA_TARGET_NETNSID: u16 = 46;
        let mut request = self.handle.link().get().match_index(peer.index);
        request.message_mut().attributes.push(LinkAttribute::Other(
            netlink_packet_core::DefaultNla::new(
                IFLA_TARGET_NETNSID,
                peer.netns_id.to_ne_bytes().to_vec(),
            ),
        ));
        let what = || {
            format!(
                "interface index {} of network namespace id {}",
                peer.index, peer.netns_id
            )
        };
        let msg = request
            .execute()
            .try_next()
            .await
            .with_context(what)?
            .with_context(what)?;
        Ok(runs_native_xdp(&msg))
    }

    /// Indexes of the interfaces with a qdisc other than `noqueue`: a
    /// clsact (legacy tc filters), or one that shapes or schedules traffic.
    pub async fn with_qdisc(&self) -> anyhow::Result<BTreeSet<u32>> {
        let noqueue = TcAttribute::Kind("noqueue".into());
        self.handle
            .qdisc()
            .get()
            .execute()
            .try_filter_map(|q| {
                let index = (!q.attributes.contains(&noqueue))
                    .then(|| u32::try_from(q.header.index).ok())
                    .flatten();
                futures::future::ready(Ok(index))
            })
            .try_collect()
            .await
            .context("rtnetlink qdisc dump")
    }
}

/// The addresses an address dump answers, with their interfaces: an IPv4
/// address's `IFA_LOCAL`, an IPv6 address's `IFA_ADDRESS` (IPv6 has no
/// `IFA_LOCAL` but on point-to-point links, where it is the one to take).
async fn collect(
    request: rtnetlink::AddressGetRequest,
) -> Result<Vec<(u32, IpAddr)>, rtnetlink::Error> {
    request
        .execute()
        .try_filter_map(|msg| {
            let local = msg.attributes.iter().find_map(|a| match a {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let ip = local.or_else(|| {
                msg.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip @ IpAddr::V6(_)) => Some(*ip),
                    _ => None,
                })
            });
            futures::future::ready(Ok(ip.map(|ip| (msg.header.index, ip))))
        })
        .try_collect()
        .await
}

/// The interfaces IPv4 routes with a gateway leave through, by index: where
/// traffic to other nodes (and their pods) goes. The default route counts.
pub fn gateway_interfaces(routes: &[RouteMessage]) -> BTreeSet<u32> {
    routes
        .iter()
        .filter(|r| {
            r.attributes.iter().any(|a| match a {
                RouteAttribute::Gateway(_) => true,
                RouteAttribute::MultiPath(hops) => !hops.is_empty(),
                _ => false,
            })
        })
        .flat_map(|r| {
            let oif = r.attributes.iter().filter_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            });
            let hops = r.attributes.iter().flat_map(|a| match a {
                RouteAttribute::MultiPath(hops) => hops.iter().map(|h| h.interface_index).collect(),
                _ => Vec::new(),
            });
            oif.chain(hops).collect::<Vec<u32>>()
        })
        .collect()
}

impl Netlink {
    /// The routes of the main table, IPv4 and IPv6: the pod network between
    /// the nodes may be routed over either alone.
    pub async fn routes(&self) -> anyhow::Result<Vec<RouteMessage>> {
        let mut routes: Vec<RouteMessage> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .context("rtnetlink IPv4 route dump")?;
        let v6: Vec<RouteMessage> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv6Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .context("rtnetlink IPv6 route dump")?;
        routes.extend(v6);
        Ok(routes)
    }

    /// The kernel's route to `addr` (`ip route get ADDR`), or `None` if it
    /// has none (the network is unreachable).
    pub async fn route_to(&self, addr: IpAddr) -> anyhow::Result<Option<RouteMessage>> {
        let message = match addr {
            IpAddr::V4(v4) => RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(v4, 32)
                .build(),
            IpAddr::V6(v6) => RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(v6, 128)
                .build(),
        };
        let answer = self.handle.route().get(message).execute().try_next().await;
        match answer {
            Ok(route) => Ok(route),
            Err(rtnetlink::Error::NetlinkError(e))
                if e.raw_code() == -libc::ENETUNREACH || e.raw_code() == -libc::EHOSTUNREACH =>
            {
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("rtnetlink route lookup of {addr}")),
        }
    }
}

/// Sends a unit on `changed` whenever an interface appears, changes or
/// goes, until the receiver is dropped. Events are hints to rescan: the
/// rescan reads the whole state, so a lost or coalesced event costs nothing.
pub fn watch_links(changed: mpsc::Sender<()>) -> anyhow::Result<()> {
    watch(MulticastGroup::Link, "link", changed, false, |m| {
        matches!(
            m,
            RouteNetlinkMessage::NewLink(_) | RouteNetlinkMessage::DelLink(_)
        )
    })
}

/// Sends a unit on `changed` whenever an IPv4 address is added to or
/// removed from an interface, of this namespace or of one a pod's
/// interface leads to (a CNI gives a pod its address after its interface
/// appears), until the receiver is dropped; hints, as [`watch_links`]'s.
pub fn watch_addresses(changed: mpsc::Sender<()>) -> anyhow::Result<()> {
    watch(MulticastGroup::Ipv4Ifaddr, "address", changed, true, |m| {
        matches!(
            m,
            RouteNetlinkMessage::NewAddress(_) | RouteNetlinkMessage::DelAddress(_)
        )
    })
}

/// Subscribes to `group` (with `all_namespaces`, in every namespace this
/// one has an id for) and sends a unit on `changed` for each message
/// `wanted` picks (`what` names them in the error).
fn watch(
    group: MulticastGroup,
    what: &str,
    changed: mpsc::Sender<()>,
    all_namespaces: bool,
    wanted: fn(&RouteNetlinkMessage) -> bool,
) -> anyhow::Result<()> {
    let (mut connection, _, mut messages) = rtnetlink::new_multicast_connection(&[group])
        .with_context(|| format!("subscribing to rtnetlink {what} events"))?;
    if all_namespaces {
        netlink_sys::AsyncSocket::socket_mut(connection.socket_mut())
            .set_listen_all_namespaces(true)
            .with_context(|| {
                format!("listening to {what} events of every namespace (needs CAP_NET_BROADCAST)")
            })?;
    }
    tokio::spawn(connection);
    tokio::spawn(async move {
        while let Some((message, _)) = messages.next().await {
            let relevant = matches!(
                &message.payload,
                netlink_packet_core::NetlinkPayload::InnerMessage(m) if wanted(m)
            );
            // A full channel already holds a request.
            if relevant && changed.try_send(()).is_err() && changed.is_closed() {
                return;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests;
