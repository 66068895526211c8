use core::{
    fmt::Debug,
    net::{Ipv4Addr, Ipv6Addr},
};

use super::*;
use crate::maps::{
    Addr, Addr6, CONN_FIN_CLIENT, CONN_FIN_PENDING, CONN_FIN_SERVER, CONN_REOPENING,
    CONN_RST_PENDING, Claim, Endpoint, Endpoint6, HalfOpen,
};

/// The frontends the scenarios go through, in one address family. Every
/// scenario is written once, over a family, and runs in both (see
/// [`both_families!`]).
pub(super) trait Scenarios: Addr {
    const F1: Endpoint<Self>;
    const F2: Endpoint<Self>;
}

const SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const SSH_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
/// A second SSH IP: F2 differs from F1 in its address too, so a comparison
/// that ignored the address (or all but part of it) would show.
const OTHER_SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);
/// Differs from [`SSH_IP6`] in the last 32-bit word only.
const OTHER_SSH_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11);

impl Scenarios for u32 {
    const F1: Endpoint = Endpoint::new(SSH_IP, 8022);
    const F2: Endpoint = Endpoint::new(OTHER_SSH_IP, 8022);
}

impl Scenarios for Addr6 {
    const F1: Endpoint6 = Endpoint6::new6(SSH_IP6, 8022);
    const F2: Endpoint6 = Endpoint6::new6(OTHER_SSH_IP6, 8022);
}

/// A connection entry of a scenario in family `A`.
pub(super) type ConnOf<A> = Conn<Endpoint<A>>;

/// The tests of a scenario `name<A: Scenarios>`: `name::ipv4` and
/// `name::ipv6` (a module and a function may share a name).
macro_rules! both_families {
    ($name:ident) => {
        mod $name {
            #[test]
            fn ipv4() {
                super::$name::<u32>();
            }

            #[test]
            fn ipv6() {
                super::$name::<crate::maps::Addr6>();
            }
        }
    };
}
pub(super) use both_families;

mod closing;
mod trust;

const HOUR: u64 = 3_600_000_000_000;
pub(super) const SECOND: u64 = 1_000_000_000;
const CLIENT_ISN: u32 = 1_000;
const SERVER_ISN: u32 = 5_000_000;
const TIMEOUT: u64 = CONFIRM_TIMEOUT_NS;
const PSH: u8 = 0x08;

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

/// sshd's banner, the server's first segment after the handshake.
fn banner() -> Segment {
    seg(TCP_ACK | PSH, SERVER_ISN + 1, CLIENT_ISN + 1, 21)
}

fn half<E>(frontend: E, client_isn: u32) -> HalfOpen<E> {
    HalfOpen {
        frontend,
        slot: 3,
        flags: 0,
        client_isn,
        server_isn: 0,
        last_seen_ns: 10,
    }
}

fn claim<E>(frontend: E, seen_ns: u64) -> Claim<E> {
    Claim {
        frontend,
        slot: 3,
        _pad: 0,
        seen_ns,
    }
}

fn only_conn<E>(c: Option<&Conn<E>>) -> Found<'_, E> {
    Found {
        conn: c,
        ..Found::default()
    }
}

/// Runs the handshake through `frontend` and the server's banner, and
/// returns the entry the banner confirmed.
fn handshake<E: Copy + PartialEq + Debug>(frontend: E) -> Conn<E> {
    assert_eq!(
        on_request(&syn(), frontend, None, || true),
        OnRequest::OpenHalf { reopening: false }
    );
    let h = half(frontend, CLIENT_ISN);
    let found = Found {
        half: Some(&h),
        ..Found::default()
    };
    assert_eq!(
        on_reply(&syn_ack(), &found, 20, TIMEOUT),
        OnReply::Accept {
            frontend,
            slot: 3,
            mss_cap: 0
        }
    );
    assert_eq!(
        on_request(&final_ack(), frontend, None, || true),
        OnRequest::Claim
    );
    let c = claim(frontend, 30);
    let found = Found {
        claim: Some(&c),
        ..Found::default()
    };
    let OnReply::Confirm {
        conn,
        replacing: false,
    } = on_reply(&banner(), &found, 31, TIMEOUT)
    else {
        panic!("the banner confirms the claim")
    };
    conn
}

