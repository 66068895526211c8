use core::net::Ipv4Addr;

use super::*;
use crate::maps::CONN_FIN_PENDING;

pub(super) const F1: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
const F2: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 9022);
const HOUR: u64 = 3_600_000_000_000;
const CLIENT_ISN: u32 = 1_000;
const SERVER_ISN: u32 = 5_000_000;

pub(super) fn seg(flags: u8, seq: u32, ack: u32, payload: u32) -> Segment {
    Segment {
        flags,
        seq,
        ack,
        payload,
    }
}

fn syn() -> Segment {
    seg(TCP_SYN, CLIENT_ISN, 0, 0)
}

fn syn_ack() -> Segment {
    seg(TCP_SYN | TCP_ACK, SERVER_ISN, CLIENT_ISN + 1, 0)
}

fn final_ack() -> Segment {
    seg(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0)
}

/// Runs the handshake through `frontend` and returns the established entry.
fn handshake(frontend: Endpoint) -> Conn {
    assert_eq!(
        on_request(&syn(), frontend, 3, None, None, 10),
        OnRequest::OpenHalf { reopening: false }
    );
    let half = HalfOpen {
        frontend,
        slot: 3,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 10,
    };
    let OnReply::Accept { learned, .. } = on_reply(&syn_ack(), None, Some(&half), 20) else {
        panic!("the SYN-ACK is learned")
    };
    let OnRequest::Promote(conn) = on_request(&final_ack(), frontend, 3, None, Some(&learned), 30)
    else {
        panic!("the ACK completes the handshake")
    };
    conn
}

#[test]
fn a_completed_handshake_creates_the_connection_with_both_next_sequence_numbers() {
    let conn = handshake(F1);
    assert_eq!(conn.frontend, F1);
    assert_eq!(conn.client_next, CLIENT_ISN + 1);
    assert_eq!(conn.server_next, SERVER_ISN + 1);
    assert_eq!((conn.created_ns, conn.last_seen_ns), (30, 30));
}

#[test]
fn the_syn_ack_is_restored_to_the_frontend_of_the_syn() {
    let half = HalfOpen {
        frontend: F2,
        slot: 7,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 0,
    };
    let OnReply::Accept {
        frontend,
        slot,
        learned,
    } = on_reply(&syn_ack(), None, Some(&half), 5)
    else {
        panic!("accepted")
    };
    assert_eq!((frontend, slot), (F2, 7));
    assert_eq!(learned.server_isn, SERVER_ISN);
    assert_ne!(learned.flags & HALF_OPEN_ISN_KNOWN, 0);
}

#[test]
fn only_the_ack_of_the_server_isn_promotes() {
    let learned = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: HALF_OPEN_ISN_KNOWN,
        client_isn: CLIENT_ISN,
        server_isn: SERVER_ISN,
        last_seen_ns: 0,
    };
    let wrong = [
        seg(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 2, 0),
        seg(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN, 0),
        seg(TCP_ACK, CLIENT_ISN + 9, SERVER_ISN + 1, 0),
        seg(TCP_ACK | TCP_RST, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        seg(TCP_SYN | TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
        seg(0, CLIENT_ISN + 1, SERVER_ISN + 1, 0),
    ];
    for s in wrong {
        assert_eq!(
            on_request(&s, F1, 3, None, Some(&learned), 0),
            OnRequest::Forward,
            "{s:?}"
        );
    }
    // Through another frontend, or before the SYN-ACK was seen: no.
    assert_eq!(
        on_request(&final_ack(), F2, 3, None, Some(&learned), 0),
        OnRequest::Forward
    );
    let unknown = HalfOpen {
        flags: 0,
        ..learned
    };
    assert_eq!(
        on_request(&final_ack(), F1, 3, None, Some(&unknown), 0),
        OnRequest::Forward
    );
    assert!(matches!(
        on_request(&final_ack(), F1, 3, None, Some(&learned), 0),
        OnRequest::Promote(_)
    ));
}

#[test]
fn a_syn_through_another_frontend_never_touches_a_live_connection() {
    let conn = handshake(F1);
    for flags in [TCP_SYN, TCP_ACK, TCP_ACK | TCP_RST, TCP_ACK | TCP_FIN] {
        let s = seg(flags, conn.client_next, conn.server_next, 0);
        assert_eq!(
            on_request(&s, F2, 4, Some(&conn), None, 40),
            OnRequest::Conflict,
            "{s:?}"
        );
    }
}

#[test]
fn a_spoofed_handshake_without_the_server_isn_cannot_replace_a_live_connection() {
    let conn = handshake(F1);
    // The attacker's SYN through the same frontend reopens ...
    assert_eq!(
        on_request(&syn(), F1, 3, Some(&conn), None, 40),
        OnRequest::OpenHalf { reopening: true }
    );
    let reopening = Conn {
        flags: conn.flags | CONN_REOPENING,
        ..conn
    };
    // ... but its half-open entry never learns an ISN (the server's
    // challenge ACK is no SYN-ACK), so no ACK can complete it.
    let half = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: 0,
        client_isn: 77,
        server_isn: 0,
        last_seen_ns: 40,
    };
    let challenge = seg(TCP_ACK, conn.server_next, conn.client_next, 0);
    assert!(matches!(
        on_reply(&challenge, Some(&reopening), Some(&half), 41),
        OnReply::Established { frontend: F1, .. }
    ));
    for guess in [0u32, 1, SERVER_ISN, u32::MAX] {
        let ack = seg(TCP_ACK, 78, guess, 0);
        assert!(
            matches!(
                on_request(&ack, F1, 3, Some(&reopening), Some(&half), 42),
                OnRequest::Established(_)
            ),
            "guess {guess}"
        );
    }
}

