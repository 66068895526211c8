//! Writing an updated entry back into [`CONNS`](crate::maps::CONNS) while
//! the other direction may be updating it on another CPU. Both directions
//! read the entry, decide, and write back; a write of the whole entry
//! would undo what the other wrote in between (a client's pending FIN
//! racing the server's FIN would drop `CONN_FIN_SERVER`). So only what the
//! decision changed is written: each changed field with one aligned store
//! (the fields each direction moves are its own: both next sequence
//! numbers and the clock the server's segments, the pending FIN and RST
//! the client's), and
//! the flags, which both directions move, with atomic OR and AND of the
//! bits that changed. A field that a flag makes count is written before the
//! flag (a pending FIN's end before [`CONN_FIN_PENDING`]). The OR returns
//! the flags it found, so exactly one of two racing writes learns that it
//! closed the connection (its client then holds one connection less).
//!
//! [`CONN_FIN_PENDING`]: crate::maps::CONN_FIN_PENDING

use crate::maps::{CONN_FIN_CLIENT, CONN_FIN_SERVER, Conn, Endpoint};

/// The two atomic operations on a stored entry's flags: the kernel
/// programs' (BPF atomics) and the host's, for the tests. `E` is the
/// family's [`Endpoint`].
pub trait AtomicFlags<E = Endpoint> {
    /// Sets `bits` in the flags of the entry at `conn`, atomically, and
    /// returns the flags it found.
    ///
    /// # Safety
    /// `conn` points at a [`Conn`] valid for writes.
    unsafe fn or(conn: *mut Conn<E>, bits: u32) -> u32;
    /// Keeps only `bits` of the flags of the entry at `conn`, atomically.
    ///
    /// # Safety
    /// As for [`AtomicFlags::or`].
    unsafe fn and(conn: *mut Conn<E>, bits: u32);
}

