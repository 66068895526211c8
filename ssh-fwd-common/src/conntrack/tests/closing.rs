//! How a tracked connection ends: FINs noted and acknowledged, RSTs exact
//! or held, and what spoofed ones cannot do.

use super::*;

fn apply_request<A: Scenarios>(table: &mut Option<ConnOf<A>>, s: &Segment) {
    match on_request(s, A::F1, table.as_ref(), || true) {
        OnRequest::Established {
            update: Some(c), ..
        }
        | OnRequest::IgnoredReset(Some(c)) => {
            *table = Some(c);
        }
        OnRequest::Reset => *table = None,
        _ => {}
    }
}

fn apply_reply<A: Scenarios>(table: &mut Option<ConnOf<A>>, s: &Segment, now: u64) {
    match on_reply(s, &only_conn(table.as_ref()), now, TIMEOUT) {
        OnReply::Established {
            update: Some(c), ..
        } => *table = Some(c),
        OnReply::Reset { .. } => *table = None,
        _ => {}
    }
}

/// The server acknowledges everything up to `ack` (and sends nothing).
fn server_ack<A: Scenarios>(table: &mut Option<ConnOf<A>>, ack: u32, now: u64) {
    let server_next = table.map_or(0, |c| c.server_next);
    apply_reply(table, &seg(TCP_ACK, server_next, ack, 0), now);
}

/// The server closes its side, acknowledging up to `ack`.
fn server_fin<A: Scenarios>(table: &mut Option<ConnOf<A>>, ack: u32, now: u64) {
    let server_next = table.map_or(0, |c| c.server_next);
    apply_reply(table, &seg(TCP_FIN | TCP_ACK, server_next, ack, 0), now);
}

fn fin(seq: u32, payload: u32) -> Segment {
    seg(TCP_FIN | TCP_ACK, seq, SERVER_ISN + 22, payload)
}

both_families!(the_client_has_closed_once_the_server_acknowledged_its_fin);
fn the_client_has_closed_once_the_server_acknowledged_its_fin<A: Scenarios>() {
    let conn = handshake(A::F1);
    // A spoofed FIN out of sequence: pending, never acknowledged.
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next + 5_000, 0));
    server_ack(&mut table, conn.client_next, 41);
    assert_eq!(table.map(|c| c.flags & CONN_FIN_CLIENT), Some(0));
    // The real FIN, with 10 bytes of data, acknowledged by the server.
    let OnRequest::Established {
        update: Some(c), ..
    } = on_request(&fin(conn.client_next, 10), A::F1, Some(&conn), || true)
    else {
        panic!("noted")
    };
    assert_eq!(c.flags, CONN_FIN_PENDING, "pending until acknowledged");
    let mut table = Some(c);
    server_fin(&mut table, conn.client_next + 11, 41);
    let closed = table.expect("entry");
    assert_eq!(closed.flags, CONN_FIN_CLIENT | CONN_FIN_SERVER);
    assert!(closing(&closed));
    // The last ACK still goes through (restored by the closing entry), and
    // claims nothing: it is the closed connection's, exactly in sequence.
    let last = seg(TCP_ACK, closed.client_next, closed.server_next, 0);
    assert_eq!(
        on_request(&last, A::F1, Some(&closed), || true),
        OnRequest::Forward
    );
    // A new connection's ACK on the same 4-tuple (another ISN) claims.
    let new = seg(TCP_ACK, closed.client_next + 5_000_000, 77, 0);
    assert_eq!(
        on_request(&new, A::F1, Some(&closed), || true),
        OnRequest::Claim
    );
}

both_families!(
    a_client_rst_that_crosses_the_server_ack_of_its_fin_ends_the_connection_with_that_ack
);
fn a_client_rst_that_crosses_the_server_ack_of_its_fin_ends_the_connection_with_that_ack<
    A: Scenarios,