#[test]
fn a_client_reusing_its_port_through_the_same_frontend_starts_fresh() {
    let old = Conn {
        flags: CONN_REOPENING,
        client_next: 123,
        server_next: 456,
        ..handshake(F1)
    };
    let half = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: HALF_OPEN_ISN_KNOWN,
        client_isn: CLIENT_ISN,
        server_isn: SERVER_ISN,
        last_seen_ns: 0,
    };
    let OnRequest::Promote(fresh) = on_request(&final_ack(), F1, 3, Some(&old), Some(&half), 50)
    else {
        panic!("replaced")
    };
    assert_eq!(fresh.flags, 0);
    assert_eq!(
        (fresh.client_next, fresh.server_next),
        (CLIENT_ISN + 1, SERVER_ISN + 1)
    );
}

#[test]
fn a_closed_connection_yields_its_4_tuple_to_a_handshake_through_another_frontend() {
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..handshake(F1)
    };
    assert_eq!(
        on_request(&syn(), F2, 4, Some(&closed), None, 60),
        OnRequest::OpenHalf { reopening: false }
    );
    let half = HalfOpen {
        frontend: F2,
        slot: 4,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 60,
    };
    let OnReply::Accept {
        frontend, learned, ..
    } = on_reply(&syn_ack(), Some(&closed), Some(&half), 61)
    else {
        panic!("the new SYN-ACK goes out through F2")
    };
    assert_eq!(frontend, F2);
    let OnRequest::Promote(conn) =
        on_request(&final_ack(), F2, 4, Some(&closed), Some(&learned), 62)
    else {
        panic!("promoted")
    };
    assert_eq!((conn.frontend, conn.slot), (F2, 4));
}

#[test]
fn only_the_server_moves_the_sequence_state_and_spoofed_client_segments_move_nothing() {
    let conn = handshake(F1);
    // Client data, and a spoofed segment far ahead: the clock at most.
    for s in [
        seg(TCP_ACK | 0x08, conn.client_next, conn.server_next, 1448),
        seg(TCP_ACK, conn.client_next.wrapping_add(1 << 31), 0, 10),
    ] {
        let update = match on_request(&s, F1, 3, Some(&conn), None, 2_000_000_000) {
            OnRequest::Established(u) => u,
            other => panic!("{other:?}"),
        };
        let c = update.unwrap_or(conn);
        assert_eq!(
            (c.client_next, c.server_next),
            (conn.client_next, conn.server_next)
        );
    }
    // The server acknowledges the data and sends some: both move.
    let reply = seg(TCP_ACK, conn.server_next, conn.client_next + 1448, 100);
    let OnReply::Established {
        update: Some(c), ..
    } = on_reply(&reply, Some(&conn), None, 41)
    else {
        panic!("updated")
    };
    assert_eq!(c.client_next, CLIENT_ISN + 1 + 1448);
    assert_eq!(c.server_next, SERVER_ISN + 1 + 100);
    // An old ACK moves nothing back.
    let stale = seg(TCP_ACK, c.server_next, conn.client_next, 0);
    assert_eq!(
        on_reply(&stale, Some(&c), None, 42),
        OnReply::Established {
            frontend: F1,
            slot: 3,
            update: None
        }
    );
}

