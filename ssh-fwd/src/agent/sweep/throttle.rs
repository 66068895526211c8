//! A counter's rise, told at most once a minute: what a log line about a
//! kernel counter needs, however fast the counter climbs.

use std::time::{Duration, Instant};

/// The shortest time between two lines.
pub const EVERY: Duration = Duration::from_secs(60);

/// What was told last.
#[derive(Debug, Default)]
pub struct Throttle {
    /// The counter at the last line (or at the start).
    counted: Option<u64>,
    at: Option<Instant>,
}

impl Throttle {
    /// How much `value` rose since the last line, if a line is due now. The
    /// first value read is history: what the counter held before this agent
    /// started is not told.
    pub fn rose(&mut self, now: Instant, value: u64) -> Option<u64> {
        let Some(counted) = self.counted else {
            self.counted = Some(value);
            return None;
        };
        if value <= counted || self.at.is_some_and(|at| now < at + EVERY) {
            return None;
        }
        self.counted = Some(value);
        self.at = Some(now);
        Some(value - counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rise_is_told_at_most_once_a_minute_and_nothing_is_lost_between() {
        let mut t = Throttle::default();
        let start = Instant::now();
        assert_eq!(t.rose(start, 40), None, "history");
        assert_eq!(t.rose(start, 40), None, "nothing new");
        assert_eq!(t.rose(start + Duration::from_secs(1), 140), Some(100));
        assert_eq!(t.rose(start + Duration::from_secs(30), 900), None);
        assert_eq!(t.rose(start + Duration::from_secs(62), 1_000), Some(860));
    }
}