both_families!(the_servers_first_segment_confirms_the_claim_with_both_next_sequence_numbers);
fn the_servers_first_segment_confirms_the_claim_with_both_next_sequence_numbers<A: Scenarios>() {
    let conn = handshake(A::F1);
    assert_eq!(conn.frontend, A::F1);
    assert_eq!(conn.client_next, CLIENT_ISN + 1);
    assert_eq!(conn.server_next, SERVER_ISN + 1 + 21);
    assert_eq!(
        (conn.created_ns, conn.last_seen_ns, conn.flags),
        (31, 31, 0)
    );
}

both_families!(the_syn_ack_is_restored_to_the_frontend_of_the_syn_and_stores_nothing);
fn the_syn_ack_is_restored_to_the_frontend_of_the_syn_and_stores_nothing<A: Scenarios>() {
    let h = HalfOpen {
        flags: mss::with_cap(0, 1400),
        ..half(A::F2, CLIENT_ISN)
    };
    let found = Found {
        half: Some(&h),
        ..Found::default()
    };
    assert_eq!(
        on_reply(&syn_ack(), &found, 5, TIMEOUT),
        OnReply::Accept {
            frontend: A::F2,
            slot: 3,
            mss_cap: 1400
        }
    );
}

both_families!(
    the_servers_ack_to_a_second_syn_during_a_handshake_is_restored_to_the_first_syns_frontend
);
fn the_servers_ack_to_a_second_syn_during_a_handshake_is_restored_to_the_first_syns_frontend<
    A: Scenarios,
>() {
    // A SYN through F2 (an off-path sender's, say) reached the server
    // first; the client's own SYN of the same 4-tuple through F1 finds the
    // server's request socket, which answers it with an ACK of the first
    // ISN. That ACK goes to the client's address and must not leave with
    // the pod's.
    let first = half(A::F2, 0x5eed);
    let answer = seg(TCP_ACK, SERVER_ISN + 1, 0x5eed + 1, 0);
    let untracked = None::<&ConnOf<A>>;
    assert!(answers_handshake(&answer, untracked));
    let found = Found {
        half: Some(&first),
        ..Found::default()
    };
    assert_eq!(
        on_reply(&answer, &found, 5, TIMEOUT),
        OnReply::Answer {
            frontend: A::F2,
            slot: 3
        }
    );
    // Only a bare ACK answers a handshake; a live connection's own
    // segments never read the half-open table.
    assert!(!answers_handshake(&seg(TCP_ACK | PSH, 1, 2, 10), untracked));
    assert!(!answers_handshake(
        &seg(TCP_ACK | TCP_RST, 1, 2, 0),
        untracked
    ));
    assert!(!answers_handshake(&answer, Some(&handshake(A::F1))));
}

both_families!(a_claim_counts_only_until_the_confirm_timeout);
fn a_claim_counts_only_until_the_confirm_timeout<A: Scenarios>() {
    let c = claim(A::F1, 100);
    let found = Found {
        claim: Some(&c),
        ..Found::default()
    };
    assert!(matches!(
        on_reply(&banner(), &found, 100 + TIMEOUT, TIMEOUT),
        OnReply::Confirm { .. }
    ));
    assert_eq!(
        on_reply(&banner(), &found, 101 + TIMEOUT, TIMEOUT),
        OnReply::Untracked,
        "a stale claim is nothing"
    );
}

both_families!(a_claim_never_replaces_a_live_connection);
fn a_claim_never_replaces_a_live_connection<A: Scenarios>() {
    let live = handshake(A::F1);
    let c = claim(A::F2, 40);
    let found = Found {
        conn: Some(&live),
        claim: Some(&c),
        ..Found::default()
    };
    let reply = seg(TCP_ACK, live.server_next, live.client_next, 0);
    assert!(matches!(
        on_reply(&reply, &found, 41, TIMEOUT),
        OnReply::Established { frontend, .. } if frontend == A::F1
    ));
    // Nor do the client's segments through another frontend claim it.
    let ack = seg(TCP_ACK, live.client_next, live.server_next, 0);
    assert_eq!(
        on_request(&ack, A::F2, Some(&live), || true),
        OnRequest::Conflict
    );
    assert_eq!(
        on_request(&syn(), A::F2, Some(&live), || true),
        OnRequest::Conflict
    );
}