#[test]
fn sequence_numbers_wrap() {
    assert!(after(5, u32::MAX - 5));
    assert!(!after(u32::MAX - 5, 5));
    let conn = Conn {
        client_next: u32::MAX - 10,
        ..handshake(F1)
    };
    let ack = seg(TCP_ACK, conn.server_next, 89, 0);
    let OnReply::Established {
        update: Some(c), ..
    } = on_reply(&ack, Some(&conn), None, 40)
    else {
        panic!("updated")
    };
    assert_eq!(c.client_next, 89);
}

#[test]
fn only_an_exactly_in_sequence_rst_ends_the_connection() {
    let conn = handshake(F1);
    let rst = |seq| seg(TCP_RST | TCP_ACK, seq, 0, 0);
    assert_eq!(
        on_request(&rst(conn.client_next), F1, 3, Some(&conn), None, 40),
        OnRequest::Reset
    );
    for off in [1u32, 100, 65_535, 1 << 31] {
        let decision = on_request(
            &rst(conn.client_next.wrapping_add(off)),
            F1,
            3,
            Some(&conn),
            None,
            40,
        );
        assert!(
            matches!(decision, OnRequest::IgnoredReset(_)),
            "client RST {off} ahead: {decision:?}"
        );
    }
    assert_eq!(
        on_reply(&rst(conn.server_next), Some(&conn), None, 40),
        OnReply::Reset {
            frontend: F1,
            slot: 3
        }
    );
    assert_eq!(
        on_reply(&rst(conn.server_next + 1), Some(&conn), None, 40),
        OnReply::IgnoredReset {
            frontend: F1,
            slot: 3
        }
    );
}

#[test]
fn the_client_has_closed_once_the_server_acknowledged_its_fin() {
    let conn = handshake(F1);
    // A spoofed FIN out of sequence: pending, never acknowledged.
    let spoofed = seg(
        TCP_FIN | TCP_ACK,
        conn.client_next + 5_000,
        conn.server_next,
        0,
    );
    let OnRequest::Established(Some(pending)) = on_request(&spoofed, F1, 3, Some(&conn), None, 40)
    else {
        panic!("noted")
    };
    let ack = seg(TCP_ACK, conn.server_next, conn.client_next, 0);
    let OnReply::Established { update, .. } = on_reply(&ack, Some(&pending), None, 41) else {
        panic!("established")
    };
    assert_eq!(
        update.map_or(0, |c| c.flags & CONN_FIN_CLIENT),
        0,
        "not acknowledged"
    );

    // The real FIN, with 10 bytes of data, acknowledged by the server.
    let fin = seg(TCP_FIN | TCP_ACK, conn.client_next, conn.server_next, 10);
    let OnRequest::Established(Some(c)) = on_request(&fin, F1, 3, Some(&conn), None, 40) else {
        panic!("noted")
    };
    assert_eq!(c.flags, CONN_FIN_PENDING, "pending until acknowledged");
    let server_fin = seg(TCP_FIN | TCP_ACK, c.server_next, conn.client_next + 11, 0);
    let OnReply::Established {
        update: Some(closed),
        ..
    } = on_reply(&server_fin, Some(&c), None, 41)
    else {
        panic!("updated")
    };
    assert_eq!(closed.flags, CONN_FIN_CLIENT | CONN_FIN_SERVER);
    assert!(closing(&closed));
    // The last ACK still goes through, rewritten.
    let last = seg(TCP_ACK, closed.client_next, closed.server_next, 0);
    assert!(matches!(
        on_request(&last, F1, 3, Some(&closed), None, 42),
        OnRequest::Established(_)
    ));
}

#[test]
fn replies_of_connections_nobody_tracked_are_left_alone() {
    // A backend answering an in-cluster peer: no entry, no rewrite.
    assert_eq!(
        on_reply(&seg(TCP_ACK, 1, 2, 100), None, None, 1),
        OnReply::Untracked
    );
    // A half-open entry does not capture replies that do not answer its SYN.
    let half = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 0,
    };
    assert_eq!(
        on_reply(&seg(TCP_SYN | TCP_ACK, 9, 12_345, 0), None, Some(&half), 1),
        OnReply::Untracked
    );
}

#[test]
fn a_refused_handshake_is_restored_and_forgotten() {
    let half = HalfOpen {
        frontend: F2,
        slot: 4,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 0,
    };
    assert_eq!(
        on_reply(
            &seg(TCP_RST | TCP_ACK, 0, CLIENT_ISN + 1, 0),
            None,
            Some(&half),
            1
        ),
        OnReply::Refuse {
            frontend: F2,
            slot: 4
        }
    );
}

