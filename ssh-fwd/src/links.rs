//! The network interfaces of the agent's namespace, from an rtnetlink dump,
//! and which of them are the host ends of pods' interfaces.
//!
//! Asked over netlink rather than read from /sys: a process that entered a
//! network namespace with `nsenter --net` keeps the /sys of another one.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, bail};
use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage},
    tc::{TcAttribute, TcMessage},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// The kinds of device whose peer can be a pod: `bpf_redirect_peer` works
/// on exactly these (they implement `ndo_get_peer_dev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Veth,
    Netkit,
    Other,
}

/// One interface, as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub kind: Kind,
    /// The device is one end of a pair whose other end lives in another
    /// network namespace (`IFLA_LINK_NETNSID` is set).
    pub peer_elsewhere: bool,
}

impl Link {
    fn from_message(msg: &LinkMessage) -> Self {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: Kind::Other,
            peer_elsewhere: false,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(name) => link.name.clone_from(name),
                LinkAttribute::LinkNetNsId(_) => link.peer_elsewhere = true,
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::Kind(kind) = info {
                            link.kind = match kind {
                                InfoKind::Veth => Kind::Veth,
                                InfoKind::Netkit => Kind::Netkit,
                                _ => Kind::Other,
                            };
                        }
                    }
                }
                _ => {}
            }
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

/// Whether a request may be handed to `link`'s peer directly
/// (`bpf_redirect_peer`). That skips the host end's transmit path: its
/// egress hook, where a CNI may enforce the pod's ingress policy, and its
/// qdisc, where a bandwidth limit may sit. So only veths with neither
/// qualify: no tcx egress program, and no qdisc but veth's default
/// `noqueue` (a clsact qdisc would carry legacy tc filters).
pub fn peer_redirect_allowed(link: &Link, has_qdisc: bool, tcx_egress_programs: usize) -> bool {
    link.kind == Kind::Veth && link.peer_elsewhere && !has_qdisc && tcx_egress_programs == 0
}

/// Every interface of the current network namespace.
pub fn dump() -> anyhow::Result<Vec<Link>> {
    let replies = dump_request(RouteNetlinkMessage::GetLink(LinkMessage::default()), "link")?;
    Ok(replies
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(link) => Some(Link::from_message(link)),
            _ => None,
        })
        .collect())
}

/// Indexes of the interfaces with a qdisc other than `noqueue`: a clsact
/// (legacy tc filters), or one that shapes or schedules traffic.
pub fn with_qdisc() -> anyhow::Result<BTreeSet<u32>> {
    let replies = dump_request(
        RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
        "qdisc",
    )?;
    Ok(replies
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewQueueDiscipline(q)
                if !q.attributes.contains(&TcAttribute::Kind("noqueue".into())) =>
            {
                u32::try_from(q.header.index).ok()
            }
            _ => None,
        })
        .collect())
}

/// Sends one dump request and collects every reply up to NLMSG_DONE.
fn dump_request(
    payload: RouteNetlinkMessage,
    what: &str,
) -> anyhow::Result<Vec<RouteNetlinkMessage>> {
    let mut socket = Socket::new(NETLINK_ROUTE).context("opening an rtnetlink socket")?;
    socket.bind_auto().context("binding the rtnetlink socket")?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .context("connecting the rtnetlink socket")?;
    let mut request = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(payload));
    request.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
    request.header.sequence_number = 1;
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket
        .send(&buf, 0)
        .with_context(|| format!("sending the rtnetlink {what} dump request"))?;
    let mut replies = Vec::new();
    // A dump ends with NLMSG_DONE; the bound keeps a misbehaving socket from
    // looping forever (a node has far fewer than this many datagrams).
    for _ in 0..100_000 {
        let (datagram, _) = socket
            .recv_from_full()
            .with_context(|| format!("reading the rtnetlink {what} dump"))?;
        if parse_datagram(&datagram, &mut replies)
            .with_context(|| format!("rtnetlink {what} dump"))?
        {
            return Ok(replies);
        }
    }
    bail!("the rtnetlink {what} dump did not end")
}