both_families!(a_closed_connection_yields_its_4_tuple_to_a_new_one_through_another_frontend);
fn a_closed_connection_yields_its_4_tuple_to_a_new_one_through_another_frontend<A: Scenarios>() {
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..handshake(A::F1)
    };
    assert_eq!(
        on_request(&syn(), A::F2, Some(&closed), || true),
        OnRequest::OpenHalf { reopening: false }
    );
    assert_eq!(
        on_request(&final_ack(), A::F2, Some(&closed), || true),
        OnRequest::Claim
    );
    let c = claim(A::F2, 50);
    let found = Found {
        conn: Some(&closed),
        claim: Some(&c),
        ..Found::default()
    };
    let OnReply::Confirm {
        conn,
        replacing: true,
    } = on_reply(&banner(), &found, 51, TIMEOUT)
    else {
        panic!("confirmed over the closed entry")
    };
    assert_eq!((conn.frontend, conn.flags), (A::F2, 0));
}

both_families!(a_client_reusing_its_port_through_the_same_frontend_starts_fresh);
fn a_client_reusing_its_port_through_the_same_frontend_starts_fresh<A: Scenarios>() {
    let old = handshake(A::F1);
    assert_eq!(
        on_request(&syn(), A::F1, Some(&old), || true),
        OnRequest::OpenHalf { reopening: true }
    );
    let reopening = Conn {
        flags: CONN_REOPENING,
        ..old
    };
    // The new handshake's ACK claims, and the server's banner confirms it,
    // replacing the old entry with the new sequence numbers.
    let ack = seg(TCP_ACK, CLIENT_ISN + 501, SERVER_ISN + 9_001, 0);
    assert_eq!(
        on_request(&ack, A::F1, Some(&reopening), || true),
        OnRequest::Established {
            update: None,
            claim: true
        }
    );
    let c = claim(A::F1, 60);
    let found = Found {
        conn: Some(&reopening),
        claim: Some(&c),
        ..Found::default()
    };
    let first = seg(TCP_ACK | PSH, SERVER_ISN + 9_001, CLIENT_ISN + 501, 21);
    let OnReply::Confirm {
        conn,
        replacing: true,
    } = on_reply(&first, &found, 61, TIMEOUT)
    else {
        panic!("confirmed")
    };
    assert_eq!(conn.client_next, CLIENT_ISN + 501);
    assert_eq!(conn.server_next, SERVER_ISN + 9_022);
    assert_eq!(conn.flags & CONN_REOPENING, 0);
}

both_families!(a_reopening_flag_ends_with_the_next_segment_the_old_connection_sends);
fn a_reopening_flag_ends_with_the_next_segment_the_old_connection_sends<A: Scenarios>() {
    let conn = Conn {
        flags: CONN_REOPENING,
        ..handshake(A::F1)
    };
    // The server answers the SYN with a challenge ACK of the old
    // connection: no claim starts there, so the flag goes.
    let challenge = seg(TCP_ACK, conn.server_next, conn.client_next, 0);
    let OnReply::Established {
        update: Some(c), ..
    } = on_reply(&challenge, &only_conn(Some(&conn)), 70, TIMEOUT)
    else {
        panic!("updated")
    };
    assert_eq!(c.flags & CONN_REOPENING, 0);
    let (half, claim) = reply_reads(&challenge, Some(&c));
    assert!(!half && !claim, "a live entry reads nothing more");
}

both_families!(claims_are_recorded_only_for_backends_of_this_node);
fn claims_are_recorded_only_for_backends_of_this_node<A: Scenarios>() {
    assert_eq!(
        on_request(&final_ack(), A::F1, None, || false),
        OnRequest::Forward
    );
    // A SYN is recorded anywhere: its node adds the option from it.
    assert_eq!(
        on_request(&syn(), A::F1, None, || false),
        OnRequest::OpenHalf { reopening: false }
    );
    // The locality is asked only when a claim is possible.
    let live = handshake(A::F1);
    let data = seg(TCP_ACK | PSH, live.client_next, live.server_next, 100);
    assert_eq!(
        on_request(&data, A::F1, Some(&live), || panic!("not asked")),
        OnRequest::Established {
            update: None,
            claim: false
        }
    );
}