#[test]
fn the_sweep_keeps_a_shell_idle_for_8_hours_and_ends_one_idle_past_the_timeout() {
    let conn = Conn {
        last_seen_ns: HOUR,
        ..handshake(F1)
    };
    let (idle, close) = (24 * HOUR, 10_000_000_000);
    assert_eq!(expiry(&conn, 9 * HOUR, idle, close), None);
    assert_eq!(expiry(&conn, 25 * HOUR, idle, close), Some(Expiry::Idle));
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..conn
    };
    assert_eq!(expiry(&closed, HOUR + 5_000_000_000, idle, close), None);
    assert_eq!(
        expiry(&closed, HOUR + 11_000_000_000, idle, close),
        Some(Expiry::Closed)
    );
    let half = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: 0,
        client_isn: 0,
        server_isn: 0,
        last_seen_ns: HOUR,
    };
    assert!(!half_open_expired(&half, HOUR + 1, 60_000_000_000));
    assert!(half_open_expired(&half, 2 * HOUR, 60_000_000_000));
}

#[test]
fn skipping_the_half_open_lookup_never_changes_a_decision() {
    let conn = handshake(F1);
    let conns = [
        None,
        Some(conn),
        Some(Conn {
            flags: CONN_REOPENING,
            ..conn
        }),
        Some(Conn {
            flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
            ..conn
        }),
    ];
    let halves = [
        HalfOpen {
            frontend: F1,
            slot: 3,
            flags: HALF_OPEN_ISN_KNOWN,
            client_isn: CLIENT_ISN,
            server_isn: SERVER_ISN,
            last_seen_ns: 0,
        },
        HalfOpen {
            frontend: F2,
            slot: 4,
            flags: 0,
            client_isn: CLIENT_ISN,
            server_isn: 0,
            last_seen_ns: 0,
        },
    ];
    for flags in 0..=0x3fu8 {
        for (seq, ack) in [
            (CLIENT_ISN, 0),
            (CLIENT_ISN + 1, SERVER_ISN + 1),
            (SERVER_ISN, CLIENT_ISN + 1),
            (conn.client_next, conn.server_next),
        ] {
            let s = seg(flags, seq, ack, 0);
            for c in &conns {
                for h in &halves {
                    for frontend in [F1, F2] {
                        if !request_reads_half_open(&s, c.as_ref()) {
                            assert_eq!(
                                on_request(&s, frontend, 3, c.as_ref(), Some(h), 9),
                                on_request(&s, frontend, 3, c.as_ref(), None, 9),
                                "request {s:?} {c:?} {h:?}"
                            );
                        }
                    }
                    if !reply_reads_half_open(&s, c.as_ref()) {
                        assert_eq!(
                            on_reply(&s, c.as_ref(), Some(h), 9),
                            on_reply(&s, c.as_ref(), None, 9),
                            "reply {s:?} {c:?} {h:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_server_ack_of_a_pre_upgrade_connection_adopts_it_with_the_sequence_state_it_shows() {
    let ack = seg(TCP_ACK | 0x08, 7_000, 3_000, 100);
    match on_legacy_reply(&ack, F2, 4, HOUR) {
        OnLegacyReply::Adopt(c) => {
            assert_eq!((c.frontend, c.slot), (F2, 4));
            assert_eq!((c.client_next, c.server_next), (3_000, 7_100));
            assert_eq!((c.flags, c.last_seen_ns, c.created_ns), (0, HOUR, HOUR));
        }
        other => panic!("{other:?}"),
    }
    // The adopted entry then checks RSTs as any other does.
    let OnLegacyReply::Adopt(c) = on_legacy_reply(&ack, F2, 4, HOUR) else {
        unreachable!()
    };
    let spoofed_rst = seg(TCP_RST, 2_000, 0, 0);
    let f = F2;
    assert_eq!(
        on_request(&spoofed_rst, f, 4, Some(&c), None, HOUR),
        OnRequest::IgnoredReset(None),
        "behind what the server acknowledged"
    );
    let rst = seg(TCP_RST, 3_000, 0, 0);
    assert_eq!(
        on_request(&rst, f, 4, Some(&c), None, HOUR),
        OnRequest::Reset
    );
}

#[test]
fn a_server_fin_adopts_the_connection_half_closed() {
    let fin = seg(TCP_ACK | TCP_FIN, 7_000, 3_000, 0);
    let OnLegacyReply::Adopt(c) = on_legacy_reply(&fin, F1, 0, HOUR) else {
        panic!("a FIN with ACK adopts");
    };
    assert_eq!(c.flags, CONN_FIN_SERVER);
    assert_eq!(c.server_next, 7_001);
}

#[test]
fn legacy_resets_and_segments_without_ack_are_restored_but_never_tracked() {
    for flags in [TCP_RST, TCP_RST | TCP_ACK, TCP_FIN, 0] {
        assert_eq!(
            on_legacy_reply(&seg(flags, 7_000, 3_000, 0), F1, 0, HOUR),
            OnLegacyReply::Restore,
            "flags {flags:#x}"
        );
    }
}

#[test]
fn a_syn_ack_from_a_legacy_backend_is_left_to_the_handshake_tracking() {
    for flags in [TCP_SYN | TCP_ACK, TCP_SYN] {
        assert_eq!(
            on_legacy_reply(&seg(flags, 7_000, 3_000, 0), F1, 0, HOUR),
            OnLegacyReply::Untracked
        );
    }
}

/// The established table as the kernel programs keep one entry of it: the
/// request or reply decision applied to `table`.
fn apply_request(table: &mut Option<Conn>, s: &Segment, now: u64) {
    match on_request(s, F1, 3, table.as_ref(), None, now) {
        OnRequest::Established(Some(c)) | OnRequest::IgnoredReset(Some(c)) => *table = Some(c),
        OnRequest::Reset => *table = None,
        _ => {}
    }
}

fn apply_reply(table: &mut Option<Conn>, s: &Segment, now: u64) {
    match on_reply(s, table.as_ref(), None, now) {
        OnReply::Established {
            update: Some(c), ..
        } => *table = Some(c),
        OnReply::Reset { .. } => *table = None,
        _ => {}
    }
}

#[test]
fn a_client_rst_that_crosses_the_server_ack_of_its_fin_ends_the_connection_with_that_ack() {
    // The client closes while the server's data is in flight (an ssh
    // client that hangs up after the banner): FIN, then, as the server's
    // data arrives at a closed socket, a RST one past the FIN. The server's
    // ACK of the FIN crosses the RST, so the RST is one ahead of the last
    // acknowledgement seen; the pod accepts it (its next expected is the
    // RST's sequence number), and so must the table once that ACK shows it.
    let conn = handshake(F1);
    let mut table = Some(conn);
    let fin = seg(TCP_FIN | TCP_ACK, conn.client_next, conn.server_next, 0);
    apply_request(&mut table, &fin, 40);
    let data = seg(TCP_ACK, conn.server_next, conn.client_next, 500);
    apply_reply(&mut table, &data, 41);
    let rst = seg(TCP_RST, conn.client_next + 1, 0, 0);
    apply_request(&mut table, &rst, 42);
    assert!(table.is_some(), "not in sequence yet: the entry stays");
    let fin_acked = seg(TCP_ACK, conn.server_next + 500, conn.client_next + 1, 0);
    apply_reply(&mut table, &fin_acked, 43);
    assert_eq!(
        table, None,
        "the server's ACK shows the RST was in sequence"
    );
}

#[test]
fn a_client_rst_ahead_is_decided_by_the_next_new_server_ack_alone() {
    let conn = handshake(F1);
    // A spoofed RST ahead of the connection: the server's next new
    // acknowledgement is elsewhere, so it is forgotten; the same number
    // acknowledged later ends nothing (one chance per RST, as the
    // kernel's exact check gives).
    let mut table = Some(conn);
    let guess = conn.client_next + 100;
    apply_request(&mut table, &seg(TCP_RST, guess, 0, 0), 40);
    let old = seg(TCP_ACK, conn.server_next, conn.client_next, 0);
    apply_reply(&mut table, &old, 41);
    assert!(table.is_some(), "an ACK that moves nothing decides nothing");
    apply_reply(
        &mut table,
        &seg(TCP_ACK, conn.server_next, conn.client_next + 40, 0),
        42,
    );
    apply_reply(
        &mut table,
        &seg(TCP_ACK, conn.server_next, conn.client_next + 100, 0),
        43,
    );
    assert!(
        table.is_some(),
        "the guess was decided by the first new ACK"
    );
    // A RST behind the acknowledged data is never held.
    let mut table = Some(conn);
    apply_request(&mut table, &seg(TCP_RST, conn.client_next - 1, 0, 0), 40);
    apply_reply(
        &mut table,
        &seg(
            TCP_ACK,
            conn.server_next,
            conn.client_next.wrapping_sub(1),
            0,
        ),
        41,
    );
    assert!(table.is_some());
}

/// The server acknowledges everything up to `ack` (and sends nothing).
fn server_ack(table: &mut Option<Conn>, ack: u32, now: u64) {
    let server_next = table.map_or(0, |c| c.server_next);
    apply_reply(table, &seg(TCP_ACK, server_next, ack, 0), now);
}

/// The server closes its side, acknowledging up to `ack`.
fn server_fin(table: &mut Option<Conn>, ack: u32, now: u64) {
    let server_next = table.map_or(0, |c| c.server_next);
    apply_reply(table, &seg(TCP_FIN | TCP_ACK, server_next, ack, 0), now);
}

fn fin(seq: u32, payload: u32) -> Segment {
    seg(TCP_FIN | TCP_ACK, seq, SERVER_ISN + 1, payload)
}

#[test]
fn a_fin_behind_what_the_server_acknowledged_is_not_the_clients_close() {
    let conn = handshake(F1);
    let mut table = Some(conn);
    // The server has 1000 bytes of the client's; a spoofed FIN behind
    // them (as a random number is, half the time).
    server_ack(&mut table, conn.client_next + 1_000, 40);
    apply_request(&mut table, &fin(conn.client_next + 10, 0), 41);
    assert_eq!(
        table.map(|c| c.flags & CONN_FIN_PENDING),
        Some(0),
        "not even noted"
    );
    server_ack(&mut table, conn.client_next + 1_000, 42);
    server_fin(&mut table, conn.client_next + 1_000, 43);
    let c = table.expect("entry");
    assert_eq!(c.flags & CONN_FIN_CLIENT, 0);
    assert!(!closing(&c), "only the server has closed");
}

#[test]
fn a_fin_at_a_random_sequence_number_never_closes_the_clients_side() {
    let conn = handshake(F1);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..2_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let guess = (state >> 16) as u32;
        let mut table = Some(conn);
        apply_request(&mut table, &fin(guess, (state & 0x3ff) as u32), 40);
        // The real client goes on sending; the server acknowledges it,
        // then closes its side.
        for step in 1..=4 {
            server_ack(
                &mut table,
                conn.client_next + step * 700,
                40 + u64::from(step),
            );
        }
        server_fin(&mut table, conn.client_next + 2_800, 50);
        let c = table.expect("entry");
        assert!(!closing(&c), "FIN at {guess}: {c:?}");
    }
}

#[test]
fn a_spoofed_fin_does_not_replace_the_real_pending_one() {
    let conn = handshake(F1);
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next, 10), 40);
    let real_end = conn.client_next + 11;
    assert_eq!(table.map(|c| c.client_fin_end), Some(real_end));
    // Spoofed FINs ahead of it, in the window and far out of it.
    for off in [1u32, 5_000, 1 << 20, 1 << 31] {
        apply_request(&mut table, &fin(conn.client_next + 10 + off, 0), 41);
        assert_eq!(table.map(|c| c.client_fin_end), Some(real_end), "+{off}");
    }
    server_fin(&mut table, real_end, 42);
    assert!(
        closing(&table.expect("entry")),
        "the real FIN was acknowledged"
    );
}

#[test]
fn a_spoofed_fin_noted_first_gives_way_to_the_real_one() {
    let conn = handshake(F1);
    // Ahead of the real FIN: the real one, earlier, replaces it.
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next + 5_000, 0), 40);
    apply_request(&mut table, &fin(conn.client_next + 20, 0), 41);
    server_fin(&mut table, conn.client_next + 21, 42);
    assert!(closing(&table.expect("entry")));
    // Behind it: the server's acknowledgement passes it without taking it
    // exactly, so it was no FIN of the client's; the real one replaces it.
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next + 100, 0), 40);
    server_ack(&mut table, conn.client_next + 300, 41);
    assert_eq!(table.map(|c| c.flags & CONN_FIN_CLIENT), Some(0));
    apply_request(&mut table, &fin(conn.client_next + 300, 0), 42);
    server_fin(&mut table, conn.client_next + 301, 43);
    assert!(closing(&table.expect("entry")));
}

