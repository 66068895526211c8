//! What a segment must pass before it writes state, through the real
//! programs: checksums, the TTL, the source, the client's quota, the pod
//! interface a reply comes in by, and the claim's age.

use std::net::Ipv4Addr;

use ssh_fwd::datapath::object;
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_RST, TCP_SYN},
    fixtures::Frame,
    maps::Endpoint,
};
use ssh_fwd_tests::privilege;

use super::{
    super::{
        JOB, Loaded, POD_IFINDEX, counters, delta, from_pod, load, load_with, map, own,
        test_run_tc_on,
    },
    BACKEND, BANNER, CLIENT, CLIENT_ISN, Ingress, PSH, SECOND, SERVER_ISN, TC_ACT_SHOT, claims,
    each_ingress, established, frontend, half_open, handshake, reply, request, source_of,
};

/// `frame` with `f` applied to its IPv4 header and the checksum not fixed.
fn spoiled(mut frame: Vec<u8>, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    f(&mut frame[14..34]);
    frame
}

/// A client segment that fails one check, and the counter it shows under.
fn failing(flags: u8, seq: u32, ack: u32) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let good = request(8022, flags, seq, ack, 0);
    let tcp_check = 14 + 20 + 16;
    let mut bad_tcp = good.clone();
    bad_tcp[tcp_check] ^= 0x5a;
    let bad_ip = spoiled(good.clone(), |ip| ip[10] ^= 0x5a);
    let martian = Frame {
        src: Ipv4Addr::new(127, 0, 0, 1),
        tcp_flags: flags,
        seq,
        ack,
        ..Frame::default()
    }
    .build();
    vec![
        ("a wrong TCP checksum", bad_tcp, "bad_checksum"),
        ("a wrong IPv4 checksum", bad_ip, "bad_checksum"),
        ("a loopback source", martian, "martian_source"),
    ]
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_or_ack_the_pod_would_drop_writes_nothing() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        own(&l, BACKEND);
        for (case, frame, outcome) in failing(TCP_SYN, CLIENT_ISN, 0) {
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &frame);
            assert_eq!(verdict, ingress.dropped(), "{ingress:?} SYN with {case}");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![(outcome, 1)],
                "{ingress:?} SYN with {case}"
            );
        }
        assert!(half_open(&l).is_empty(), "{ingress:?}");
        for (case, frame, outcome) in failing(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1) {
            let before = counters(&l);
            let (verdict, _) = ingress.run(&l, &frame);
            assert_eq!(verdict, ingress.dropped(), "{ingress:?} ACK with {case}");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![(outcome, 1)],
                "{ingress:?} ACK with {case}"
            );
        }
        assert!(claims(&l).is_empty(), "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_segment_with_a_ttl_of_one_is_left_to_the_stack_untranslated_and_writes_nothing() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        own(&l, BACKEND);
        for (flags, seq, ack) in [
            (TCP_SYN, CLIENT_ISN, 0),
            (TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1),
        ] {
            let frame = Frame {
                ttl: 1,
                tcp_flags: flags,
                seq,
                ack,
                ..Frame::default()
            }
            .build();
            let before = counters(&l);
            let (_, out) = ingress.run(&l, &frame);
            assert_eq!(out, frame, "{ingress:?}: untouched");
            assert_eq!(
                delta(&before, &counters(&l)),
                vec![("ttl_expired", 1)],
                "{ingress:?}"
            );
        }
        assert!(half_open(&l).is_empty() && claims(&l).is_empty());
    });
}

