//! What the ingress programs let through to the node
//! (`ssh_fwd_common::exposure`), XDP and tc, IPv4 and IPv6: a packet to
//! an SSH IP that no mapping translates is dropped (`unmapped_port`),
//! ICMP excepted; a frame for another MAC than the interface's is not
//! translated (`not_for_node`), and a broadcast one to an SSH IP is
//! dropped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ssh_fwd_common::{
    conntrack::TCP_SYN,
    fixtures::Frame,
    fixtures6::Frame6,
    maps::{self, Addr6, MacKey},
    packet::{IPPROTO_ICMP, IPPROTO_TCP},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded,
    conntrack::{Ingress, each_ingress},
    counters, delta, ipv6, load, map,
};

const SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
/// The MAC the test frames are sent to (`Frame::build`'s).
const OWN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// `lo`'s index: the interface a test run without a context puts the
/// packet on (XDP's `ingress_ifindex`, tc's `skb->ifindex`).
const IFINDEX: u32 = 1;
const UDP: u8 = 17;

/// Declares `ip` an SSH IP, as the agent does for `--ssh-ip`.
fn ssh_ip(l: &Loaded, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => map::<u32, u32>(l, maps::SSH_IPS)
            .insert(u32::from_ne_bytes(v4.octets()), 0, 0)
            .expect("SSH_IPS"),
        IpAddr::V6(v6) => map::<Addr6, u32>(l, maps::SSH_IPS6)
            .insert(Addr6::new(v6), 0, 0)
            .expect("SSH_IPS6"),
    }
}

/// Gives the test runs' interface a MAC, as the agent does for an external
/// interface.
fn iface_mac(l: &Loaded, mac: [u8; 6]) {
    map::<u32, MacKey>(l, maps::IFACE_MACS)
        .insert(IFINDEX, MacKey::new(mac), 0)
        .expect("IFACE_MACS");
}

/// `frame`'s verdict through `ingress`, and the counters that moved.
fn run(l: &Loaded, ingress: Ingress, frame: &[u8]) -> (u32, Vec<u8>, Vec<(&'static str, u64)>) {
    let before = counters(l);
    let (verdict, out) = ingress.run(l, frame);
    (verdict, out, delta(&before, &counters(l)))
}

fn passed(ingress: Ingress) -> u32 {
    match ingress {
        Ingress::Tc => super::TC_ACT_UNSPEC,
        Ingress::Xdp => super::XDP_PASS,
    }
}

fn v4(dport: u16, protocol: u8) -> Vec<u8> {
    Frame {
        dport,
        protocol,
        tcp_flags: TCP_SYN,
        payload: if protocol == IPPROTO_ICMP {
            // An echo request.
            vec![8, 0, 0, 0, 0, 1, 0, 1]
        } else {
            Vec::new()
        },
        ..Frame::default()
    }
    .build()
}

fn v6(dport: u16, protocol: u8) -> Vec<u8> {
    Frame6 {
        dport,
        protocol,
        payload: if protocol == 58 {
            vec![128, 0, 0, 0, 0, 1, 0, 1]
        } else {
            Vec::new()
        },
        ..ipv6::request(TCP_SYN, 1_000, 0, 0)
    }
    .build()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ssh_ip_drops_all_but_its_mapped_ports_and_icmp() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        // Before it is declared, the kubelet's port passes, as on any
        // address of the node.
        let (verdict, _, d) = run(&l, ingress, &v4(10250, IPPROTO_TCP));
        assert_eq!(verdict, passed(ingress), "{ingress:?}");
        assert_eq!(d, vec![("not_to_a_frontend", 1)], "{ingress:?}");
        ssh_ip(&l, IpAddr::V4(SSH_IP));
        for (what, frame) in [
            ("TCP to an unmapped port", v4(10250, IPPROTO_TCP)),
            ("UDP", v4(53, UDP)),
        ] {
            let (verdict, _, d) = run(&l, ingress, &frame);
            assert_eq!(verdict, ingress.dropped(), "{ingress:?}, {what}");
            assert_eq!(d, vec![("unmapped_port", 1)], "{ingress:?}, {what}");
        }
        let (verdict, _, d) = run(&l, ingress, &v4(0, IPPROTO_ICMP));
        assert_eq!(verdict, passed(ingress), "{ingress:?}: ping");
        assert_eq!(d, vec![("not_tcp", 1)], "{ingress:?}: ping");
        let (_, _, d) = run(&l, ingress, &v4(8022, IPPROTO_TCP));
        assert!(
            d.contains(&("dnat", 1)),
            "{ingress:?}: the mapped port: {d:?}"
        );
        let other = Frame {
            dst: Ipv4Addr::new(198, 18, 0, 11),
            dport: 10250,
            ..Frame::default()
        }
        .build();
        let (verdict, _, _) = run(&l, ingress, &other);
        assert_eq!(verdict, passed(ingress), "{ingress:?}: another address");

        let l = ipv6::load6();
        ssh_ip(&l, IpAddr::V6(ipv6::FRONTEND));
        for (what, frame) in [
            ("TCP to an unmapped port", v6(10250, IPPROTO_TCP)),
            ("UDP", v6(53, UDP)),
        ] {
            let (verdict, _, d) = run(&l, ingress, &frame);
            assert_eq!(verdict, ingress.dropped(), "{ingress:?}, IPv6 {what}");
            assert_eq!(d, vec![("unmapped_port", 1)], "{ingress:?}, IPv6 {what}");
        }
        let (verdict, _, _) = run(&l, ingress, &v6(0, 58));
        assert_eq!(verdict, passed(ingress), "{ingress:?}: IPv6 ping");
        let (_, _, d) = run(&l, ingress, &v6(8022, IPPROTO_TCP));
        assert!(d.contains(&("dnat", 1)), "{ingress:?}: IPv6 mapped: {d:?}");
        let other = Frame6 {
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x11),
            ..ipv6::request(TCP_SYN, 1_000, 0, 0)
        }
        .build();
        let (verdict, _, _) = run(&l, ingress, &other);
        assert_eq!(
            verdict,
            passed(ingress),
            "{ingress:?}: another IPv6 address"
        );
    });
}

