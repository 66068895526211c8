//! Connection tracking on crafted packets: every transition of
//! `ssh_fwd_common::conntrack` through the real programs (the SYN, the
//! SYN-ACK learned on the reply path, the ACK that promotes, a wrong ACK,
//! RSTs in and out of sequence, FINs both ways, a takeover attempt through
//! another frontend), the maps read back after each step.

use std::net::Ipv4Addr;

use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    object::{self, PROG_EGRESS_TC, PROG_INGRESS_TC, PROG_REPLY_TC},
};
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN},
    fixtures::Frame,
    maps::{
        CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_FIN_SERVER, CONN_REOPENING, Endpoint,
        HALF_OPEN_ISN_KNOWN,
    },
    packet::{self, Side},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded, TC_ACT_UNSPEC, counters, delta, load, load_with, test_run_tc, test_run_xdp,
};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 5);
pub const CLIENT_ISN: u32 = 1_000;
pub const SERVER_ISN: u32 = 7_000_000;
const TC_ACT_SHOT: u32 = 2;
const XDP_DROP: u32 = 1;
const SECOND: (&str, &str, &str) = ("second", "198.18.0.10:9022", "10.244.1.5:22");

pub fn frontend(port: u16) -> Endpoint {
    Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), port)
}

/// A segment from the client (port 40000) to the frontend on `port`.
pub fn request(port: u16, flags: u8, seq: u32, ack: u32, payload: usize) -> Vec<u8> {
    Frame {
        src: CLIENT,
        sport: 40_000,
        dport: port,
        tcp_flags: flags,
        seq,
        ack,
        payload: vec![b'c'; payload],
        ..Frame::default()
    }
    .build()
}

/// A segment from the backend (port 22) to the client.
pub fn reply(flags: u8, seq: u32, ack: u32, payload: usize) -> Vec<u8> {
    Frame {
        src: BACKEND,
        sport: 22,
        dst: CLIENT,
        dport: 40_000,
        tcp_flags: flags,
        seq,
        ack,
        payload: vec![b's'; payload],
        ..Frame::default()
    }
    .build()
}

/// Where a packet's source points after the reply path ran.
pub fn source_of(frame: &[u8]) -> Endpoint {
    let tcp = packet::classify(frame).expect("classify");
    packet::endpoint(frame, tcp, Side::Source)
}

/// Which ingress program a test drives.
#[derive(Clone, Copy, Debug)]
pub enum Ingress {
    Tc,
    Xdp,
}

impl Ingress {
    pub fn run(self, l: &Loaded, frame: &[u8]) -> (u32, Vec<u8>) {
        match self {
            Ingress::Tc => test_run_tc(l, PROG_INGRESS_TC, frame),
            Ingress::Xdp => test_run_xdp(l, frame),
        }
    }

    fn dropped(self) -> u32 {
        match self {
            Ingress::Tc => TC_ACT_SHOT,
            Ingress::Xdp => XDP_DROP,
        }
    }
}

pub fn entries(l: &Loaded) -> Vec<Entry> {
    ConnTables::open_pinned(&l.layout)
        .expect("tables")
        .entries()
}

