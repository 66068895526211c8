use super::*;

fn link(index: u32, name: &str, kind: Kind, peer_elsewhere: bool) -> Link {
    Link {
        index,
        name: name.into(),
        kind,
        peer_elsewhere,
        ..Link::default()
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
        LinkAttribute::Link(2),
        LinkAttribute::Controller(7),
    ];
    assert_eq!(
        Link::from_message(&msg),
        Link {
            peer: Some(Peer {
                netns_id: 3,
                index: 2
            }),
            master: Some(7),
            software: true,
            ..link(42, "lxc0", Kind::Veth, true)
        }
    );
    msg.attributes.truncate(1);
    assert_eq!(
        Link::from_message(&msg),
        link(42, "lxc0", Kind::Other, false),
        "a NIC: no kind, no peer"
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
fn own_addresses_leave_out_the_loopback_and_dummies() {
    let links = [
        link(1, "lo", Kind::Loopback, false),
        link(2, "eth0", Kind::Other, false),
        link(3, "ssh0", Kind::Dummy, false),
    ];
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let addrs = [
        (1, ip("127.0.0.1")),
        (1, ip("198.18.0.10")),
        (2, ip("192.0.2.1")),
        (2, ip("2001:db8::1")),
        (3, ip("198.18.0.11")),
        (3, ip("2001:db8::10")),
    ];
    assert_eq!(
        own_addresses(&links, &addrs),
        [
            (ip("192.0.2.1"), "eth0".to_owned()),
            (ip("2001:db8::1"), "eth0".to_owned())
        ]
        .into()
    );
}

#[tokio::test]
async fn address_dump_sees_the_loopback_address_on_a_loopback_link() {
    let netlink = Netlink::open().expect("rtnetlink");
    let links = netlink.links().await.expect("link dump");
    let lo = links.iter().find(|l| l.index == 1).expect("lo");
    assert_eq!(lo.kind, Kind::Loopback);
    let addrs = netlink.addresses().await.expect("address dump");
    let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
    assert!(addrs.contains(&(1, localhost)), "{addrs:?}");
    assert!(!own_addresses(&links, &addrs).contains_key(&localhost));
}

#[tokio::test]
async fn qdisc_dump_names_existing_interfaces_and_not_noqueue_ones() {
    let netlink = Netlink::open().expect("rtnetlink");
    let with = netlink.with_qdisc().await.expect("rtnetlink qdisc dump");
    let links = netlink.links().await.expect("link dump");
    assert!(with.iter().all(|i| links.iter().any(|l| l.index == *i)));
    // `lo` always has just `noqueue`.
    assert!(!with.contains(&1), "{with:?}");
}

#[tokio::test]
async fn dump_lists_the_loopback_interface() {
    // Any network namespace has `lo`, at index 1; no privilege needed.
    let links = Netlink::open()
        .expect("rtnetlink")
        .links()
        .await
        .expect("dump");
    assert!(
        links.iter().any(|l| l.name == "lo" && l.index == 1),
        "{links:?}"
    );
    assert_eq!(name_of(1).as_deref(), Some("lo"));
    assert_eq!(index("lo").expect("lo"), 1);
}