/// `frame` sent to `mac` instead.
fn to_mac(frame: &[u8], mac: [u8; 6]) -> Vec<u8> {
    let mut frame = frame.to_vec();
    frame[..6].copy_from_slice(&mac);
    frame
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_frames_for_the_interfaces_own_mac_are_translated() {
    privilege::require();
    let other = [0x02, 0, 0, 0, 0, 0x99];
    let broadcast = [0xff; 6];
    each_ingress(|ingress| {
        for family in ["IPv4", "IPv6"] {
            let (l, syn) = match family {
                "IPv4" => (load(&[JOB]), v4(8022, IPPROTO_TCP)),
                _ => (ipv6::load6(), v6(8022, IPPROTO_TCP)),
            };
            iface_mac(&l, OWN_MAC);
            let (verdict, out, d) = run(&l, ingress, &to_mac(&syn, other));
            assert_eq!(verdict, passed(ingress), "{ingress:?} {family}");
            assert_eq!(out, to_mac(&syn, other), "{ingress:?} {family}: untouched");
            assert_eq!(d, vec![("not_for_node", 1)], "{ingress:?} {family}");
            let (verdict, out, d) = run(&l, ingress, &to_mac(&syn, broadcast));
            assert_eq!(verdict, passed(ingress), "{ingress:?} {family}: broadcast");
            assert_eq!(out, to_mac(&syn, broadcast), "{ingress:?} {family}");
            assert_eq!(d, vec![("not_for_node", 1)], "{ingress:?} {family}");
            // To an SSH IP, a broadcast frame would reach the node itself.
            let ip = match family {
                "IPv4" => IpAddr::V4(SSH_IP),
                _ => IpAddr::V6(ipv6::FRONTEND),
            };
            ssh_ip(&l, ip);
            let (verdict, _, d) = run(&l, ingress, &to_mac(&syn, broadcast));
            assert_eq!(verdict, ingress.dropped(), "{ingress:?} {family}");
            assert_eq!(d, vec![("unmapped_port", 1)], "{ingress:?} {family}");
            let (verdict, _, d) = run(&l, ingress, &to_mac(&syn, other));
            assert_eq!(verdict, passed(ingress), "{ingress:?} {family}");
            assert_eq!(d, vec![("not_for_node", 1)], "{ingress:?} {family}");
            let (_, _, d) = run(&l, ingress, &syn);
            assert!(
                d.contains(&("dnat", 1)),
                "{ingress:?} {family}: own MAC: {d:?}"
            );
        }
    });
}
