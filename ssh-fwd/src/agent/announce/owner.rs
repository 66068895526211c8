//! One SSH IP's Lease as one node sees it: whether this node answers ARP
//! for it. Pure: the caller reads the Lease (from its watch), makes the
//! writes this asks for, and reports how they went.
//!
//! - Only a ready node (attached, synced, an external interface up)
//!   takes the Lease; one that stops being ready gives it up.
//! - A holder renews every `--announce-renew`. One that cannot renew
//!   keeps answering (an API outage must not take the SSH IP down) until
//!   it hears another MAC claim the SSH IP on the segment, or the API
//!   shows another holder.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;

use crate::k8s::lease::{Observed, Step, decide};

/// What to do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Create,
    /// Write the Lease with us as holder (a takeover).
    Take,
    Renew,
    /// Hand the Lease back (holder cleared) and stop answering.
    Release,
    /// Stop answering: another node holds it, or was heard announcing.
    Withdraw,
}

#[derive(Debug)]
pub struct Owner {
    me: String,
    renew: Duration,
    observed: Observed,
    /// This node answers for the SSH IP.
    pub held: bool,
    /// When the last write that made or kept us holder was sent.
    pub renewed: Option<Instant>,
    /// A take failed (the API away): no other try before this. When the
    /// API comes back, the holder's renewal, retried all along, comes
    /// first, and the SSH IP does not move for nothing.
    hold_off: Option<Instant>,
}

impl Owner {
    pub fn new(me: &str, renew: Duration) -> Self {
        Self {
            me: me.to_owned(),
            renew,
            observed: Observed::default(),
            held: false,
            renewed: None,
            hold_off: None,
        }
    }

    /// A Create or Take was refused or not answered, at `now`.
    pub fn take_failed(&mut self, now: Instant, duration: Duration) {
        self.hold_off = Some(now + duration);
    }

    /// The step for the Lease as last read (`synced`: the watch has listed
    /// once, so a missing Lease is really missing), given readiness and
    /// whether another MAC claimed the SSH IP since our last renewal.
    pub fn next(
        &mut self,
        lease: Option<&LeaseSpec>,
        synced: bool,
        ready: bool,
        heard_other: bool,
        now: Instant,
    ) -> Action {
        let step = decide(lease, &self.me, &mut self.observed, now);
        if !ready {
            return if self.held {
                Action::Release
            } else {
                Action::Nothing
            };
        }
        let held_off = self.hold_off.is_some_and(|until| now < until);
        match step {
            Step::Create | Step::Take if held_off => Action::Nothing,
            Step::Create if synced => Action::Create,
            Step::Create => Action::Nothing,
            Step::Take => Action::Take,
            Step::Renew if !self.held => {
                // Ours from before a restart: answer again, and say so.
                self.held = true;
                Action::Renew
            }
            Step::Renew if heard_other && self.renew_failing(now) => Action::Withdraw,
            Step::Renew if self.renewed.is_none_or(|at| now >= at + self.renew) => Action::Renew,
            Step::Renew => Action::Nothing,
            Step::Wait { .. } if self.held => Action::Withdraw,
            Step::Wait { .. } => Action::Nothing,
        }
    }

    /// A renewal is overdue: the last good one is older than two periods.
    fn renew_failing(&self, now: Instant) -> bool {
        self.renewed.is_none_or(|at| now >= at + self.renew * 2)
    }

    /// A write that makes or keeps us holder went through; it was sent at
    /// `sent`.
    pub fn wrote(&mut self, sent: Instant) {
        self.held = true;
        self.renewed = Some(sent);
    }

    /// We answer no more.
    pub fn withdrew(&mut self) {
        self.held = false;
        self.renewed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENEW: Duration = Duration::from_millis(500);

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(2),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_ready_node_creates_a_missing_lease_only_once_the_watch_has_listed() {
        let (mut a, now) = (Owner::new("a", RENEW), Instant::now());
        assert_eq!(a.next(None, false, true, false, now), Action::Nothing);
        assert_eq!(a.next(None, true, true, false, now), Action::Create);
        assert_eq!(
            a.next(None, true, false, false, now),
            Action::Nothing,
            "not ready"
        );
    }

    #[test]
    fn a_holder_renews_each_period_and_a_standby_takes_over_after_the_duration() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Owner::new("a", RENEW), Owner::new("b", RENEW));
        a.wrote(t0);
        let lease = held_by("a");
        assert_eq!(a.next(Some(&lease), true, true, false, t0), Action::Nothing);
        assert_eq!(
            a.next(Some(&lease), true, true, false, t0 + RENEW),
            Action::Renew
        );
        assert_eq!(b.next(Some(&lease), true, true, false, t0), Action::Nothing);
        let expired = t0 + Duration::from_secs(2);
        assert_eq!(
            b.next(Some(&lease), true, true, false, expired),
            Action::Take
        );
        // The Lease shows b now: a stops answering.
        assert_eq!(
            a.next(Some(&held_by("b")), true, true, false, expired),
            Action::Withdraw
        );
    }

    #[test]
    fn a_holder_that_cannot_renew_answers_until_it_hears_another_node() {
        let t0 = Instant::now();
        let mut a = Owner::new("a", RENEW);
        a.wrote(t0);
        let lease = held_by("a");
        let late = t0 + RENEW * 4;
        assert_eq!(a.next(Some(&lease), true, true, false, late), Action::Renew);
        assert!(a.held, "no renewal, nobody heard: still answering");
        assert_eq!(
            a.next(Some(&lease), true, true, true, late),
            Action::Withdraw
        );
        // Heard while renewing fine: a neighbour's mistake, not a takeover.
        a.wrote(late);
        assert_eq!(
            a.next(Some(&lease), true, true, true, late),
            Action::Nothing
        );
    }

    #[test]
    fn a_node_that_is_not_ready_gives_the_lease_up_and_takes_none() {
        let t0 = Instant::now();
        let mut a = Owner::new("a", RENEW);
        a.wrote(t0);
        assert_eq!(
            a.next(Some(&held_by("a")), true, false, false, t0),
            Action::Release
        );
        a.withdrew();
        let free = held_by("");
        assert_eq!(a.next(Some(&free), true, false, false, t0), Action::Nothing);
        assert_eq!(a.next(Some(&free), true, true, false, t0), Action::Take);
    }

    #[test]
    fn a_standby_whose_take_failed_waits_a_duration_before_the_next() {
        let t0 = Instant::now();
        let mut b = Owner::new("b", RENEW);
        let free = held_by("");
        assert_eq!(b.next(Some(&free), true, true, false, t0), Action::Take);
        b.take_failed(t0, Duration::from_secs(2));
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(
            b.next(Some(&free), true, true, false, soon),
            Action::Nothing
        );
        let later = t0 + Duration::from_secs(2);
        assert_eq!(b.next(Some(&free), true, true, false, later), Action::Take);
    }

    #[test]
    fn a_lease_still_ours_after_a_restart_is_answered_for_again() {
        let mut a = Owner::new("a", RENEW);
        assert_eq!(
            a.next(Some(&held_by("a")), true, true, false, Instant::now()),
            Action::Renew
        );
        assert!(a.held);
    }
}