/// The SYN, the server's SYN-ACK (rewritten on the way out), the client's
/// ACK: a tracked connection through the frontend on `port`.
pub fn handshake(l: &Loaded, ingress: Ingress, port: u16) {
    ingress.run(l, &request(port, TCP_SYN, CLIENT_ISN, 0, 0));
    let (_, out) = test_run_tc(
        l,
        PROG_EGRESS_TC,
        &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
    );
    assert_eq!(
        source_of(&out),
        frontend(port),
        "the SYN-ACK leaves as the frontend"
    );
    ingress.run(
        l,
        &request(port, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    );
}

fn established(l: &Loaded) -> Vec<ssh_fwd_common::maps::Conn> {
    entries(l)
        .into_iter()
        .filter_map(|e| match e {
            Entry::Established(_, c) => Some(c),
            Entry::HalfOpen(..) => None,
        })
        .collect()
}

fn half_open(l: &Loaded) -> Vec<ssh_fwd_common::maps::HalfOpen> {
    entries(l)
        .into_iter()
        .filter_map(|e| match e {
            Entry::HalfOpen(_, h) => Some(h),
            Entry::Established(..) => None,
        })
        .collect()
}

fn each_ingress(test: impl Fn(Ingress)) {
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        test(ingress);
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_the_clients_ack_of_the_servers_syn_ack_creates_a_connection() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        // SYN: a half-open entry, nothing established.
        let before = counters(&l);
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("dnat", 1), ("half_opened", 1)],
            "{ingress:?}"
        );
        let half = half_open(&l);
        assert_eq!(half.len(), 1);
        assert_eq!(
            (half[0].frontend, half[0].client_isn),
            (frontend(8022), CLIENT_ISN)
        );
        assert_eq!(half[0].flags & HALF_OPEN_ISN_KNOWN, 0);
        assert!(established(&l).is_empty());
        // An ACK before the SYN-ACK was seen: nothing.
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        assert!(established(&l).is_empty(), "{ingress:?}");
        // The SYN-ACK: learned, and sent out as the frontend.
        let (verdict, out) = test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
        );
        assert_eq!(verdict, TC_ACT_UNSPEC);
        assert_eq!(source_of(&out), frontend(8022));
        let half = half_open(&l);
        assert_eq!(half[0].server_isn, SERVER_ISN);
        assert_ne!(half[0].flags & HALF_OPEN_ISN_KNOWN, 0);
        // A wrong ACK (off by one): nothing.
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 2, 0),
        );
        assert!(established(&l).is_empty(), "{ingress:?}");
        // The right one: established, half-open gone.
        let before = counters(&l);
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conn_established", 1), ("dnat", 1)],
            "{ingress:?}"
        );
        let conns = established(&l);
        assert_eq!(conns.len(), 1);
        assert_eq!(conns[0].frontend, frontend(8022));
        assert_eq!(
            (conns[0].client_next, conns[0].server_next),
            (CLIENT_ISN + 1, SERVER_ISN + 1)
        );
        assert!(half_open(&l).is_empty());
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_handshake_a_full_table_refuses_is_held_back_and_completes_once_room_frees() {
    use aya::maps::{HashMap, Map, MapData};
    use ssh_fwd_common::maps::{CONNS, Conn, ConnKey};

    privilege::require();
    let small = object::Settings {
        conn_table_size: 4,
        ..object::Settings::default()
    };
    each_ingress(|ingress| {
        let l = load_with(&[JOB], small);
        // Other clients' connections fill the established table.
        let data = MapData::from_pin(l.layout.map(CONNS)).expect("pin");
        let mut conns: HashMap<MapData, ConnKey, Conn> =
            HashMap::try_from(Map::from_map_data(data).expect("map")).expect("CONNS");
        let others: Vec<ConnKey> = (0..4)
            .map(|i| ConnKey::new(Endpoint::new(Ipv4Addr::new(100, 64, 0, i), 1024), backend()))
            .collect();
        for key in &others {
            let conn = Conn {
                frontend: frontend(8022),
                ..Conn::ZERO
            };
            conns.insert(key, conn, 0).expect("fill");
        }
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
        );
        // The completing ACK finds no room: dropped, so the pod stays in
        // SYN-RECV and sends nothing the table cannot restore; the
        // half-open entry stays for the next try.
        let ack = request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0);
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &ack);
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conn_table_full", 1)],
            "{ingress:?}"
        );
        let half = half_open(&l);
        assert_eq!(half.len(), 1, "{ingress:?}");
        assert_ne!(half[0].flags & HALF_OPEN_ISN_KNOWN, 0);
        // The pod retransmits its SYN-ACK: still restored.
        let (_, out) = test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
        );
        assert_eq!(source_of(&out), frontend(8022));
        // Room frees (the sweep removed a connection); the client's answer
        // to that SYN-ACK completes the handshake.
        conns.remove(&others[0]).expect("room");
        let (verdict, _) = ingress.run(&l, &ack);
        assert_ne!(verdict, ingress.dropped(), "{ingress:?}");
        let mine: Vec<_> = established(&l)
            .into_iter()
            .filter(|c| c.frontend == frontend(8022) && c.server_next == SERVER_ISN + 1)
            .collect();
        assert_eq!(mine.len(), 1, "{ingress:?}");
        assert!(half_open(&l).is_empty(), "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_spoofed_syn_between_the_syn_ack_and_the_ack_does_not_displace_the_handshake() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, SECOND]);
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
        );
        // An off-path sender's SYNs for the client's own 4-tuple, through
        // the same frontend and the other one, land before the client's
        // ACK (the client will not send its SYN again).
        ingress.run(&l, &request(8022, TCP_SYN, 0x5eed, 0, 0));
        ingress.run(&l, &request(9022, TCP_SYN, 0x5eee, 0, 0));
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        let conns = established(&l);
        assert_eq!(conns.len(), 1, "{ingress:?}: the login completed");
        assert_eq!(conns[0].frontend, frontend(8022), "{ingress:?}");
        // The spoofed handshakes stay half-open until they expire.
        assert!(
            half_open(&l).iter().all(|h| h.client_isn != CLIENT_ISN),
            "{ingress:?}"
        );
        // Both of them: one per frontend, neither the client's.
        let mut spoofed: Vec<u32> = half_open(&l).iter().map(|h| h.client_isn).collect();
        spoofed.sort_unstable();
        assert_eq!(spoofed, [0x5eed, 0x5eee], "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_retransmitted_syn_keeps_the_servers_isn_the_handshake_learned() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        let syn = request(8022, TCP_SYN, CLIENT_ISN, 0, 0);
        ingress.run(&l, &syn);
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0),
        );
        // The SYN again (the SYN-ACK was slow or lost), then the ACK of
        // the SYN-ACK that did arrive.
        let before = counters(&l);
        ingress.run(&l, &syn);
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("dnat", 1)],
            "{ingress:?}: no new half-open entry"
        );
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        assert_eq!(established(&l).len(), 1, "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_half_open_table_pinned_with_the_older_key_is_replaced_at_load() {
    use aya::maps::MapInfo;
    use ssh_fwd_common::maps::{HALF_OPEN, HALF_OPEN_CAPACITY};

    privilege::require();
    // An agent of layout v4 before handshakes were keyed by the client's
    // ISN left its half-open table: (client, backend) keys, 12 bytes.
    let l = super::load_over(&[JOB], object::Settings::default(), |layout| {
        let pin = layout.map(HALF_OPEN);
        let entries = HALF_OPEN_CAPACITY.to_string();
        ssh_fwd_tests::cmd::run(std::process::Command::new("bpftool").args([
            "map",
            "create",
            pin.to_str().expect("path"),
            "type",
            "lru_hash",
            "key",
            "12",
            "value",
            "32",
            "entries",
            &entries,
            "name",
            HALF_OPEN,
        ]))
        .expect("bpftool map create");
        assert_eq!(MapInfo::from_pin(&pin).expect("pinned").key_size(), 12);
    });
    let info = MapInfo::from_pin(l.layout.map(HALF_OPEN)).expect("HALF_OPEN");
    assert_eq!(info.key_size(), 16, "(client, backend, client ISN)");
    handshake(&l, Ingress::Tc, 8022);
    assert_eq!(established(&l).len(), 1);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn data_moves_the_tracked_sequence_numbers_and_replies_take_the_frontend() {
    privilege::require();
    let l = load(&[JOB]);
    handshake(&l, Ingress::Tc, 8022);
    test_run_tc(
        &l,
        PROG_INGRESS_TC,
        &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 100),
    );
    let (_, out) = test_run_tc(
        &l,
        PROG_EGRESS_TC,
        &reply(TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 101, 50),
    );
    assert_eq!(source_of(&out), frontend(8022));
    let c = established(&l)[0];
    assert_eq!(
        (c.client_next, c.server_next),
        (CLIENT_ISN + 101, SERVER_ISN + 51)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_a_rst_exactly_in_sequence_ends_a_connection_from_either_side() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        handshake(&l, ingress, 8022);
        let next_client = CLIENT_ISN + 1;
        let next_server = SERVER_ISN + 1;
        // Out of sequence, in the window and far out of it: ignored.
        for off in [1u32, 5_000, 1 << 31] {
            let before = counters(&l);
            ingress.run(
                &l,
                &request(8022, TCP_RST, next_client.wrapping_add(off), 0, 0),
            );
            assert_eq!(established(&l).len(), 1, "{ingress:?} client RST +{off}");
            assert_eq!(delta(&before, &counters(&l))[1..], [("reset_ignored", 1)]);
            let (_, out) =
                test_run_tc(&l, PROG_EGRESS_TC, &reply(TCP_RST, next_server + off, 0, 0));
            assert_eq!(source_of(&out), frontend(8022), "still rewritten");
            assert_eq!(established(&l).len(), 1, "{ingress:?} server RST +{off}");
        }
        // The server's exact RST ends it (and still leaves as the frontend).
        let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &reply(TCP_RST, next_server, 0, 0));
        assert_eq!(source_of(&out), frontend(8022));
        assert!(established(&l).is_empty(), "{ingress:?}");
        // The client's exact RST, on a new connection.
        handshake(&l, ingress, 8022);
        let before = counters(&l);
        ingress.run(
            &l,
            &request(8022, TCP_RST | TCP_ACK, next_client, next_server, 0),
        );
        assert!(established(&l).is_empty(), "{ingress:?}");
        assert!(delta(&before, &counters(&l)).contains(&("conn_reset", 1)));
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_client_rst_crossing_the_servers_ack_of_its_fin_ends_the_connection_with_that_ack() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        handshake(&l, ingress, 8022);
        let (next_client, next_server) = (CLIENT_ISN + 1, SERVER_ISN + 1);
        // The client hangs up (FIN) while the server's data is on its way;
        // that data reaches a closed socket, which answers with a RST one
        // past the FIN, before the server's ACK of the FIN came back.
        ingress.run(
            &l,
            &request(8022, TCP_FIN | TCP_ACK, next_client, next_server, 0),
        );
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_ACK, next_server, next_client, 100),
        );
        ingress.run(&l, &request(8022, TCP_RST, next_client + 1, 0, 0));
        assert_eq!(established(&l).len(), 1, "{ingress:?}: held, not ended");
        let (_, out) = test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_ACK, next_server + 100, next_client + 1, 0),
        );
        assert_eq!(
            source_of(&out),
            frontend(8022),
            "the ACK still leaves rewritten"
        );
        assert!(
            established(&l).is_empty(),
            "{ingress:?}: the server's ACK shows the RST in sequence"
        );
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn fins_both_ways_close_the_connection_and_free_its_4_tuple() {
    privilege::require();
    let l = load(&[JOB, SECOND]);
    handshake(&l, Ingress::Tc, 8022);
    // A FIN out of sequence is pending at most: it closes nothing.
    test_run_tc(
        &l,
        PROG_INGRESS_TC,
        &request(8022, TCP_FIN | TCP_ACK, CLIENT_ISN + 900, SERVER_ISN + 1, 0),
    );
    assert_eq!(established(&l)[0].flags & !CONN_FIN_PENDING, 0);
    // The client's FIN is pending until the server acknowledges it.
    test_run_tc(
        &l,
        PROG_INGRESS_TC,
        &request(8022, TCP_FIN | TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    );
    let c = established(&l)[0];
    assert_eq!(
        (c.flags, c.client_fin_end),
        (CONN_FIN_PENDING, CLIENT_ISN + 2)
    );
    test_run_tc(
        &l,
        PROG_EGRESS_TC,
        &reply(TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 2, 0),
    );
    assert_eq!(established(&l)[0].flags, CONN_FIN_CLIENT);
    test_run_tc(
        &l,
        PROG_EGRESS_TC,
        &reply(TCP_FIN | TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 2, 0),
    );
    assert_eq!(established(&l)[0].flags, CONN_FIN_CLIENT | CONN_FIN_SERVER);
    // The client reuses its port through the other frontend: the closed
    // connection yields.
    handshake(&l, Ingress::Tc, 9022);
    let conns = established(&l);
    assert_eq!(conns.len(), 1);
    assert_eq!((conns[0].frontend, conns[0].flags), (frontend(9022), 0));
    assert_eq!(counters(&l)["conn_replaced"], 1);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_connection_the_server_closed_and_the_client_never_answered_goes_after_two_quiet_minutes() {
    use ssh_fwd::datapath::conntrack::{Timeouts, clock_ns};

    privilege::require();
    let l = load(&[JOB]);
    handshake(&l, Ingress::Tc, 8022);
    let (next_client, next_server) = (CLIENT_ISN + 1, SERVER_ISN + 1);
    // sshd gives up on a client that never logs in: its FIN. The client
    // acknowledges it but never sends its own.
    test_run_tc(
        &l,
        PROG_EGRESS_TC,
        &reply(TCP_FIN | TCP_ACK, next_server, next_client, 0),
    );
    test_run_tc(
        &l,
        PROG_INGRESS_TC,
        &request(8022, TCP_ACK, next_client, next_server + 1, 0),
    );
    assert_eq!(established(&l)[0].flags, CONN_FIN_SERVER);
    let mut tables = ConnTables::open_pinned(&l.layout).expect("tables");
    let timeouts = Timeouts::with_idle(std::time::Duration::from_secs(24 * 3_600));
    let minute = 60_000_000_000;
    let swept = tables.sweep(clock_ns() + minute, &timeouts);
    assert_eq!((swept.expired, swept.conns), (0, 1), "a minute: it stays");
    let swept = tables.sweep(clock_ns() + 2 * minute + 1_000_000_000, &timeouts);
    assert_eq!((swept.expired, swept.conns), (1, 0), "two minutes: it goes");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_spoofed_fin_never_makes_a_live_connection_closing() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, SECOND]);
        handshake(&l, ingress, 8022);
        let (next_client, next_server) = (CLIENT_ISN + 1, SERVER_ISN + 1);
        let server_ack = || {
            test_run_tc(
                &l,
                PROG_EGRESS_TC,
                &reply(TCP_ACK, next_server, next_client + 1_000, 0),
            );
        };
        // The server has 1000 bytes of the client's. Spoofed FINs ahead of
        // them and behind them (as a random number is, half the time), each
        // followed by the server's next ACK.
        server_ack();
        for seq in [next_client + 5_000, next_client + 10] {
            ingress.run(&l, &request(8022, TCP_FIN | TCP_ACK, seq, next_server, 0));
            server_ack();
        }
        // The session ends from the server's side: its FIN.
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_FIN | TCP_ACK, next_server, next_client + 1_000, 0),
        );
        let c = established(&l)[0];
        assert_eq!(c.flags & CONN_FIN_CLIENT, 0, "{ingress:?}: {c:?}");
        // The client has not closed: its 4-tuple is not free for a
        // handshake through the other frontend.
        let (verdict, _) = ingress.run(&l, &request(9022, TCP_SYN, 77, 0, 0));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        assert_eq!(established(&l)[0].frontend, frontend(8022));
        // The client's real FIN, acknowledged exactly: now it is closing.
        ingress.run(
            &l,
            &request(
                8022,
                TCP_FIN | TCP_ACK,
                next_client + 1_000,
                next_server + 1,
                0,
            ),
        );
        test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_ACK, next_server + 1, next_client + 1_001, 0),
        );
        let c = established(&l)[0];
        assert_eq!(
            c.flags,
            CONN_FIN_CLIENT | CONN_FIN_SERVER,
            "{ingress:?}: {c:?}"
        );
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_servers_answer_to_a_syn_on_a_live_connection_ends_its_reopening() {
    privilege::require();
    let l = load(&[JOB, SECOND]);
    handshake(&l, Ingress::Tc, 9022);
    let slot = established(&l)[0].slot;
    assert_ne!(slot, 0);
    // A SYN through the same frontend (spoofed): the entry may be reopened.
    Ingress::Tc.run(&l, &request(9022, TCP_SYN, 555, 0, 0));
    assert_eq!(established(&l)[0].flags, CONN_REOPENING);
    // The pod answers from the old connection (a challenge ACK): the SYN
    // will never complete, and the flag goes. The flags are updated in
    // place, atomically, and nothing else with them.
    test_run_tc(
        &l,
        PROG_EGRESS_TC,
        &reply(TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 0),
    );
    let c = established(&l)[0];
    assert_eq!((c.flags, c.slot, c.frontend), (0, slot, frontend(9022)));
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_through_another_frontend_cannot_take_over_a_live_connection() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, SECOND]);
        handshake(&l, ingress, 8022);
        let before = counters(&l);
        for flags in [TCP_SYN, TCP_ACK, TCP_RST] {
            let (verdict, _) = ingress.run(&l, &request(9022, flags, CLIENT_ISN + 1, 0, 0));
            assert_eq!(verdict, ingress.dropped(), "{ingress:?} flags {flags:#x}");
        }
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conflict_dropped", 3)],
            "{ingress:?}"
        );
        let conns = established(&l);
        assert_eq!(conns[0].frontend, frontend(8022), "{ingress:?}");
        // Replies still leave as the frontend the client used.
        let (_, out) = test_run_tc(
            &l,
            PROG_EGRESS_TC,
            &reply(TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 10),
        );
        assert_eq!(source_of(&out), frontend(8022));
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn replies_of_connections_nobody_forwarded_are_never_rewritten() {
    privilege::require();
    let l = load(&[JOB]);
    // A backend answering a peer in the cluster: no state, untouched, on
    // the way out of the node and on the pod's interface alike.
    let frame = reply(TCP_ACK, 5, 6, 100);
    for program in [PROG_EGRESS_TC, PROG_REPLY_TC] {
        let before = counters(&l);
        let (verdict, out) = test_run_tc(&l, program, &frame);
        assert_eq!((verdict, &out), (TC_ACT_UNSPEC, &frame), "{program}");
        let d = delta(&before, &counters(&l));
        assert!(
            d == vec![("reply_untracked", 1)] || d == vec![("reply_left_to_stack", 1)],
            "{program}: {d:?}"
        );
    }
    assert_eq!(l.maps.mapping_counters(0).expect("slot").packets_out, 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_cross_node_plain_an_untracked_reply_leaving_an_external_interface_gets_the_primary() {
    privilege::require();
    let plain = object::Settings {
        cross_node_plain: true,
        ..object::Settings::default()
    };
    let l = load_with(&[JOB], plain);
    let frame = reply(TCP_ACK, 5, 6, 100);
    // The test run's skb is on lo: not external, untouched.
    assert_eq!(test_run_tc(&l, PROG_EGRESS_TC, &frame).1, frame);
    super::redirect::set_iface_index_flags(&l, 1, ssh_fwd_common::maps::IFACE_EXTERNAL);
    let before = counters(&l);
    let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &frame);
    assert_eq!(source_of(&out), frontend(8022));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("reverse_fallback", 1), ("reverse_nat", 1)]
    );
}

