//! Connection tracking on crafted packets: every transition of
//! `ssh_fwd_common::conntrack` through the real programs (the SYN, the
//! SYN-ACK restored from it, the client's ACK that claims, the server's
//! segment that confirms, RSTs in and out of sequence, FINs both ways, a
//! takeover attempt through another frontend), the maps read back after
//! each step.

use std::net::Ipv4Addr;

use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    object::{self, PROG_INGRESS_TC, PROG_REPLY_TC},
};
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN},
    fixtures::Frame,
    maps::{
        CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_FIN_SERVER, CONN_REOPENING, Claim, Conn, Endpoint,
        HalfOpen,
    },
    packet::{self, Side},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded, TC_ACT_UNSPEC, counters, delta, from_pod, load, load_with, own, test_run_tc,
    test_run_xdp,
};

mod checks;
mod upgrade;

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 5);
pub const CLIENT_ISN: u32 = 1_000;
pub const SERVER_ISN: u32 = 7_000_000;
/// sshd's banner: the server's first segment after the handshake.
pub const BANNER: usize = 21;
const TC_ACT_SHOT: u32 = 2;
const XDP_DROP: u32 = 1;
const PSH: u8 = 0x08;
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

/// Where a packet's destination points after the request path ran.
pub fn destination_of(frame: &[u8]) -> Endpoint {
    let tcp = packet::classify(frame).expect("classify");
    packet::endpoint(frame, tcp, Side::Destination)
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

    pub fn dropped(self) -> u32 {
        match self {
            Ingress::Tc => TC_ACT_SHOT,
            Ingress::Xdp => XDP_DROP,
        }
    }
}

pub fn each_ingress(test: impl Fn(Ingress)) {
    for ingress in [Ingress::Tc, Ingress::Xdp] {
        test(ingress);
    }
}

pub fn entries(l: &Loaded) -> Vec<Entry> {
    ConnTables::open_pinned(&l.layout)
        .expect("tables")
        .entries()
}

/// The SYN, the server's SYN-ACK (rewritten on the way out), the client's
/// ACK and the server's banner: a connection through the frontend on
/// `port`, tracked from the banner on. The backend is a pod of this node.
pub fn handshake(l: &Loaded, ingress: Ingress, port: u16) {
    own(l, BACKEND);
    ingress.run(l, &request(port, TCP_SYN, CLIENT_ISN, 0, 0));
    let (_, out) = from_pod(l, &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0));
    assert_eq!(
        source_of(&out),
        frontend(port),
        "the SYN-ACK leaves as the frontend"
    );
    ingress.run(
        l,
        &request(port, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    );
    let banner = reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER);
    let (_, out) = from_pod(l, &banner);
    assert_eq!(source_of(&out), frontend(port), "the banner too");
}

/// The server's next sequence number once the banner went.
pub const AFTER_BANNER: u32 = SERVER_ISN + 1 + BANNER as u32;

fn established(l: &Loaded) -> Vec<Conn> {
    entries(l)
        .into_iter()
        .filter_map(|e| match e {
            Entry::Established(_, c) => Some(c),
            _ => None,
        })
        .collect()
}

fn half_open(l: &Loaded) -> Vec<HalfOpen> {
    entries(l)
        .into_iter()
        .filter_map(|e| match e {
            Entry::HalfOpen(_, h) => Some(h),
            _ => None,
        })
        .collect()
}