#[test]
fn only_an_acknowledgement_of_exactly_the_fin_closes_the_clients_side() {
    let conn = handshake(F1);
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next, 0), 40);
    // An acknowledgement past the FIN: the FIN was not the client's last
    // sequence number, so not the client's FIN.
    server_fin(&mut table, conn.client_next + 50, 41);
    assert_eq!(table.map(|c| c.flags & CONN_FIN_CLIENT), Some(0));
}

#[test]
fn a_reopening_flag_ends_with_the_next_segment_the_old_connection_sends() {
    let conn = handshake(F1);
    // A SYN through the same frontend (spoofed, or a client reusing its
    // port) flags the entry ...
    assert_eq!(
        on_request(&syn(), F1, 3, Some(&conn), None, 40),
        OnRequest::OpenHalf { reopening: true }
    );
    let reopening = Conn {
        flags: CONN_REOPENING,
        ..conn
    };
    let ack = seg(TCP_ACK, conn.client_next, conn.server_next, 0);
    assert!(request_reads_half_open(&ack, Some(&reopening)));
    // ... until the server answers it with a segment of the old connection
    // (its challenge ACK; a real new one it would answer with a SYN-ACK).
    let mut table = Some(reopening);
    server_ack(&mut table, conn.client_next, 41);
    let c = table.expect("entry");
    assert_eq!(c.flags & CONN_REOPENING, 0);
    assert!(!request_reads_half_open(&ack, Some(&c)));
    // A SYN-ACK for the new handshake leaves the flag to the promotion.
    let half = HalfOpen {
        frontend: F1,
        slot: 3,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 40,
    };
    assert!(matches!(
        on_reply(&syn_ack(), Some(&reopening), Some(&half), 42),
        OnReply::Accept { .. }
    ));
}

