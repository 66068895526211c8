//! How many connection lines the log takes: for each class of line, a
//! token bucket of `--conn-log-rate` lines a second with a burst of as
//! many, so that a flood cannot fill the disk. The classes have a budget
//! each because a flood of forged SYNs produces refused lines only: it
//! must never spend the lines of real logins.

use std::time::Instant;

/// A class of lines with a budget of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Connections a server answered: accepted and closed. Each needs a
    /// real client that completed a handshake.
    Connection,
    /// SYNs refused by an allowlist or a rate: anyone can forge them.
    Refused,
}

/// One budget per [`Class`].
#[derive(Debug)]
pub struct Budgets {
    connection: Budget,
    refused: Budget,
}

impl Budgets {
    pub fn new(rate: u32, now: Instant) -> Self {
        Self {
            connection: Budget::new(rate, now),
            refused: Budget::new(rate, now),
        }
    }

    /// Whether one more line of `class` may go out at `now`.
    pub fn allow(&mut self, class: Class, now: Instant) -> bool {
        match class {
            Class::Connection => self.connection.allow(now),
            Class::Refused => self.refused.allow(now),
        }
    }
}

#[derive(Debug)]
struct Budget {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Budget {
    fn new(rate: u32, now: Instant) -> Self {
        let rate = f64::from(rate.max(1));
        Self {
            rate,
            tokens: rate,
            last: now,
        }
    }

    /// Whether one more line may go out at `now`.
    fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_of_the_rate_goes_then_the_rate_itself() {
        let t0 = Instant::now();
        let mut b = Budget::new(10, t0);
        let first = (0..25).filter(|_| b.allow(t0)).count();
        assert_eq!(first, 10);
        // Five seconds at 100 attempts a second: 10 a second get through.
        let through = (1..=500)
            .filter(|i| b.allow(t0 + Duration::from_millis(10 * i)))
            .count();
        assert!((49..=51).contains(&through), "{through}");
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

    #[test]
    fn a_flood_of_refused_lines_leaves_the_connections_budget_whole() {
        let t0 = Instant::now();
        let mut b = Budgets::new(10, t0);
        // Ten seconds of 1,000 refused lines a second, and a login a second
        // among them.
        let (mut refused, mut logins) = (0, 0);
        for ms in 0..10_000u64 {
            let now = t0 + Duration::from_millis(ms);
            refused += usize::from(b.allow(Class::Refused, now));
            if ms % 1000 == 500 {
                logins += usize::from(b.allow(Class::Connection, now));
            }
        }
        assert_eq!(logins, 10, "every login's line");
        assert!((100..=111).contains(&refused), "{refused}");
    }
}
