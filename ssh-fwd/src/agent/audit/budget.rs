//! How many connection lines the log takes: a token bucket of
//! `--conn-log-rate` lines a second with a burst of as many, so that a
//! flood of refused SYNs cannot fill the disk, and a count of the lines it
//! held back, told every so often instead.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Budget {
    rate: f64,
    tokens: f64,
    last: Instant,
    held_back: u64,
}

impl Budget {
    pub fn new(rate: u32, now: Instant) -> Self {
        let rate = f64::from(rate.max(1));
        Self {
            rate,
            tokens: rate,
            last: now,
            held_back: 0,
        }
    }

    /// Whether one more line may go out at `now`; if not, it is counted.
    pub fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.held_back += 1;
            false
        }
    }

    /// The lines held back since the last call.
    pub fn take_held_back(&mut self) -> u64 {
        std::mem::take(&mut self.held_back)
    }
}

/// How often the number of lines held back is told.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_the_rate_goes_then_the_rate_itself() {
        let t0 = Instant::now();
        let mut b = Budget::new(10, t0);
        let first = (0..25).filter(|_| b.allow(t0)).count();
        assert_eq!(first, 10);
        assert_eq!(b.take_held_back(), 15);
        assert_eq!(b.take_held_back(), 0);
        // Five seconds at 100 attempts a second: 10 a second get through.
        let through = (1..=500)
            .filter(|i| b.allow(t0 + Duration::from_millis(10 * i)))
            .count();
        assert!((49..=51).contains(&through), "{through}");
        assert_eq!(b.take_held_back(), 500 - through as u64);
    }

    #[test]
    fn a_quiet_log_refills_only_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = Budget::new(5, t0);
        let later = t0 + Duration::from_secs(3600);
        assert_eq!((0..20).filter(|_| b.allow(later)).count(), 5);
    }

    #[test]
    fn a_clock_going_back_grants_nothing() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = Budget::new(2, t0);
        assert!(b.allow(t0) && b.allow(t0));
        assert!(!b.allow(t0 - Duration::from_secs(5)));
        assert!(!b.allow(t0));
    }
}