#[test]
fn only_the_syn_that_made_the_half_open_entry_carries_its_frontend() {
    let half = HalfOpen {
        frontend: F2,
        slot: 4,
        flags: 0,
        client_isn: CLIENT_ISN,
        server_isn: 0,
        last_seen_ns: 0,
    };
    assert_eq!(translated_syn(&syn(), Some(&half)), Some(F2));
    // A SYN of the same 4-tuple with another ISN: a pod's own, while
    // spoofed SYNs wrote the entry.
    let other = seg(TCP_SYN, CLIENT_ISN + 77, 0, 0);
    assert_eq!(translated_syn(&other, Some(&half)), None);
    assert_eq!(translated_syn(&syn(), None), None);
    let syn_ack = seg(TCP_SYN | TCP_ACK, CLIENT_ISN, 0, 0);
    assert_eq!(translated_syn(&syn_ack, Some(&half)), None);
}

/// The entry of a completed handshake with these FIN `flags` (a server's
/// FIN alone: sshd closed it after LoginGraceTime and the client went
/// silent), last seen at `at`.
fn conn_flagged(flags: u32, at: u64) -> Conn {
    Conn {
        flags,
        last_seen_ns: at,
        ..handshake(F1)
    }
}

pub(super) const SECOND: u64 = 1_000_000_000;

