//! How many records of refused SYNs one CPU writes to the connection log
//! in a second. A spoofed flood at a guarded mapping sends millions of
//! SYNs a second, and each record takes the ring buffer's lock, shared by
//! every CPU; the agent logs at most `--conn-log-rate` lines a second
//! anyway. So each CPU writes at most that many a second, and counts the
//! rest; the SYNs themselves are counted per mapping all the same.

use crate::maps::RecordBudget;

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
    fn no_budget_writes_nothing() {
        let mut b = RecordBudget::default();
        assert!(!take(&mut b, WINDOW, 0));
    }
}
