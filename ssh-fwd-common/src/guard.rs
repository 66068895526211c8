//! The per-source limit on new connections as a pure decision: a token
//! bucket kept as one timestamp (the generic cell rate algorithm), so the
//! kernel reads and writes a single `u64` per SYN and never divides.
//!
//! A bucket of `burst` tokens refilled at `rate` a second is the same as a
//! schedule: each new connection is due one interval (`1 s / rate`) after
//! the previous one, and a source may run ahead of that schedule by at most
//! `burst` intervals. `due` is when its next connection is on schedule;
//! one in the past is a full bucket.

use crate::maps::Guard;

/// Whether `a` is later than `b` on a clock that may wrap: the difference
/// read as signed. Times more than 292 years apart compare wrongly, which
/// a bucket never sees.
const fn later(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) > 0
}

/// The decision on a new connection from a source whose bucket says `due`
/// (`None`: no bucket, a full one) at `now`, under `guard`. `Some(due)`:
/// admitted, store `due`; `None`: over the rate, store nothing (a limited
/// SYN neither spends nor refills).
///
/// A `due` further ahead than the burst allows, which admitting never
/// stores (a guard lowered since, or an entry written under another
/// clock), is read as a full bucket: no source is stuck behind a schedule
/// its mapping no longer has.
pub const fn admit(due: Option<u64>, now: u64, guard: &Guard) -> Option<u64> {
    let start = match due {
        Some(d) if later(d, now) && d.wrapping_sub(now) <= guard.burst_ns => d,
        _ => now,
    };
    let next = start.wrapping_add(guard.interval_ns);
    if next.wrapping_sub(now) > guard.burst_ns {
        None
    } else {
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    /// How many of `attempts` SYNs, `gap` apart from `start`, are admitted.
    fn admitted(guard: &Guard, start: u64, gap: u64, attempts: u64) -> u64 {
        let mut due = None;
        let mut ok = 0;
        for i in 0..attempts {
            if let Some(d) = admit(due, start.wrapping_add(i * gap), guard) {
                due = Some(d);
                ok += 1;
            }
        }
        ok
    }

    #[test]
    fn a_new_source_gets_its_burst_at_once_and_no_more() {
        let g = Guard::new(20, 40);
        assert_eq!(admitted(&g, 5 * SEC, 0, 100), 40);
    }

    #[test]
    fn a_steady_source_gets_the_rate() {
        let g = Guard::new(20, 1);
        // 1000 SYNs a second for 10 s: 20 a second, plus the first.
        let got = admitted(&g, SEC, SEC / 1000, 10_000);
        assert!((200..=201).contains(&got), "{got}");
    }

    #[test]
    fn a_burst_refills_at_the_rate() {
        let g = Guard::new(10, 5);
        let mut due = None;
        for _ in 0..5 {
            due = admit(due, 0, &g);
        }
        assert!(admit(due, 0, &g).is_none(), "the burst is spent");
        // 100 ms later one token is back, and only one.
        let after = admit(due, SEC / 10, &g);
        assert!(after.is_some());
        assert!(admit(after, SEC / 10, &g).is_none());
        // A full second later the bucket is full again: 5 more.
        let mut due = after;
        let mut ok = 0;
        for _ in 0..10 {
            if let Some(d) = admit(due, 2 * SEC, &g) {
                due = Some(d);
                ok += 1;
            }
        }
        assert_eq!(ok, 5);
    }

    #[test]
    fn a_limited_syn_does_not_push_the_schedule_back() {
        let g = Guard::new(1, 1);
        let due = admit(None, 0, &g);
        for t in 1..100 {
            assert!(admit(due, t * SEC / 100, &g).is_none());
        }
        assert!(admit(due, SEC, &g).is_some());
    }

    #[test]
    fn the_clock_wrapping_changes_nothing() {
        let g = Guard::new(20, 40);
        let start = u64::MAX - SEC / 2;
        assert_eq!(admitted(&g, start, 0, 100), 40);
        let got = admitted(&Guard::new(20, 1), start, SEC / 1000, 10_000);
        assert!((200..=201).contains(&got), "{got}");
    }

    #[test]
    fn a_bucket_further_ahead_than_the_burst_is_read_as_full() {
        let g = Guard::new(10, 2);
        // Written under a slower guard, an hour ahead.
        let due = Some(3600 * SEC);
        assert_eq!(admit(due, 0, &g), Some(SEC / 10));
        // Within the burst, it is honoured.
        assert!(admit(Some(SEC / 5), 0, &g).is_none());
    }
}