#[test]
fn a_half_closed_connection_quiet_for_two_minutes_is_swept_and_an_open_one_is_not() {
    let (idle, close) = (24 * HOUR, 10 * SECOND);
    for flags in [CONN_FIN_SERVER, CONN_FIN_CLIENT] {
        let c = conn_flagged(flags, HOUR);
        assert_eq!(expiry(&c, HOUR + 119 * SECOND, idle, close), None, "{c:?}");
        assert_eq!(
            expiry(&c, HOUR + 120 * SECOND, idle, close),
            Some(Expiry::Idle),
            "{c:?}"
        );
    }
    // Open: the idle timeout; both sides closed: the close timeout.
    let open = conn_flagged(0, HOUR);
    assert_eq!(expiry(&open, 9 * HOUR, idle, close), None);
    let closed = conn_flagged(CONN_FIN_CLIENT | CONN_FIN_SERVER, HOUR);
    assert_eq!(
        expiry(&closed, HOUR + 10 * SECOND, idle, close),
        Some(Expiry::Closed)
    );
    // A shorter idle timeout still wins.
    let c = conn_flagged(CONN_FIN_SERVER, HOUR);
    assert_eq!(
        expiry(&c, HOUR + 30 * SECOND, 30 * SECOND, close),
        Some(Expiry::Idle)
    );
}

