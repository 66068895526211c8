//! The checks a packet passes before it may touch state.

use crate::{
    conntrack::trust::{
        Ownership, Seal, martian_source, martian_source6, option_trusted, ownership, seal_of,
        source_key6, tcp_checksum_needs_sum, ttl_expires, within_quota,
    },
    maps::{Addr6, IFACE_CLUSTER, IFACE_EXTERNAL, IFACE_POD_PEER, Owner},
};

fn raw(a: [u8; 4]) -> u32 {
    u32::from_ne_bytes(a)
}

#[test]
fn sources_no_router_forwards_are_martian() {
    let frontend = raw([198, 18, 0, 10]);
    for src in [
        [0, 0, 0, 0],
        [0, 1, 2, 3],
        [127, 0, 0, 1],
        [224, 0, 0, 5],
        [239, 255, 255, 250],
        [240, 0, 0, 1],
        [255, 255, 255, 255],
        [198, 18, 0, 10],
    ] {
        assert!(martian_source(raw(src), frontend), "{src:?}");
    }
    for src in [
        [192, 0, 2, 2],
        [10, 0, 0, 1],
        [223, 255, 255, 254],
        [1, 1, 1, 1],
    ] {
        assert!(!martian_source(raw(src), frontend), "{src:?}");
    }
}

#[test]
fn a_ttl_of_one_or_zero_is_not_forwarded() {
    assert!(ttl_expires(0) && ttl_expires(1));
    assert!(!ttl_expires(2) && !ttl_expires(64));
}

#[test]
fn only_a_virtual_interface_takes_a_pseudo_header_sum_for_a_partial_checksum() {
    let seed = 0x1234;
    assert!(!tcp_checksum_needs_sum(seed, seed, true));
    assert!(!tcp_checksum_needs_sum(!seed, !seed, true));
    assert!(tcp_checksum_needs_sum(seed, seed, false), "a physical NIC");
    assert!(
        tcp_checksum_needs_sum(seed ^ 1, seed, true),
        "any other field"
    );
}

#[test]
fn a_pods_address_counts_only_from_its_own_interface_or_bridge() {
    let owner = Owner {
        ifindex: 7,
        master: 3,
    };
    assert_eq!(ownership(Some(&owner), 7), Ownership::Owned);
    assert_eq!(ownership(Some(&owner), 3), Ownership::Owned, "its bridge");
    assert_eq!(ownership(Some(&owner), 8), Ownership::Spoofed);
    assert_eq!(ownership(None, 7), Ownership::Unknown);
    let unbridged = Owner {
        ifindex: 7,
        master: 0,
    };
    assert_eq!(ownership(Some(&unbridged), 0), Ownership::Spoofed);
}

#[test]
fn a_plain_frontend_option_is_believed_only_from_a_cluster_interface() {
    let plain = |flags, mode| option_trusted(flags, mode, false, Seal::None);
    assert!(plain(IFACE_CLUSTER, false));
    assert!(!plain(IFACE_CLUSTER, true), "--cross-node plain");
    assert!(!plain(IFACE_EXTERNAL, false));
    assert!(
        !plain(IFACE_EXTERNAL | IFACE_CLUSTER, false),
        "an external interface that also reaches the nodes"
    );
    assert!(!plain(IFACE_POD_PEER, false), "a pod");
    assert!(!plain(0, false), "an interface the agent does not know");
}

#[test]
fn a_node_with_the_key_believes_no_plain_frontend_option() {
    for flags in [IFACE_CLUSTER, IFACE_EXTERNAL, 0] {
        assert!(
            !option_trusted(flags, false, true, Seal::None),
            "{flags:#x}"
        );
        assert!(
            option_trusted(flags, false, true, Seal::Valid),
            "{flags:#x}"
        );
    }
}

#[test]
fn a_sealed_frontend_option_is_believed_wherever_it_arrives_if_its_tag_is_right() {
    for flags in [
        IFACE_CLUSTER,
        IFACE_EXTERNAL,
        IFACE_EXTERNAL | IFACE_CLUSTER,
        0,
    ] {
        assert!(
            option_trusted(flags, false, true, Seal::Valid),
            "{flags:#x}"
        );
        assert!(
            !option_trusted(flags, false, true, Seal::Forged),
            "{flags:#x}"
        );
        assert!(
            !option_trusted(flags, true, true, Seal::Valid),
            "--cross-node plain"
        );
    }
    assert_eq!(seal_of(false, 0, Some(7)), Seal::None);
    assert_eq!(seal_of(true, 7, Some(7)), Seal::Valid);
    assert_eq!(seal_of(true, 7, Some(8)), Seal::Forged);
    assert_eq!(
        seal_of(true, 7, None),
        Seal::Forged,
        "a node without the key"
    );
}

#[test]
fn a_client_may_hold_up_to_its_quota() {
    assert!(within_quota(0, 512));
    assert!(within_quota(511, 512));
    assert!(!within_quota(512, 512));
    assert!(within_quota(u64::MAX, 0), "0: no limit");
}

#[test]
fn a_count_a_race_drove_below_zero_holds_nothing() {
    // The sweep sets a count from its walk while the kernel confirms a
    // connection the walk missed; when that one closes, the count goes
    // one below zero (wrapping). It must not lock the client out until
    // the next sweep.
    assert!(within_quota(u64::MAX, 512));
    assert!(within_quota(u64::MAX - 15, 512));
    assert!(within_quota(0u64.wrapping_sub(600), 512));
}

fn raw6(ip: &str) -> Addr6 {
    Addr6::new(ip.parse().unwrap())
}

#[test]
fn ipv6_sources_the_node_would_not_forward_are_martian() {
    let frontend = raw6("2001:db8::10");
    for src in [
        "::",
        "::1",
        "ff02::1",
        "ff0e::1",
        "fe80::1",
        "febf:ffff::1",
        "::ffff:192.0.2.1",
        "::ffff:127.0.0.1",
        "2001:db8::10",
    ] {
        assert!(martian_source6(raw6(src), frontend), "{src}");
    }
    for src in [
        "2001:db8::1",
        "2a00:1450::1",
        "fc00::1",
        "fec0::1",
        "64:ff9b::c000:201",
        "::2",
        "::fffe:c000:201",
        "fe7f:ffff::1",
        "fec0::",
    ] {
        assert!(!martian_source6(raw6(src), frontend), "{src}");
    }
}

#[test]
fn an_ipv6_clients_quota_counts_its_whole_64() {
    let key = |ip| source_key6(raw6(ip));
    assert_eq!(
        key("2001:db8:1:2::1"),
        key("2001:db8:1:2:ffff:ffff:ffff:ffff")
    );
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db9:1:2::1"));
    // The key is the prefix's 8 bytes as a load from the packet reads them.
    let octets = raw6("2001:db8:1:2::1").octets();
    let mut prefix = [0; 8];
    prefix.copy_from_slice(&octets[..8]);
    assert_eq!(key("2001:db8:1:2::1"), u64::from_ne_bytes(prefix));
}