both_families!(what_writes_state_is_what_the_kernel_checks_first);
fn what_writes_state_is_what_the_kernel_checks_first<A: Scenarios>() {
    let live = handshake(A::F1);
    let writes =
        |s: &Segment, c: Option<&ConnOf<A>>| on_request(s, A::F1, c, || true).writes_state();
    assert!(writes(&syn(), None));
    assert!(writes(&final_ack(), None));
    let fin = seg(TCP_FIN | TCP_ACK, live.client_next, live.server_next, 0);
    assert!(writes(&fin, Some(&live)));
    assert!(writes(&seg(TCP_RST, live.client_next, 0, 0), Some(&live)));
    assert!(writes(
        &seg(TCP_RST, live.client_next + 9, 0, 0),
        Some(&live)
    ));
    // Data of a tracked connection, and a RST behind it, write nothing.
    let data = seg(TCP_ACK | PSH, live.client_next, live.server_next, 100);
    assert!(!writes(&data, Some(&live)));
    assert!(!writes(
        &seg(TCP_RST, live.client_next - 1, 0, 0),
        Some(&live)
    ));
}

both_families!(only_the_server_moves_the_sequence_state_or_the_clock);
fn only_the_server_moves_the_sequence_state_or_the_clock<A: Scenarios>() {
    let conn = handshake(A::F1);
    // Client data, and a spoofed segment far ahead: nothing at all.
    for s in [
        seg(TCP_ACK | PSH, conn.client_next, conn.server_next, 1448),
        seg(TCP_ACK, conn.client_next.wrapping_add(1 << 31), 0, 10),
    ] {
        assert_eq!(
            on_request(&s, A::F1, Some(&conn), || true),
            OnRequest::Established {
                update: None,
                claim: false
            }
        );
    }
    // The server acknowledges the data and sends some: both move, and the
    // clock.
    let reply = seg(TCP_ACK, conn.server_next, conn.client_next + 1448, 100);
    let OnReply::Established {
        update: Some(c), ..
    } = on_reply(&reply, &only_conn(Some(&conn)), 41 * SECOND, TIMEOUT)
    else {
        panic!("updated")
    };
    assert_eq!(c.client_next, CLIENT_ISN + 1 + 1448);
    assert_eq!(c.server_next, conn.server_next + 100);
    assert_eq!(c.last_seen_ns, 41 * SECOND);
    // An old ACK moves nothing back.
    let stale = seg(TCP_ACK, c.server_next, conn.client_next, 0);
    assert_eq!(
        on_reply(&stale, &only_conn(Some(&c)), 41 * SECOND, TIMEOUT),
        OnReply::Established {
            frontend: A::F1,
            slot: 3,
            update: None
        }
    );
}

both_families!(a_server_segment_outside_the_window_moves_only_the_clock);
fn a_server_segment_outside_the_window_moves_only_the_clock<A: Scenarios>() {
    let conn = handshake(A::F1);
    for jump in [MAX_WINDOW + 1, 1 << 31, 0u32.wrapping_sub(MAX_WINDOW + 1)] {
        let far = seg(
            TCP_FIN | TCP_ACK,
            conn.server_next.wrapping_add(jump),
            conn.client_next + 5,
            10,
        );
        let decision = on_reply(&far, &only_conn(Some(&conn)), 9 * SECOND, TIMEOUT);
        let OnReply::Established {
            update: Some(c), ..
        } = decision
        else {
            panic!("{decision:?}")
        };
        assert_eq!(
            (c.server_next, c.client_next, c.flags),
            (conn.server_next, conn.client_next, 0),
            "+{jump}"
        );
        assert_eq!(c.last_seen_ns, 9 * SECOND);
    }
    // Within the window, ahead or behind, it counts.
    for jump in [MAX_WINDOW, 1, 0u32.wrapping_sub(MAX_WINDOW)] {
        let near = seg(TCP_FIN | TCP_ACK, conn.server_next.wrapping_add(jump), 0, 0);
        let OnReply::Established {
            update: Some(c), ..
        } = on_reply(&near, &only_conn(Some(&conn)), 9 * SECOND, TIMEOUT)
        else {
            panic!("updated")
        };
        assert_eq!(c.flags, CONN_FIN_SERVER, "+{jump}");
    }
}