/// Writes into the entry at `stored` what `next` changed of `read` (the
/// copy the decision was made on). True if this write closed the
/// connection: it set the second of the two FINs.
///
/// # Safety
/// `stored` points at a [`Conn`] valid for writes (a map value, for the
/// rest of the program run).
#[inline(always)]
#[must_use = "a connection this write closed no longer counts for its client"]
pub unsafe fn store<F: AtomicFlags<E>, E>(
    stored: *mut Conn<E>,
    read: &Conn<E>,
    next: &Conn<E>,
) -> bool {
    const FINS: u32 = CONN_FIN_CLIENT | CONN_FIN_SERVER;
    let mut closed = false;
    // SAFETY: the caller vouches for `stored`; each write is one field.
    unsafe {
        if next.client_next != read.client_next {
            (*stored).client_next = next.client_next;
        }
        if next.server_next != read.server_next {
            (*stored).server_next = next.server_next;
        }
        if next.client_fin_end != read.client_fin_end {
            (*stored).client_fin_end = next.client_fin_end;
        }
        if next.client_rst != read.client_rst {
            (*stored).client_rst = next.client_rst;
        }
        if next.last_seen_ns != read.last_seen_ns {
            (*stored).last_seen_ns = next.last_seen_ns;
        }
        let set = next.flags & !read.flags;
        if set != 0 {
            let found = F::or(stored, set);
            closed = found & FINS != FINS && (found | set) & FINS == FINS;
        }
        let cleared = read.flags & !next.flags;
        if cleared != 0 {
            F::and(stored, !cleared);
        }
    }
    closed
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::{
        conntrack::{
            Found, OnReply, OnRequest, Segment, TCP_ACK, TCP_FIN, on_reply, on_request,
            tests::{ConnOf, SECOND, Scenarios, both_families, seg},
        },
        maps::{CONN_FIN_SERVER, CONN_REOPENING},
    };

    struct Host;

    impl<E> AtomicFlags<E> for Host {
        unsafe fn or(conn: *mut Conn<E>, bits: u32) -> u32 {
            // SAFETY: the caller's promise; the field is aligned.
            unsafe { AtomicU32::from_ptr(&raw mut (*conn).flags) }.fetch_or(bits, Ordering::Relaxed)
        }

        unsafe fn and(conn: *mut Conn<E>, bits: u32) {
            // SAFETY: as above.
            unsafe { AtomicU32::from_ptr(&raw mut (*conn).flags) }
                .fetch_and(bits, Ordering::Relaxed);
        }
    }

    fn conn<A: Scenarios>() -> ConnOf<A> {
        Conn {
            frontend: A::F1,
            slot: 3,
            client_next: 1_001,
            server_next: 5_001,
            ..Conn::ZERO
        }
    }

    fn from_client<A: Scenarios>(read: &ConnOf<A>, s: &Segment) -> ConnOf<A> {
        match on_request(s, A::F1, Some(read), || true) {
            OnRequest::Established { update: u, .. } | OnRequest::IgnoredReset(u) => {
                u.unwrap_or(*read)
            }
            other => panic!("{other:?}"),
        }
    }

    fn from_server<A: Scenarios>(read: &ConnOf<A>, s: &Segment, now: u64) -> ConnOf<A> {
        let found = Found {
            conn: Some(read),
            ..Found::default()
        };
        match on_reply(s, &found, now, 0) {
            OnReply::Established { update, .. } => update.unwrap_or(*read),
            other => panic!("{other:?}"),
        }
    }

    /// Both directions read `read`, decide, and write back, in both orders:
    /// what is stored after each, and how many writes said they closed it.
    fn race_closing<A: Scenarios>(
        read: ConnOf<A>,
        client: ConnOf<A>,
        server: ConnOf<A>,
    ) -> [(ConnOf<A>, usize); 2] {
        [[&client, &server], [&server, &client]].map(|order| {
            let mut stored = read;
            let mut closed = 0;
            for next in order {
                // SAFETY: a local entry.
                closed += usize::from(unsafe { store::<Host, _>(&mut stored, &read, next) });
            }
            (stored, closed)
        })
    }

    fn race<A: Scenarios>(read: ConnOf<A>, client: ConnOf<A>, server: ConnOf<A>) -> [ConnOf<A>; 2] {
        race_closing(read, client, server).map(|(stored, _)| stored)
    }

    both_families!(of_two_writes_that_close_a_connection_exactly_one_says_so);
    fn of_two_writes_that_close_a_connection_exactly_one_says_so<A: Scenarios>() {
        // The server acknowledges the client's pending FIN and sends its
        // own; both of its segments were decided on the same copy.
        let read = Conn {
            flags: crate::maps::CONN_FIN_PENDING,
            client_fin_end: 1_002,
            ..conn::<A>()
        };
        let acked = from_server(&read, &seg(TCP_ACK, read.server_next, 1_002, 0), 8);
        let fin = from_server(
            &read,
            &seg(TCP_FIN | TCP_ACK, read.server_next, 1_002, 0),
            9,
        );
        assert_eq!(
            fin.flags & (CONN_FIN_CLIENT | CONN_FIN_SERVER),
            CONN_FIN_CLIENT | CONN_FIN_SERVER
        );
        for (stored, closed) in race_closing(read, acked, fin) {
            assert!(crate::conntrack::closing(&stored), "{stored:?}");
            assert_eq!(closed, 1, "{stored:?}");
        }
        // A write on a closed entry closes nothing.
        let closed = Conn {
            flags: CONN_FIN_CLIENT | CONN_FIN_SERVER,
            ..conn::<A>()
        };
        let again = Conn {
            flags: closed.flags | CONN_REOPENING,
            ..closed
        };
        let mut stored = closed;
        // SAFETY: a local entry.
        assert!(!unsafe { store::<Host, _>(&mut stored, &closed, &again) });
    }

    both_families!(a_clients_pending_fin_racing_the_servers_fin_loses_neither);
    fn a_clients_pending_fin_racing_the_servers_fin_loses_neither<A: Scenarios>() {
        let read = conn::<A>();
        let client = from_client(
            &read,
            &seg(TCP_FIN | TCP_ACK, read.client_next, read.server_next, 0),
        );
        let server = from_server(
            &read,
            &seg(TCP_FIN | TCP_ACK, read.server_next, read.client_next, 40),
            5 * SECOND,
        );
        assert_eq!(server.last_seen_ns, 5 * SECOND);
        for stored in race(read, client, server) {
            assert_eq!(
                stored.flags,
                CONN_FIN_SERVER | crate::maps::CONN_FIN_PENDING,
                "{stored:?}"
            );
            assert_eq!(stored.server_next, read.server_next + 41);
            assert_eq!(stored.last_seen_ns, 5 * SECOND);
        }
    }

    both_families!(a_pending_fin_racing_the_servers_data_loses_neither);
    fn a_pending_fin_racing_the_servers_data_loses_neither<A: Scenarios>() {
        let read = conn::<A>();
        let client = from_client(
            &read,
            &seg(TCP_FIN | TCP_ACK, read.client_next, read.server_next, 10),
        );
        let server = from_server(
            &read,
            &seg(TCP_ACK, read.server_next, read.client_next, 500),
            8,
        );
        for stored in race(read, client, server) {
            assert_eq!(stored.client_fin_end, read.client_next + 11, "{stored:?}");
            assert_eq!(stored.flags, client.flags, "{stored:?}");
            assert_eq!(stored.server_next, read.server_next + 500);
        }
    }

    both_families!(the_servers_answer_clears_only_the_reopening_it_saw);
    fn the_servers_answer_clears_only_the_reopening_it_saw<A: Scenarios>() {
        // The server's segment clears REOPENING; a client FIN noted at
        // the same time stays pending.
        let read = Conn {
            flags: CONN_REOPENING,
            ..conn::<A>()
        };
        let client = from_client(
            &read,
            &seg(TCP_FIN | TCP_ACK, read.client_next, read.server_next, 0),
        );
        let server = from_server(
            &read,
            &seg(TCP_ACK, read.server_next, read.client_next, 0),
            8,
        );
        assert_eq!(server.flags, 0);
        for stored in race(read, client, server) {
            assert_eq!(stored.flags, client.flags & !CONN_REOPENING, "{stored:?}");
        }
    }
}