fn claims(l: &Loaded) -> Vec<(u32, Claim)> {
    entries(l)
        .into_iter()
        .filter_map(|e| match e {
            Entry::Claimed(k, c) => Some((k.ack, c)),
            _ => None,
        })
        .collect()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn only_the_servers_segment_at_the_claimed_sequence_number_creates_a_connection() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        own(&l, BACKEND);
        // SYN: a half-open entry, nothing else.
        let before = counters(&l);
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("dnat", 1), ("half_opened", 1)],
            "{ingress:?}"
        );
        let half = half_open(&l);
        assert_eq!(
            (half.len(), half[0].frontend, half[0].client_isn),
            (1, frontend(8022), CLIENT_ISN)
        );
        // The SYN-ACK: restored, nothing stored.
        let (verdict, out) = from_pod(&l, &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0));
        assert_eq!(verdict, TC_ACT_UNSPEC);
        assert_eq!(source_of(&out), frontend(8022));
        assert!(established(&l).is_empty() && claims(&l).is_empty());
        // The client's ACK: a claim, no connection.
        let before = counters(&l);
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conn_claimed", 1), ("dnat", 1)],
            "{ingress:?}"
        );
        let claimed = claims(&l);
        assert_eq!(claimed.len(), 1);
        assert_eq!(
            (claimed[0].0, claimed[0].1.frontend),
            (SERVER_ISN + 1, frontend(8022))
        );
        assert!(established(&l).is_empty(), "{ingress:?}");
        // A server segment anywhere else confirms nothing (and is not ours
        // to restore).
        let (_, out) = from_pod(&l, &reply(TCP_ACK, SERVER_ISN + 2, CLIENT_ISN + 1, 5));
        assert_eq!(source_of(&out), Endpoint::new(BACKEND, 22));
        assert!(established(&l).is_empty(), "{ingress:?}");
        // The banner, right where the client acknowledged: confirmed.
        let before = counters(&l);
        let (_, out) = from_pod(
            &l,
            &reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER),
        );
        assert_eq!(source_of(&out), frontend(8022));
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conn_established", 1), ("reverse_nat", 1)],
            "{ingress:?}"
        );
        let conns = established(&l);
        assert_eq!(conns.len(), 1);
        assert_eq!(conns[0].frontend, frontend(8022));
        assert_eq!(
            (conns[0].client_next, conns[0].server_next),
            (CLIENT_ISN + 1, AFTER_BANNER)
        );
        assert!(claims(&l).is_empty(), "the claim went");
        assert_eq!(
            l.maps.mapping_conn_counters(0).expect("slot 0").opened,
            1,
            "counted for its mapping"
        );
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_node_that_only_forwards_records_no_claim() {
    privilege::require();
    each_ingress(|ingress| {
        // The backend lives on another node (no pod interface of this
        // node has its address): the client's segments claim nothing here,
        // where no reply will ever pass.
        let l = load(&[JOB]);
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        let before = counters(&l);
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        assert_eq!(delta(&before, &counters(&l)), vec![("dnat", 1)]);
        assert!(claims(&l).is_empty(), "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_confirmation_a_full_table_refuses_is_held_back_and_completes_once_room_frees() {
    use aya::maps::{HashMap, Map, MapData};
    use ssh_fwd_common::maps::{CONNS, ConnKey};

    privilege::require();
    let small = object::Settings {
        conn_table_size: 4,
        ..object::Settings::default()
    };
    each_ingress(|ingress| {
        let l = load_with(&[JOB], small);
        own(&l, BACKEND);
        // Other clients' connections fill the table.
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
        from_pod(&l, &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0));
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        // The banner finds no room: dropped, so the client sees nothing the
        // table cannot restore later; the claim stays for the retransmission.
        let banner = reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER);
        let before = counters(&l);
        let (verdict, _) = from_pod(&l, &banner);
        assert_eq!(verdict, TC_ACT_SHOT, "{ingress:?}");
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("conn_table_full", 1)],
            "{ingress:?}"
        );
        assert_eq!(claims(&l).len(), 1, "{ingress:?}");
        // Room frees (the sweep removed a connection); the retransmitted
        // banner is confirmed and leaves as the frontend.
        conns.remove(&others[0]).expect("room");
        let (verdict, out) = from_pod(&l, &banner);
        assert_eq!(verdict, TC_ACT_UNSPEC, "{ingress:?}");
        assert_eq!(source_of(&out), frontend(8022));
        let mine: Vec<_> = established(&l)
            .into_iter()
            .filter(|c| c.frontend == frontend(8022) && c.server_next == AFTER_BANNER)
            .collect();
        assert_eq!(mine.len(), 1, "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_spoofed_syn_before_the_syn_ack_does_not_displace_the_handshake() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, SECOND]);
        own(&l, BACKEND);
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        // An off-path sender's SYNs for the client's own 4-tuple, through
        // the same frontend and the other one.
        ingress.run(&l, &request(8022, TCP_SYN, 0x5eed, 0, 0));
        ingress.run(&l, &request(9022, TCP_SYN, 0x5eee, 0, 0));
        let (_, out) = from_pod(&l, &reply(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0));
        assert_eq!(source_of(&out), frontend(8022), "{ingress:?}");
        ingress.run(
            &l,
            &request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        );
        from_pod(
            &l,
            &reply(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, BANNER),
        );
        let conns = established(&l);
        assert_eq!(conns.len(), 1, "{ingress:?}: the login completed");
        assert_eq!(conns[0].frontend, frontend(8022), "{ingress:?}");
        // Three SYNs, three entries: one per ISN.
        let mut isns: Vec<u32> = half_open(&l).iter().map(|h| h.client_isn).collect();
        isns.sort_unstable();
        assert_eq!(isns, [CLIENT_ISN, 0x5eed, 0x5eee], "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_servers_ack_to_a_second_syn_leaves_with_the_frontend_of_the_first() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB, SECOND]);
        own(&l, BACKEND);
        // An off-path sender's SYN through 9022 reaches the server first;
        // the client's own SYN through 8022 then finds the server's
        // request socket, which answers with a bare ACK of the first ISN.
        ingress.run(&l, &request(9022, TCP_SYN, 0x5eed, 0, 0));
        ingress.run(&l, &request(8022, TCP_SYN, CLIENT_ISN, 0, 0));
        let tables = entries(&l);
        let before = counters(&l);
        let (_, out) = from_pod(&l, &reply(TCP_ACK, SERVER_ISN + 1, 0x5eed + 1, 0));
        assert_eq!(
            source_of(&out),
            frontend(9022),
            "{ingress:?}: the pod's address never leaves"
        );
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("handshake_answered", 1), ("reverse_nat", 1)],
            "{ingress:?}"
        );
        assert_eq!(entries(&l), tables, "{ingress:?}: nothing stored");
        // A bare ACK that answers no handshake stays untouched.
        let stray = reply(TCP_ACK, SERVER_ISN + 1, 0x1234, 0);
        assert_eq!(from_pod(&l, &stray).1, stray, "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_retransmitted_syn_keeps_its_entry() {
    privilege::require();
    each_ingress(|ingress| {
        let l = load(&[JOB]);
        let syn = request(8022, TCP_SYN, CLIENT_ISN, 0, 0);
        ingress.run(&l, &syn);
        let before = counters(&l);
        ingress.run(&l, &syn);
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("dnat", 1)],
            "{ingress:?}: no new half-open entry"
        );
        assert_eq!(half_open(&l).len(), 1);
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_half_open_table_pinned_with_another_definition_is_replaced_at_load() {
    use aya::maps::MapInfo;
    use ssh_fwd_common::maps::{HALF_OPEN, HALF_OPEN_CAPACITY};

    privilege::require();
    // An older agent of this layout left its half-open table: the same
    // key and value, but an LRU whose list every CPU shares.
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
            "16",
            "value",
            "32",
            "entries",
            &entries,
            "name",
            HALF_OPEN,
        ]))
        .expect("bpftool map create");
        assert_eq!(MapInfo::from_pin(&pin).expect("pinned").map_flags(), 0);
    });
    let info = MapInfo::from_pin(l.layout.map(HALF_OPEN)).expect("HALF_OPEN");
    assert_eq!(info.map_flags(), 2, "BPF_F_NO_COMMON_LRU");
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
        &request(8022, TCP_ACK, CLIENT_ISN + 1, AFTER_BANNER, 100),
    );
    let (_, out) = from_pod(&l, &reply(TCP_ACK, AFTER_BANNER, CLIENT_ISN + 101, 50));
    assert_eq!(source_of(&out), frontend(8022));
    let c = established(&l)[0];
    assert_eq!(
        (c.client_next, c.server_next),
        (CLIENT_ISN + 101, AFTER_BANNER + 50)
    );
    // A segment far outside the window of what the server sent: restored
    // (the pod sent it), but it moves nothing.
    let (_, out) = from_pod(
        &l,
        &reply(
            TCP_FIN | TCP_ACK,
            AFTER_BANNER + (1 << 31),
            CLIENT_ISN + 999,
            0,
        ),
    );
    assert_eq!(source_of(&out), frontend(8022));
    let c = established(&l)[0];
    assert_eq!(
        (c.client_next, c.server_next, c.flags),
        (CLIENT_ISN + 101, AFTER_BANNER + 50, 0)
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
        let next_server = AFTER_BANNER;
        // Out of sequence, in the window and far out of it: ignored.
        for off in [1u32, 5_000, 1 << 31] {
            let before = counters(&l);
            ingress.run(
                &l,
                &request(8022, TCP_RST, next_client.wrapping_add(off), 0, 0),
            );
            assert_eq!(established(&l).len(), 1, "{ingress:?} client RST +{off}");
            assert_eq!(delta(&before, &counters(&l))[1..], [("reset_ignored", 1)]);
            let (_, out) = from_pod(&l, &reply(TCP_RST, next_server.wrapping_add(off), 0, 0));
            assert_eq!(source_of(&out), frontend(8022), "still rewritten");
            assert_eq!(established(&l).len(), 1, "{ingress:?} server RST +{off}");
        }
        // The server's exact RST ends it (and still leaves as the frontend).
        let (_, out) = from_pod(&l, &reply(TCP_RST, next_server, 0, 0));
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
        let (next_client, next_server) = (CLIENT_ISN + 1, AFTER_BANNER);
        // The client hangs up (FIN) while the server's data is on its way;
        // that data reaches a closed socket, which answers with a RST one
        // past the FIN, before the server's ACK of the FIN came back.
        ingress.run(
            &l,
            &request(8022, TCP_FIN | TCP_ACK, next_client, next_server, 0),
        );
        from_pod(&l, &reply(TCP_ACK, next_server, next_client, 100));
        ingress.run(&l, &request(8022, TCP_RST, next_client + 1, 0, 0));
        assert_eq!(established(&l).len(), 1, "{ingress:?}: held, not ended");
        let (_, out) = from_pod(&l, &reply(TCP_ACK, next_server + 100, next_client + 1, 0));
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
        &request(8022, TCP_FIN | TCP_ACK, CLIENT_ISN + 900, AFTER_BANNER, 0),
    );
    assert_eq!(established(&l)[0].flags & !CONN_FIN_PENDING, 0);
    // The client's FIN is pending until the server acknowledges it.
    test_run_tc(
        &l,
        PROG_INGRESS_TC,
        &request(8022, TCP_FIN | TCP_ACK, CLIENT_ISN + 1, AFTER_BANNER, 0),
    );
    let c = established(&l)[0];
    assert_eq!(
        (c.flags, c.client_fin_end),
        (CONN_FIN_PENDING, CLIENT_ISN + 2)
    );
    from_pod(&l, &reply(TCP_ACK, AFTER_BANNER, CLIENT_ISN + 2, 0));
    assert_eq!(established(&l)[0].flags, CONN_FIN_CLIENT);
    from_pod(
        &l,
        &reply(TCP_FIN | TCP_ACK, AFTER_BANNER, CLIENT_ISN + 2, 0),
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
    let (next_client, next_server) = (CLIENT_ISN + 1, AFTER_BANNER);
    // sshd gives up on a client that never logs in: its FIN. The client
    // acknowledges it but never sends its own.
    from_pod(&l, &reply(TCP_FIN | TCP_ACK, next_server, next_client, 0));
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
        let (next_client, next_server) = (CLIENT_ISN + 1, AFTER_BANNER);
        let server_ack = || {
            from_pod(&l, &reply(TCP_ACK, next_server, next_client + 1_000, 0));
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
        from_pod(
            &l,
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
        from_pod(&l, &reply(TCP_ACK, next_server + 1, next_client + 1_001, 0));
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
    from_pod(&l, &reply(TCP_ACK, AFTER_BANNER, CLIENT_ISN + 1, 0));
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
        let (_, out) = from_pod(&l, &reply(TCP_ACK, AFTER_BANNER, CLIENT_ISN + 1, 10));
        assert_eq!(source_of(&out), frontend(8022));
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn replies_of_connections_nobody_forwarded_are_never_rewritten() {
    privilege::require();
    let l = load(&[JOB]);
    own(&l, BACKEND);
    // A backend answering a peer in the cluster: no state, untouched, on
    // the way out of the node and on the pod's interface alike.
    let frame = reply(TCP_ACK, 5, 6, 100);
    for program in [super::PROG_EGRESS_TC, PROG_REPLY_TC] {
        let before = counters(&l);
        let (verdict, out) =
            super::test_run_tc_on(&l, program, &frame, super::POD_IFINDEX, super::POD_IFINDEX);
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
    assert_eq!(test_run_tc(&l, super::PROG_EGRESS_TC, &frame).1, frame);
    super::set_iface_index_flags(&l, 1, ssh_fwd_common::maps::IFACE_EXTERNAL);
    let before = counters(&l);
    let (_, out) = test_run_tc(&l, super::PROG_EGRESS_TC, &frame);
    assert_eq!(source_of(&out), frontend(8022));
    // No pod interface of this node has the backend's address: counted.
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![
            ("reply_no_owner", 1),
            ("reverse_fallback", 1),
            ("reverse_nat", 1)
        ]
    );
}

/// The backend as the tables key it.
pub fn backend() -> Endpoint {
    Endpoint::new(BACKEND, 22)
}

pub fn client() -> Endpoint {
    Endpoint::new(CLIENT, 40_000)
}