both_families!(icmp_errors_count_only_for_sequence_numbers_the_server_sent);
fn icmp_errors_count_only_for_sequence_numbers_the_server_sent<A: Scenarios>() {
    let conn = handshake(A::F1);
    assert!(icmp_in_window(&conn, conn.server_next));
    assert!(icmp_in_window(&conn, conn.server_next - 1_400));
    assert!(icmp_in_window(
        &conn,
        conn.server_next.wrapping_sub(MAX_WINDOW)
    ));
    assert!(!icmp_in_window(&conn, conn.server_next + 1));
    assert!(!icmp_in_window(
        &conn,
        conn.server_next.wrapping_sub(MAX_WINDOW + 1)
    ));
}

both_families!(sequence_numbers_wrap);
fn sequence_numbers_wrap<A: Scenarios>() {
    assert!(after(5, u32::MAX - 5));
    assert!(!after(u32::MAX - 5, 5));
    let conn = Conn {
        client_next: u32::MAX - 10,
        ..handshake(A::F1)
    };
    let ack = seg(TCP_ACK, conn.server_next, 89, 0);
    let OnReply::Established {
        update: Some(c), ..
    } = on_reply(&ack, &only_conn(Some(&conn)), 40, TIMEOUT)
    else {
        panic!("updated")
    };
    assert_eq!(c.client_next, 89);
}

both_families!(only_an_exactly_in_sequence_rst_ends_the_connection);
fn only_an_exactly_in_sequence_rst_ends_the_connection<A: Scenarios>() {
    let conn = handshake(A::F1);
    let rst = |seq| seg(TCP_RST | TCP_ACK, seq, 0, 0);
    assert_eq!(
        on_request(&rst(conn.client_next), A::F1, Some(&conn), || true),
        OnRequest::Reset
    );
    for off in [1u32, 100, 65_535, 1 << 31] {
        let decision = on_request(
            &rst(conn.client_next.wrapping_add(off)),
            A::F1,
            Some(&conn),
            || true,
        );
        assert!(
            matches!(decision, OnRequest::IgnoredReset(_)),
            "client RST {off} ahead: {decision:?}"
        );
    }
    assert_eq!(
        on_reply(&rst(conn.server_next), &only_conn(Some(&conn)), 40, TIMEOUT),
        OnReply::Reset {
            frontend: A::F1,
            slot: 3
        }
    );
    assert_eq!(
        on_reply(
            &rst(conn.server_next + 1),
            &only_conn(Some(&conn)),
            40,
            TIMEOUT
        ),
        OnReply::IgnoredReset {
            frontend: A::F1,
            slot: 3
        }
    );
}

both_families!(replies_of_connections_nobody_tracked_are_left_alone);
fn replies_of_connections_nobody_tracked_are_left_alone<A: Scenarios>() {
    let nothing = Found::<'_, Endpoint<A>>::default();
    // A backend answering an in-cluster peer: no entry, no rewrite.
    assert_eq!(
        on_reply(&seg(TCP_ACK, 1, 2, 100), &nothing, 1, TIMEOUT),
        OnReply::Untracked
    );
    assert_eq!(
        on_reply(&seg(TCP_SYN | TCP_ACK, 9, 12_345, 0), &nothing, 1, TIMEOUT),
        OnReply::Untracked
    );
}

both_families!(a_refused_handshake_is_restored_and_forgotten);
fn a_refused_handshake_is_restored_and_forgotten<A: Scenarios>() {
    let h = half(A::F2, CLIENT_ISN);
    let found = Found {
        half: Some(&h),
        ..Found::default()
    };
    assert_eq!(
        on_reply(
            &seg(TCP_RST | TCP_ACK, 0, CLIENT_ISN + 1, 0),
            &found,
            1,
            TIMEOUT
        ),
        OnReply::Refuse {
            frontend: A::F2,
            slot: 3
        }
    );
}

