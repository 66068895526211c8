//! When the leader's next full pass is due because writes failed: after a
//! backoff that grows with each failed pass, or soon after a create found
//! its Service name taken (that frees up without any event the watches
//! see). Passes around later changes in between do not cancel it; a full
//! pass without failures does.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder as _, ExponentialBuilder};

/// How often creates blocked by someone else's Service of the same name are
/// tried again.
const BLOCKED_RETRY: Duration = Duration::from_secs(2);

/// Exponential backoff with jitter, from 200 ms to 30 s.
fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build()
}

pub struct Retry {
    at: Option<Instant>,
    backoff: Box<dyn Iterator<Item = Duration> + Send>,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            at: None,
            backoff: Box::new(backoff()),
        }
    }
}

impl Retry {
    /// Notes how a pass that ended at `now` went (`full`: it planned for
    /// everything).
    pub fn after(&mut self, failures: usize, blocked: usize, full: bool, now: Instant) {
        if failures > 0 {
            self.at = self.backoff.next().map(|delay| now + delay);
        } else if blocked > 0 {
            let soon = now + BLOCKED_RETRY;
            self.at = Some(self.at.map_or(soon, |at| at.min(soon)));
        } else if full {
            *self = Self::default();
        }
    }

    /// How long until the retry is due, if one is.
    pub fn due_in(&self, now: Instant) -> Option<Duration> {
        self.at.map(|at| at.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_retried_after_a_backoff_that_only_a_clean_full_pass_ends() {
        let t0 = Instant::now();
        let mut retry = Retry::default();
        assert_eq!(retry.due_in(t0), None);
        retry.after(1, 0, false, t0);
        let first = retry.due_in(t0).expect("a retry is due");
        assert!(first <= Duration::from_millis(400), "{first:?}");
        retry.after(0, 0, false, t0);
        assert_eq!(
            retry.due_in(t0),
            Some(first),
            "a pass around a change keeps it"
        );
        retry.after(0, 0, true, t0);
        assert_eq!(retry.due_in(t0), None, "a clean full pass ends it");
    }

    #[test]
    fn a_taken_name_is_tried_again_soon() {
        let t0 = Instant::now();
        let mut retry = Retry::default();
        retry.after(0, 1, true, t0);
        assert_eq!(retry.due_in(t0), Some(BLOCKED_RETRY));
    }
}