/// The backend as [`ssh_fwd::datapath::conntrack::ConnTables::seed_legacy`]
/// takes it.
fn backend() -> Endpoint {
    Endpoint::new(BACKEND, 22)
}

fn client() -> Endpoint {
    Endpoint::new(CLIENT, 40_000)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn after_an_upgrade_the_servers_ack_of_an_older_connection_makes_it_tracked_on_its_frontend() {
    privilege::require();
    let l = load(&[JOB, SECOND]);
    super::redirect::set_iface_index_flags(&l, 1, ssh_fwd_common::maps::IFACE_EXTERNAL);
    let mut tables = ConnTables::open_pinned(&l.layout).expect("tables");
    // The older data path recorded this connection through the second
    // frontend (its backend is behind two).
    let key = ssh_fwd_common::maps::ConnKey::new(client(), backend());
    let recorded = ssh_fwd_common::maps::NatTarget {
        endpoint: frontend(9022),
        slot: 1,
        flags: 0,
    };
    let now = ssh_fwd::datapath::conntrack::clock_ns();
    tables
        .seed_legacy(&[backend()], &[(key, recorded)], now + 3_600_000_000_000)
        .expect("seed");
    // A RST is restored but tracks nothing.
    let before = counters(&l);
    let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &reply(TCP_RST, 9_000, 0, 0));
    assert_eq!(source_of(&out), frontend(9022));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("legacy_reply", 1), ("reverse_nat", 1)]
    );
    assert!(established(&l).is_empty());
    // The server's ACK with data: adopted, with the state it shows.
    let before = counters(&l);
    let (_, out) = test_run_tc(&l, PROG_EGRESS_TC, &reply(TCP_ACK, 9_000, 3_000, 50));
    assert_eq!(source_of(&out), frontend(9022));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("conn_adopted", 1), ("reverse_nat", 1)]
    );
    let conns = established(&l);
    assert_eq!(conns.len(), 1, "{conns:?}");
    assert_eq!(
        (
            conns[0].frontend,
            conns[0].client_next,
            conns[0].server_next
        ),
        (frontend(9022), 3_000, 9_050)
    );
    // From here it is a tracked connection: the client's data through the
    // second frontend flows, a spoofed RST is ignored, and one in sequence
    // ends it.
    let (verdict, _) = Ingress::Tc.run(&l, &request(9022, TCP_ACK, 3_000, 9_050, 10));
    assert_ne!(verdict, Ingress::Tc.dropped());
    let before = counters(&l);
    Ingress::Tc.run(&l, &request(9022, TCP_RST, 1_234, 0, 0));
    assert!(delta(&before, &counters(&l)).contains(&("reset_ignored", 1)));
    assert_eq!(established(&l).len(), 1, "a spoofed RST leaves it");
    Ingress::Tc.run(&l, &request(9022, TCP_RST, 3_000, 0, 0));
    assert!(established(&l).is_empty(), "a RST in sequence ends it");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn older_connections_are_restored_only_while_their_backend_is_marked_and_only_leaving_the_node() {
    privilege::require();
    let l = load(&[JOB]);
    let mut tables = ConnTables::open_pinned(&l.layout).expect("tables");
    let now = ssh_fwd::datapath::conntrack::clock_ns();
    tables
        .seed_legacy(&[backend()], &[], now + 3_600_000_000_000)
        .expect("seed");
    let frame = reply(TCP_ACK, 9_000, 3_000, 50);
    // On lo (not external): untouched, no state.
    assert_eq!(test_run_tc(&l, PROG_EGRESS_TC, &frame).1, frame);
    assert!(established(&l).is_empty());
    super::redirect::set_iface_index_flags(&l, 1, ssh_fwd_common::maps::IFACE_EXTERNAL);
    // A SYN-ACK is a handshake of this data path's: not restored blindly.
    let syn_ack = reply(TCP_SYN | TCP_ACK, 9_000, 3_000, 0);
    assert_eq!(test_run_tc(&l, PROG_EGRESS_TC, &syn_ack).1, syn_ack);
    // Once the grace period ended (and the sweep ran), nothing is restored.
    tables
        .seed_legacy(&[backend()], &[], now.saturating_sub(1))
        .expect("seed");
    assert_eq!(test_run_tc(&l, PROG_EGRESS_TC, &frame).1, frame);
    let swept = tables.sweep(
        ssh_fwd::datapath::conntrack::clock_ns(),
        &ssh_fwd::datapath::conntrack::Timeouts::with_idle(std::time::Duration::from_secs(60)),
    );
    assert_eq!(swept.legacy_backends, 0);
    assert!(established(&l).is_empty());
}