>() {
    // The client closes while the server's data is in flight (an ssh
    // client that hangs up after the banner): FIN, then, as the server's
    // data arrives at a closed socket, a RST one past the FIN. The server's
    // ACK of the FIN crosses the RST, so the RST is one ahead of the last
    // acknowledgement seen; the pod accepts it (its next expected is the
    // RST's sequence number), and so must the table once that ACK shows it.
    let conn = handshake(A::F1);
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next, 0));
    let data = seg(TCP_ACK, conn.server_next, conn.client_next, 500);
    apply_reply(&mut table, &data, 41);
    let rst = seg(TCP_RST, conn.client_next + 1, 0, 0);
    apply_request(&mut table, &rst);
    assert!(table.is_some(), "not in sequence yet: the entry stays");
    let fin_acked = seg(TCP_ACK, conn.server_next + 500, conn.client_next + 1, 0);
    apply_reply(&mut table, &fin_acked, 43);
    assert_eq!(
        table, None,
        "the server's ACK shows the RST was in sequence"
    );
}

both_families!(a_client_rst_ahead_is_decided_by_the_next_new_server_ack_alone);
fn a_client_rst_ahead_is_decided_by_the_next_new_server_ack_alone<A: Scenarios>() {
    let conn = handshake(A::F1);
    // A spoofed RST ahead of the connection: the server's next new
    // acknowledgement is elsewhere, so it is forgotten; the same number
    // acknowledged later ends nothing (one chance per RST, as the
    // kernel's exact check gives).
    let mut table = Some(conn);
    let guess = conn.client_next + 100;
    apply_request(&mut table, &seg(TCP_RST, guess, 0, 0));
    let old = seg(TCP_ACK, conn.server_next, conn.client_next, 0);
    apply_reply(&mut table, &old, 41);
    assert!(table.is_some(), "an ACK that moves nothing decides nothing");
    server_ack(&mut table, conn.client_next + 40, 42);
    server_ack(&mut table, conn.client_next + 100, 43);
    assert!(
        table.is_some(),
        "the guess was decided by the first new ACK"
    );
    // A RST behind the acknowledged data is never held.
    let mut table = Some(conn);
    apply_request(&mut table, &seg(TCP_RST, conn.client_next - 1, 0, 0));
    server_ack(&mut table, conn.client_next.wrapping_sub(1), 41);
    assert!(table.is_some());
}

both_families!(a_fin_behind_what_the_server_acknowledged_is_not_the_clients_close);
fn a_fin_behind_what_the_server_acknowledged_is_not_the_clients_close<A: Scenarios>() {
    let conn = handshake(A::F1);
    let mut table = Some(conn);
    // The server has 1000 bytes of the client's; a spoofed FIN behind
    // them (as a random number is, half the time).
    server_ack(&mut table, conn.client_next + 1_000, 40);
    apply_request(&mut table, &fin(conn.client_next + 10, 0));
    assert_eq!(
        table.map(|c| c.flags & CONN_FIN_PENDING),
        Some(0),
        "not even noted"
    );
    server_fin(&mut table, conn.client_next + 1_000, 43);
    let c = table.expect("entry");
    assert_eq!(c.flags & CONN_FIN_CLIENT, 0);
    assert!(!closing(&c), "only the server has closed");
}

both_families!(a_fin_at_a_random_sequence_number_never_closes_the_clients_side);
fn a_fin_at_a_random_sequence_number_never_closes_the_clients_side<A: Scenarios>() {
    let conn = handshake(A::F1);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..2_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let guess = (state >> 16) as u32;
        let mut table = Some(conn);
        apply_request(&mut table, &fin(guess, (state & 0x3ff) as u32));
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

both_families!(a_spoofed_fin_does_not_replace_the_real_pending_one);
fn a_spoofed_fin_does_not_replace_the_real_pending_one<A: Scenarios>() {
    let conn = handshake(A::F1);
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next, 10));
    let real_end = conn.client_next + 11;
    assert_eq!(table.map(|c| c.client_fin_end), Some(real_end));
    // Spoofed FINs ahead of it, in the window and far out of it.
    for off in [1u32, 5_000, 1 << 20, 1 << 31] {
        apply_request(&mut table, &fin(conn.client_next + 10 + off, 0));
        assert_eq!(table.map(|c| c.client_fin_end), Some(real_end), "+{off}");
    }
    server_fin(&mut table, real_end, 42);
    assert!(
        closing(&table.expect("entry")),
        "the real FIN was acknowledged"
    );
}