/// Appends the messages in one datagram; true once the dump is complete.
fn parse_datagram(
    mut bytes: &[u8],
    replies: &mut Vec<RouteNetlinkMessage>,
) -> anyhow::Result<bool> {
    while !bytes.is_empty() {
        let msg: NetlinkMessage<RouteNetlinkMessage> =
            NetlinkMessage::deserialize(bytes).context("decoding a message")?;
        let len = msg.header.length as usize;
        match msg.payload {
            NetlinkPayload::Done(_) => return Ok(true),
            NetlinkPayload::Error(e) => bail!("the kernel answered with an error: {e}"),
            NetlinkPayload::InnerMessage(inner) => replies.push(inner),
            _ => {}
        }
        if len == 0 || len > bytes.len() {
            break;
        }
        // Messages are 4-byte aligned within a datagram.
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, name: &str, kind: Kind, peer_elsewhere: bool) -> Link {
        Link {
            index,
            name: name.into(),
            kind,
            peer_elsewhere,
        }
    }

    #[test]
    fn pod_ends_are_veths_and_netkits_with_a_peer_in_another_namespace() {
        let links = [
            link(1, "lo", Kind::Other, false),
            link(2, "eth0", Kind::Other, false),
            link(3, "cali1234", Kind::Veth, true),
            link(4, "nk0", Kind::Netkit, true),
            // Both ends here: a peer redirect would drop the packet.
            link(5, "vethA", Kind::Veth, false),
            // The external interface of a test bed is a veth too.
            link(6, "ext0", Kind::Veth, true),
            // A VXLAN device with a netns id is not a pair.
            link(7, "vxlan0", Kind::Other, true),
        ];
        let external = BTreeSet::from(["ext0".to_owned()]);
        let ends = pod_ends(&links, &external);
        assert_eq!(
            ends,
            BTreeMap::from([(3, "cali1234".to_owned()), (4, "nk0".to_owned())])
        );
    }

    #[test]
    fn link_message_attributes_give_name_kind_and_peer_namespace() {
        let mut msg = LinkMessage::default();
        msg.header.index = 42;
        msg.attributes = vec![
            LinkAttribute::IfName("lxc0".into()),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
            LinkAttribute::LinkNetNsId(3),
        ];
        assert_eq!(Link::from_message(&msg), link(42, "lxc0", Kind::Veth, true));
        msg.attributes.truncate(1);
        assert_eq!(
            Link::from_message(&msg),
            link(42, "lxc0", Kind::Other, false)
        );
    }

    #[test]
    fn peer_redirects_only_into_veths_whose_egress_hook_is_empty() {
        let veth = link(3, "cali1", Kind::Veth, true);
        assert!(peer_redirect_allowed(&veth, false, 0));
        assert!(!peer_redirect_allowed(&veth, true, 0), "a qdisc");
        assert!(!peer_redirect_allowed(&veth, false, 1), "tcx program");
        let netkit = link(4, "nk0", Kind::Netkit, true);
        assert!(
            !peer_redirect_allowed(&netkit, false, 0),
            "netkit runs its own programs"
        );
        let local = link(5, "vethA", Kind::Veth, false);
        assert!(
            !peer_redirect_allowed(&local, false, 0),
            "peer in this namespace"
        );
    }

    #[test]
    fn qdisc_dump_names_existing_interfaces_and_not_noqueue_ones() {
        let with = with_qdisc().expect("rtnetlink qdisc dump");
        let links = dump().expect("link dump");
        assert!(with.iter().all(|i| links.iter().any(|l| l.index == *i)));
        // `lo` always has just `noqueue`.
        assert!(!with.contains(&1), "{with:?}");
    }

    #[test]
    fn dump_lists_the_loopback_interface() {
        // Any network namespace has `lo`, at index 1; no privilege needed.
        let links = dump().expect("rtnetlink dump");
        assert!(
            links.iter().any(|l| l.name == "lo" && l.index == 1),
            "{links:?}"
        );
    }
}
