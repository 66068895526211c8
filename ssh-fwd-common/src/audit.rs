//! How many records of refused SYNs the programs write to the connection
//! log. A spoofed flood at a guarded mapping sends millions of SYNs a
//! second, and each record takes the ring buffer's lock, shared by every
//! CPU; the agent logs at most `--conn-log-rate` refused lines a second
//! anyway. So each CPU writes at most that many a second ([`take`]), and
//! counts the rest; the SYNs themselves are counted per mapping all the
//! same.
//!
//! That alone does not keep room for the records of real connections: a
//! machine with many CPUs, a high `--conn-log-rate`, or an agent held up
//! for a few seconds (restarting, starved) lets refused records fill the
//! ring, and then a login's record finds no room. So refused records may
//! fill only part of the ring ([`refused_has_room`]); the rest is only
//! ever taken by accepted and closed connections, which need a real client
//! and a server's answer.

use crate::maps::{CONN_EVENTS_BYTES, RecordBudget};

/// How much of the ring records of refused SYNs may fill, in bytes: half.
/// The other half holds about 1,500 IPv4 records (1,000 IPv6 ones) of
/// connections between two reads of the agent.
pub const REFUSED_SHARE: u64 = CONN_EVENTS_BYTES as u64 / 2;

/// Whether a record of a refused SYN may go into a ring holding `pending`
/// bytes the agent has not read yet. Checked before the reservation, so
/// CPUs racing past it overshoot by at most a record each.
#[inline(always)]
pub const fn refused_has_room(pending: u64) -> bool {
    pending < REFUSED_SHARE
}

/// The window a budget counts in: 2^30 ns, about a second, found by a
/// shift (the programs divide by nothing).
pub const WINDOW_SHIFT: u32 = 30;

/// Whether one more record may be written at `now` (ns), with at most
/// `per_window` a window; counts it in `b` if so.
#[inline(always)]
pub fn take(b: &mut RecordBudget, now: u64, per_window: u64) -> bool {
    let window = now >> WINDOW_SHIFT;
    if b.window != window {
        b.window = window;
        b.used = 0;
    }
    if b.used >= per_window {
        return false;
    }
    b.used += 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: u64 = 1 << WINDOW_SHIFT;

    #[test]
    fn a_window_takes_its_budget_then_refuses_until_the_next() {
        let mut b = RecordBudget::default();
        let t = 5 * WINDOW + 10;
        assert_eq!((0..10).filter(|i| take(&mut b, t + i, 3)).count(), 3);
        assert!(!take(&mut b, t + WINDOW - 11, 3), "same window");
        assert!(take(&mut b, 6 * WINDOW, 3), "the next one");
        assert_eq!(b.used, 1);
    }

    #[test]
    fn refused_records_fill_at_most_half_the_ring() {
        assert!(refused_has_room(0));
        assert!(refused_has_room(REFUSED_SHARE - 1));
        assert!(!refused_has_room(REFUSED_SHARE));
        assert!(!refused_has_room(u64::from(CONN_EVENTS_BYTES)));
        assert_eq!(2 * REFUSED_SHARE, u64::from(CONN_EVENTS_BYTES));
    }

    #[test]
    fn no_budget_writes_nothing() {
        let mut b = RecordBudget::default();
        assert!(!take(&mut b, WINDOW, 0));
    }
}