both_families!(a_spoofed_fin_noted_first_gives_way_to_the_real_one);
fn a_spoofed_fin_noted_first_gives_way_to_the_real_one<A: Scenarios>() {
    let conn = handshake(A::F1);
    // Ahead of the real FIN: the real one, earlier, replaces it.
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next + 5_000, 0));
    apply_request(&mut table, &fin(conn.client_next + 20, 0));
    server_fin(&mut table, conn.client_next + 21, 42);
    assert!(closing(&table.expect("entry")));
    // Behind it: the server's acknowledgement passes it without taking it
    // exactly, so it was no FIN of the client's; the real one replaces it.
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next + 100, 0));
    server_ack(&mut table, conn.client_next + 300, 41);
    assert_eq!(table.map(|c| c.flags & CONN_FIN_CLIENT), Some(0));
    apply_request(&mut table, &fin(conn.client_next + 300, 0));
    server_fin(&mut table, conn.client_next + 301, 43);
    assert!(closing(&table.expect("entry")));
}

both_families!(only_an_acknowledgement_of_exactly_the_fin_closes_the_clients_side);
fn only_an_acknowledgement_of_exactly_the_fin_closes_the_clients_side<A: Scenarios>() {
    let conn = handshake(A::F1);
    let mut table = Some(conn);
    apply_request(&mut table, &fin(conn.client_next, 0));
    // An acknowledgement past the FIN: the FIN was not the client's last
    // sequence number, so not the client's FIN.
    server_fin(&mut table, conn.client_next + 50, 41);
    assert_eq!(table.map(|c| c.flags & CONN_FIN_CLIENT), Some(0));
}

both_families!(a_fin_whose_end_wraps_to_zero_is_noted_and_closes_the_clients_side);
fn a_fin_whose_end_wraps_to_zero_is_noted_and_closes_the_clients_side<A: Scenarios>() {
    let conn = Conn {
        client_next: 0xFFFF_FFF0,
        ..handshake(A::F1)
    };
    let mut table = Some(conn);
    // 15 bytes of data and the FIN: the FIN's sequence number is
    // 0xFFFFFFFF, and it ends at 0.
    let fin = seg(TCP_FIN | TCP_ACK, 0xFFFF_FFF0, conn.server_next, 15);
    assert_eq!(fin.end(), 0);
    apply_request(&mut table, &fin);
    server_fin(&mut table, 0, 41);
    let c = table.expect("entry");
    assert!(closing(&c), "{c:?}");
    // A spoofed FIN after it does not replace it either.
    let mut table = Some(conn);
    apply_request(&mut table, &fin);
    apply_request(&mut table, &seg(TCP_FIN | TCP_ACK, 20, 0, 0));
    server_fin(&mut table, 0, 42);
    assert!(closing(&table.expect("entry")));
}

both_families!(a_handshake_refused_over_a_closed_connection_is_restored_to_its_own_frontend);
fn a_handshake_refused_over_a_closed_connection_is_restored_to_its_own_frontend<A: Scenarios>() {
    // The client's old connection through F1 closed (its entry waits out
    // the close timeout); it reuses its port through F2, and the pod
    // refuses (nothing listens any more).
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..handshake(A::F1)
    };
    let h = half(A::F2, CLIENT_ISN + 77);
    let refusal = seg(TCP_RST | TCP_ACK, 0, CLIENT_ISN + 78, 0);
    let found = Found {
        conn: Some(&closed),
        half: Some(&h),
        claim: None,
    };
    assert_eq!(
        on_reply(&refusal, &found, 61, TIMEOUT),
        OnReply::Refuse {
            frontend: A::F2,
            slot: 3
        }
    );
    // A live connection's own RST is still judged by its sequence number.
    let live = handshake(A::F1);
    let found = Found {
        conn: Some(&live),
        half: Some(&h),
        claim: None,
    };
    assert!(matches!(
        on_reply(&refusal, &found, 61, TIMEOUT),
        OnReply::IgnoredReset { frontend, .. } if frontend == A::F1
    ));
}