both_families!(a_claimed_connection_the_server_resets_at_once_is_restored_and_forgotten);
fn a_claimed_connection_the_server_resets_at_once_is_restored_and_forgotten<A: Scenarios>() {
    let c = claim(A::F2, 10);
    let found = Found {
        claim: Some(&c),
        ..Found::default()
    };
    assert_eq!(
        on_reply(
            &seg(TCP_RST | TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 0),
            &found,
            11,
            TIMEOUT
        ),
        OnReply::ClaimReset {
            frontend: A::F2,
            slot: 3
        }
    );
}

both_families!(a_server_that_closes_at_once_confirms_a_half_closed_connection);
fn a_server_that_closes_at_once_confirms_a_half_closed_connection<A: Scenarios>() {
    let c = claim(A::F1, 10);
    let found = Found {
        claim: Some(&c),
        ..Found::default()
    };
    let fin = seg(TCP_FIN | TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 0);
    let OnReply::Confirm { conn, .. } = on_reply(&fin, &found, 11, TIMEOUT) else {
        panic!("confirmed")
    };
    assert_eq!(conn.flags, CONN_FIN_SERVER);
    assert!(half_closed(&conn));
    assert_eq!(conn.server_next, SERVER_ISN + 2);
}

both_families!(a_claim_is_written_once_and_renewed_at_most_once_a_second);
fn a_claim_is_written_once_and_renewed_at_most_once_a_second<A: Scenarios>() {
    let c = claim(A::F1, 10 * SECOND);
    assert!(claim_needs_write(None, A::F1, 0));
    assert!(!claim_needs_write(
        Some(&c),
        A::F1,
        10 * SECOND + 999_999_999
    ));
    assert!(claim_needs_write(Some(&c), A::F1, 11 * SECOND));
    assert!(claim_needs_write(Some(&c), A::F2, 10 * SECOND));
    assert!(claim_fresh(&c, 10 * SECOND, 0));
    assert!(!claim_fresh(&c, 10 * SECOND + 1, 0));
}

both_families!(which_tables_a_reply_reads);
fn which_tables_a_reply_reads<A: Scenarios>() {
    let live = handshake(A::F1);
    let data = seg(TCP_ACK, live.server_next, live.client_next, 100);
    assert_eq!(reply_reads(&data, Some(&live)), (false, false));
    assert_eq!(reply_reads(&data, None::<&ConnOf<A>>), (false, true));
    assert_eq!(reply_reads(&syn_ack(), None::<&ConnOf<A>>), (true, false));
    let rst = seg(TCP_RST | TCP_ACK, 0, CLIENT_ISN + 1, 0);
    assert_eq!(reply_reads(&rst, None::<&ConnOf<A>>), (true, true));
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..live
    };
    assert_eq!(reply_reads(&rst, Some(&closed)), (true, true));
}

both_families!(skipping_a_lookup_reply_reads_rules_out_never_changes_a_decision);
fn skipping_a_lookup_reply_reads_rules_out_never_changes_a_decision<A: Scenarios>() {
    let live = handshake(A::F1);
    let reopening = Conn {
        flags: CONN_REOPENING,
        ..live
    };
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..live
    };
    let h = half(A::F2, CLIENT_ISN);
    let c = claim(A::F2, 10);
    let segments = [
        syn_ack(),
        banner(),
        seg(TCP_RST | TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 0),
        seg(TCP_ACK, live.server_next, live.client_next, 0),
        seg(TCP_FIN | TCP_ACK, live.server_next, live.client_next, 0),
        seg(TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, 0),
    ];
    for conn in [None, Some(&live), Some(&reopening), Some(&closed)] {
        for s in &segments {
            let all = Found {
                conn,
                half: Some(&h),
                claim: Some(&c),
            };
            for claim_found in [false, true] {
                let all = Found {
                    claim: claim_found.then_some(&c),
                    ..all
                };
                // The kernel programs read the half-open table for a bare
                // ACK only once they found no claim.
                let (read_half, read_claim) = reply_reads(s, conn);
                let read_half = read_half || (!claim_found && answers_handshake(s, conn));
                let some = Found {
                    conn,
                    half: read_half.then_some(&h),
                    claim: (read_claim && claim_found).then_some(&c),
                };
                assert_eq!(
                    on_reply(s, &all, 11, TIMEOUT),
                    on_reply(s, &some, 11, TIMEOUT),
                    "{s:?} over {conn:?}, claim found: {claim_found}"
                );
            }
        }
    }
}