#[test]
fn in_a_half_closed_connection_only_the_servers_segments_keep_it_alive() {
    let c = conn_flagged(CONN_FIN_SERVER, 0);
    // The client's segments (spoofable, or a client that holds the entry
    // open without ever closing) leave the clock alone ...
    for s in [
        seg(TCP_ACK, c.client_next, c.server_next, 0),
        seg(TCP_ACK | 0x08, c.client_next, c.server_next, 100),
    ] {
        assert_eq!(
            on_request(&s, F1, 3, Some(&c), None, 100 * SECOND),
            OnRequest::Established(None),
            "{s:?}"
        );
    }
    // Nor does a client RST ahead of what the server acknowledged, which
    // is held until the server decides it: held, its clock stays.
    let rst = seg(TCP_RST, c.client_next + 5, 0, 0);
    let OnRequest::IgnoredReset(Some(held)) = on_request(&rst, F1, 3, Some(&c), None, 100 * SECOND)
    else {
        panic!("a RST ahead is held")
    };
    assert_ne!(held.flags & CONN_RST_PENDING, 0);
    assert_eq!(held.last_seen_ns, c.last_seen_ns);
    // ... the server's refresh it.
    let ack = seg(TCP_ACK, c.server_next, c.client_next + 100, 0);
    let OnReply::Established {
        update: Some(after),
        ..
    } = on_reply(&ack, Some(&c), None, 100 * SECOND)
    else {
        panic!("updated")
    };
    assert_eq!(after.last_seen_ns, 100 * SECOND);
    // An open connection's client refreshes it, as before.
    let open = conn_flagged(0, 0);
    let s = seg(TCP_ACK, open.client_next, open.server_next, 0);
    let OnRequest::Established(Some(after)) =
        on_request(&s, F1, 3, Some(&open), None, 100 * SECOND)
    else {
        panic!("refreshed")
    };
    assert_eq!(after.last_seen_ns, 100 * SECOND);
}

#[test]
fn a_fin_whose_end_wraps_to_zero_is_noted_and_closes_the_clients_side() {
    let conn = Conn {
        client_next: 0xFFFF_FFF0,
        ..handshake(F1)
    };
    let mut table = Some(conn);
    // 15 bytes of data and the FIN: the FIN's sequence number is
    // 0xFFFFFFFF, and it ends at 0.
    let fin = seg(TCP_FIN | TCP_ACK, 0xFFFF_FFF0, conn.server_next, 15);
    assert_eq!(fin.end(), 0);
    apply_request(&mut table, &fin, 40);
    server_fin(&mut table, 0, 41);
    let c = table.expect("entry");
    assert!(closing(&c), "{c:?}");
    // A spoofed FIN after it does not replace it either.
    let mut table = Some(conn);
    apply_request(&mut table, &fin, 40);
    apply_request(&mut table, &seg(TCP_FIN | TCP_ACK, 20, 0, 0), 41);
    server_fin(&mut table, 0, 42);
    assert!(closing(&table.expect("entry")));
}

#[test]
fn a_handshake_refused_over_a_closed_connection_is_restored_to_its_own_frontend() {
    // The client's old connection through F1 closed (its entry waits out
    // the close timeout); it reuses its port through F2, and the pod
    // refuses (nothing listens any more).
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..handshake(F1)
    };
    let half = HalfOpen {
        frontend: F2,
        slot: 4,
        flags: 0,
        client_isn: CLIENT_ISN + 77,
        server_isn: 0,
        last_seen_ns: 60,
    };
    let refusal = seg(TCP_RST | TCP_ACK, 0, CLIENT_ISN + 78, 0);
    assert_eq!(
        on_reply(&refusal, Some(&closed), Some(&half), 61),
        OnReply::Refuse {
            frontend: F2,
            slot: 4
        }
    );
    assert!(reply_reads_half_open(&refusal, Some(&closed)));
    // A live connection's own RST is still judged by its sequence number.
    let live = handshake(F1);
    assert!(matches!(
        on_reply(&refusal, Some(&live), None, 61),
        OnReply::IgnoredReset { frontend: F1, .. }
    ));
}

#[test]
fn every_segment_of_a_handshake_names_the_clients_isn() {
    for isn in [CLIENT_ISN, 0, u32::MAX] {
        let syn_ack = seg(TCP_SYN | TCP_ACK, SERVER_ISN, isn.wrapping_add(1), 0);
        let refusal = seg(TCP_RST | TCP_ACK, 0, isn.wrapping_add(1), 0);
        let ack = seg(TCP_ACK, isn.wrapping_add(1), SERVER_ISN + 1, 0);
        let banner = seg(TCP_ACK | 0x08, isn.wrapping_add(1), SERVER_ISN + 1, 21);
        assert_eq!(reply_isn(&syn_ack), isn);
        assert_eq!(reply_isn(&refusal), isn);
        assert_eq!(request_isn(&ack), isn);
        assert_eq!(request_isn(&banner), isn);
    }
}