/// A second connection of the client, from port 40,001 through 8022,
/// confirmed by the server's banner: the frontend the banner leaves with.
fn second_connection(l: &Loaded, ingress: Ingress) -> Endpoint {
    let from_port = |flags, seq, ack| {
        Frame {
            sport: 40_001,
            tcp_flags: flags,
            seq,
            ack,
            ..Frame::default()
        }
        .build()
    };
    ingress.run(l, &from_port(TCP_SYN, 5, 0));
    ingress.run(l, &from_port(TCP_ACK, 6, 900));
    let banner = Frame {
        src: BACKEND,
        sport: 22,
        dst: CLIENT,
        dport: 40_001,
        tcp_flags: TCP_ACK | PSH,
        seq: 900,
        ack: 6,
        payload: vec![b's'; BANNER],
        ..Frame::default()
    }
    .build();
    let (_, out) = from_pod(l, &banner);
    source_of(&out)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_client_at_its_quota_is_held_back_and_counted_for_the_mapping() {
    use aya::maps::{HashMap, MapData};
    use ssh_fwd_common::maps::SOURCES;

    privilege::require();
    let two = object::Settings {
        conns_per_source: 2,
        ..object::Settings::default()
    };
    each_ingress(|ingress| {
        let l = load_with(&[JOB], two);
        handshake(&l, ingress, 8022);
        let sources: HashMap<MapData, u32, u64> = map(&l, SOURCES);
        let client = u32::from_ne_bytes(CLIENT.octets());
        assert_eq!(sources.get(&client, 0).expect("counted"), 1);
        // A second connection from another port: within the quota.
        assert_eq!(second_connection(&l, ingress), frontend(8022));
        assert_eq!(sources.get(&client, 0).expect("counted"), 2);
        // A third: its last ACK is held back, counted globally and for the
        // mapping.
        let before = counters(&l);
        let (verdict, _) = ingress.run(
            &l,
            &Frame {
                sport: 40_002,
                tcp_flags: TCP_ACK,
                ..Frame::default()
            }
            .build(),
        );
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(delta(&before, &counters(&l)), vec![("source_limited", 1)]);
        assert_eq!(
            l.maps
                .mapping_conn_counters(0)
                .expect("slot 0")
                .source_limited,
            1,
            "{ingress:?}"
        );
        // Another client is not concerned.
        let (verdict, _) = ingress.run(
            &l,
            &Frame {
                src: Ipv4Addr::new(192, 0, 2, 3),
                tcp_flags: TCP_ACK,
                ..Frame::default()
            }
            .build(),
        );
        assert_ne!(verdict, ingress.dropped(), "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_connection_closed_both_ways_gives_its_clients_quota_back() {
    use aya::maps::{HashMap, MapData};
    use ssh_fwd_common::{conntrack::TCP_FIN, maps::SOURCES};

    privilege::require();
    let two = object::Settings {
        conns_per_source: 2,
        ..object::Settings::default()
    };
    let l = load_with(&[JOB, SECOND], two);
    let sources: HashMap<MapData, u32, u64> = map(&l, SOURCES);
    let client = u32::from_ne_bytes(CLIENT.octets());
    let held = || sources.get(&client, 0).unwrap_or(0);
    handshake(&l, Ingress::Tc, 8022);
    assert_eq!(held(), 1);
    // Both sides close: the entry stays for the close timeout, but the
    // client no longer holds a connection.
    let after_banner = SERVER_ISN + 1 + BANNER as u32;
    Ingress::Tc.run(
        &l,
        &request(8022, TCP_FIN | TCP_ACK, CLIENT_ISN + 1, after_banner, 0),
    );
    from_pod(
        &l,
        &reply(TCP_FIN | TCP_ACK, after_banner, CLIENT_ISN + 2, 0),
    );
    assert_eq!(established(&l).len(), 1, "the closing entry stays");
    assert_eq!(held(), 0, "a closed connection is not held");
    // Its last ACK, retransmitted FINs and a late RST give nothing back
    // twice.
    Ingress::Tc.run(
        &l,
        &request(8022, TCP_ACK, CLIENT_ISN + 2, after_banner + 1, 0),
    );
    from_pod(
        &l,
        &reply(TCP_FIN | TCP_ACK, after_banner, CLIENT_ISN + 2, 0),
    );
    Ingress::Tc.run(
        &l,
        &request(8022, TCP_RST | TCP_ACK, CLIENT_ISN + 2, after_banner + 1, 0),
    );
    assert_eq!(held(), 0);
    // So a client that opens and closes connections one after another is
    // never held back, however many it opened within the close timeout.
    handshake(&l, Ingress::Tc, 9022);
    assert_eq!(held(), 1, "the 4-tuple reopened through the other frontend");
    assert_eq!(second_connection(&l, Ingress::Tc), frontend(8022));
    assert_eq!(held(), 2);
    assert_eq!(counters(&l)["source_limited"], 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pods_address_from_another_interface_is_dropped_and_moves_nothing() {
    use ssh_fwd::datapath::object::{PROG_EGRESS_TC, PROG_REPLY_TC};

    privilege::require();
    let l = load(&[JOB]);
    handshake(&l, Ingress::Tc, 8022);
    let before_conn = established(&l)[0];
    // Another pod (interface 4242: not pod 1's) sends a RST exactly in
    // sequence and a SYN-ACK as pod 1; the egress program sees where they
    // came in.
    for frame in [
        reply(TCP_RST, before_conn.server_next, 0, 0),
        reply(TCP_SYN | TCP_ACK, 0x5eed, CLIENT_ISN + 1, 0),
        reply(
            TCP_ACK,
            before_conn.server_next + 1_000,
            CLIENT_ISN + 50,
            10,
        ),
    ] {
        let before = counters(&l);
        let (verdict, _) = test_run_tc_on(&l, PROG_EGRESS_TC, &frame, 4242, 0);
        assert_eq!(verdict, TC_ACT_SHOT);
        assert_eq!(delta(&before, &counters(&l)), vec![("spoofed_reply", 1)]);
    }
    assert_eq!(established(&l), [before_conn], "nothing moved");
    // On a pod interface (the reply program), the same: the program runs on
    // lo here, and pod 1's interface is recorded as another one.
    use aya::maps::{HashMap, Map, MapData};
    let data = MapData::from_pin(l.layout.map(ssh_fwd_common::maps::OWNERS)).expect("pin");
    let mut owners: HashMap<MapData, u32, ssh_fwd_common::maps::Owner> =
        HashMap::try_from(Map::from_map_data(data).expect("map")).expect("OWNERS");
    let elsewhere = ssh_fwd_common::maps::Owner {
        ifindex: 4242,
        master: 0,
    };
    owners
        .insert(u32::from_ne_bytes(BACKEND.octets()), elsewhere, 0)
        .expect("owner");
    let rst = reply(TCP_RST, before_conn.server_next, 0, 0);
    let before = counters(&l);
    let (verdict, _) = test_run_tc_on(&l, PROG_REPLY_TC, &rst, POD_IFINDEX, POD_IFINDEX);
    assert_eq!(verdict, TC_ACT_SHOT);
    assert_eq!(delta(&before, &counters(&l)), vec![("spoofed_reply", 1)]);
    assert_eq!(established(&l), [before_conn]);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_reply_from_an_address_no_pod_interface_has_moves_nothing() {
    privilege::require();
    let l = load(&[JOB]);
    Ingress::Tc.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
    // No pod of this node has the backend's address (yet): its SYN-ACK is
    // not restored, and nothing is learned.
    let syn_ack = reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0);
    let before = counters(&l);
    let (_, out) = from_pod(&l, &syn_ack);
    assert_eq!(out, syn_ack);
    let d = delta(&before, &counters(&l));
    assert!(d.contains(&("reply_no_owner", 1)), "{d:?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_claim_older_than_the_confirm_timeout_confirms_nothing() {
    privilege::require();
    let instant = object::Settings {
        confirm_timeout_ns: 1,
        ..object::Settings::default()
    };
    let l = load_with(&[JOB], instant);
    own(&l, BACKEND);
    Ingress::Tc.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
    from_pod(&l, &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0));
    Ingress::Tc.run(
        &l,
        &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    );
    assert_eq!(claims(&l).len(), 1);
    // The kernel's coarse clock moves every few milliseconds.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let banner = reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER);
    let (_, out) = from_pod(&l, &banner);
    assert_eq!(source_of(&out), Endpoint::new(BACKEND, 22), "not restored");
    assert!(established(&l).is_empty());
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_kernel_counts_the_agents_changes_and_the_sweep_counts_idle_connections_off() {
    use std::time::Duration;

    use aya::maps::{HashMap, MapData};
    use ssh_fwd::datapath::conntrack::{Adder, ConnTables, Timeouts, clock_ns};
    use ssh_fwd_common::maps::{QuotaChange, SOURCES, SOURCES6};

    privilege::require();
    let two = object::Settings {
        conns_per_source: 2,
        ..object::Settings::default()
    };
    let mut l = load_with(&[JOB, SECOND], two);
    let adder = Adder::from_ebpf(&mut l.ebpf).expect("the verifier accepts the quota program");
    let sources: HashMap<MapData, u32, u64> = map(&l, SOURCES);
    let sources6: HashMap<MapData, u64, u64> = map(&l, SOURCES6);
    let client = u32::from_ne_bytes(CLIENT.octets());
    let held = || sources.get(&client, 0).ok();
    let change = |source: u64, delta: u64, family: u32| {
        adder.apply(&QuotaChange {
            source,
            delta,
            family,
            _pad: 0,
        })
    };
    // Taking away from a client with no entry does nothing; adding stores.
    change(client.into(), u64::MAX, QuotaChange::V4).expect("apply");
    assert_eq!(held(), None);
    change(client.into(), 3, QuotaChange::V4).expect("apply");
    change(client.into(), 2u64.wrapping_neg(), QuotaChange::V4).expect("apply");
    assert_eq!(held(), Some(1));
    change(0x2001_0db8_0000_0001, 5, QuotaChange::V6).expect("apply");
    assert_eq!(sources6.get(&0x2001_0db8_0000_0001, 0).ok(), Some(5));
    assert!(change(1, 1, 5).is_err(), "no such family");
    change(client.into(), u64::MAX, QuotaChange::V4).expect("apply");
    // Two connections, counted by the programs; a sweep a day later finds
    // both idle and counts them off, and the client, holding nothing,
    // leaves the table.
    handshake(&l, Ingress::Tc, 8022);
    assert_eq!(second_connection(&l, Ingress::Tc), frontend(8022));
    assert_eq!(held(), Some(2));
    let mut tables = ConnTables::open_pinned(&l.layout)
        .expect("tables")
        .with_quota(adder.clone());
    let timeouts = Timeouts::with_idle(Duration::from_secs(24 * 3_600));
    let day = 25 * 3_600 * 1_000_000_000;
    let swept = tables.sweep(clock_ns() + day, &timeouts);
    assert_eq!((swept.expired, swept.conns), (2, 0));
    assert_eq!(held(), None, "nothing held, no entry");
    // So the client opens two again.
    handshake(&l, Ingress::Tc, 8022);
    assert_eq!(second_connection(&l, Ingress::Tc), frontend(8022));
    assert_eq!(held(), Some(2));
}