both_families!(only_the_syn_that_made_the_half_open_entry_carries_its_frontend);
fn only_the_syn_that_made_the_half_open_entry_carries_its_frontend<A: Scenarios>() {
    let h = half(A::F2, CLIENT_ISN);
    assert_eq!(translated_syn(&syn(), Some(&h)), Some(A::F2));
    // A SYN of the same 4-tuple with another ISN: a pod's own, while
    // spoofed SYNs wrote the entry.
    let other = seg(TCP_SYN, CLIENT_ISN + 77, 0, 0);
    assert_eq!(translated_syn(&other, Some(&h)), None);
    assert_eq!(translated_syn(&syn(), None::<&HalfOpen<Endpoint<A>>>), None);
    let syn_ack = seg(TCP_SYN | TCP_ACK, CLIENT_ISN, 0, 0);
    assert_eq!(translated_syn(&syn_ack, Some(&h)), None);
}

#[test]
fn the_syn_ack_names_the_clients_isn() {
    for isn in [CLIENT_ISN, 0, u32::MAX] {
        let syn_ack = seg(TCP_SYN | TCP_ACK, SERVER_ISN, isn.wrapping_add(1), 0);
        let refusal = seg(TCP_RST | TCP_ACK, 0, isn.wrapping_add(1), 0);
        assert_eq!(reply_isn(&syn_ack), isn);
        assert_eq!(reply_isn(&refusal), isn);
    }
}

both_families!(the_sweep_keeps_a_shell_idle_for_8_hours_and_ends_one_idle_past_the_timeout);
fn the_sweep_keeps_a_shell_idle_for_8_hours_and_ends_one_idle_past_the_timeout<A: Scenarios>() {
    let conn = Conn {
        last_seen_ns: HOUR,
        ..handshake(A::F1)
    };
    let (idle, close) = (24 * HOUR, 10 * SECOND);
    assert_eq!(expiry(&conn, 9 * HOUR, idle, close), None);
    assert_eq!(expiry(&conn, 25 * HOUR, idle, close), Some(Expiry::Idle));
    let closed = Conn {
        flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
        ..conn
    };
    assert_eq!(
        expiry(&closed, HOUR + 10 * SECOND, idle, close),
        Some(Expiry::Closed)
    );
}

both_families!(a_half_closed_connection_quiet_for_two_minutes_is_swept_and_an_open_one_is_not);
fn a_half_closed_connection_quiet_for_two_minutes_is_swept_and_an_open_one_is_not<A: Scenarios>() {
    let (idle, close) = (24 * HOUR, 10 * SECOND);
    for flags in [CONN_FIN_SERVER, CONN_FIN_CLIENT] {
        let c = Conn {
            flags,
            last_seen_ns: HOUR,
            ..handshake(A::F1)
        };
        assert_eq!(expiry(&c, HOUR + 119 * SECOND, idle, close), None, "{c:?}");
        assert_eq!(
            expiry(&c, HOUR + 120 * SECOND, idle, close),
            Some(Expiry::Idle),
            "{c:?}"
        );
    }
    let c = Conn {
        flags: CONN_FIN_SERVER,
        last_seen_ns: HOUR,
        ..handshake(A::F1)
    };
    assert_eq!(
        expiry(&c, HOUR + 30 * SECOND, 30 * SECOND, close),
        Some(Expiry::Idle),
        "a shorter idle timeout still wins"
    );
}

both_families!(a_client_rst_ahead_is_held_without_touching_the_clock);
fn a_client_rst_ahead_is_held_without_touching_the_clock<A: Scenarios>() {
    let c = Conn {
        flags: CONN_FIN_SERVER,
        ..handshake(A::F1)
    };
    let rst = seg(TCP_RST, c.client_next + 5, 0, 0);
    let OnRequest::IgnoredReset(Some(held)) = on_request(&rst, A::F1, Some(&c), || true) else {
        panic!("a RST ahead is held")
    };
    assert_ne!(held.flags & CONN_RST_PENDING, 0);
    assert_eq!(held.last_seen_ns, c.last_seen_ns);
}
