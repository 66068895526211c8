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
//! - A standby that sees no renewal for one and a half periods asks the
//!   segment who holds the SSH IP ([`PROBES`] ARP probes, a tenth of a
//!   period apart; an answer on a LAN takes well under a millisecond).
//!   A holder whose node is gone answers none of them, and is taken over
//!   then, without waiting for the Lease to expire; one that answers is
//!   alive with its API away, and keeps the SSH IP until the Lease
//!   expires.

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
    /// Take a Lease whose holder has not renewed for `quiet` and whose
    /// node answered none of our probes: it is gone.
    TakeFromSilent {
        holder: String,
        quiet: Duration,
    },
    /// Ask the segment who holds the SSH IP (an ARP probe).
    Probe,
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
    /// The check of a holder that stopped renewing.
    probe: Probe,
}

/// ARP probes sent to a silent holder before it counts as gone.
pub const PROBES: u32 = 3;

/// Where the check of a silent holder stands; each is about one reading
/// of the Lease, known by when it `expires`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Probe {
    #[default]
    Idle,
    Sent {
        expires: Instant,
        first: Instant,
        last: Instant,
        sent: u32,
    },
    /// It answered: alive, left alone until this reading expires.
    Answered { expires: Instant },
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
            probe: Probe::Idle,
        }
    }

    /// A Create or Take was refused or not answered, at `now`.
    pub fn take_failed(&mut self, now: Instant, duration: Duration) {
        self.hold_off = Some(now + duration);
    }

    /// The step for the Lease as last read (`synced`: the watch has listed
    /// once, so a missing Lease is really missing), given readiness,
    /// whether another MAC claimed the SSH IP since our last renewal, and
    /// when another machine last answered our probe for it.
    pub fn next(
        &mut self,
        lease: Option<&LeaseSpec>,
        synced: bool,
        ready: bool,
        heard_other: bool,
        answered: Option<Instant>,
        now: Instant,
    ) -> Action {
        let step = decide(lease, &self.me, &mut self.observed, now);
        if !matches!(step, Step::Wait { .. }) || !ready {
            self.probe = Probe::Idle;
        }
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
            Step::Wait { .. } if held_off => Action::Nothing,
            Step::Wait { holder, for_ } => {
                let seconds = lease.and_then(|l| l.lease_duration_seconds).unwrap_or(0);
                let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
                let quiet = duration.saturating_sub(for_);
                self.check_silent(holder, quiet, now + for_, answered, now)
            }
        }
    }

    /// A standby's look at a holder quiet for `quiet`, in the reading of
    /// the Lease that `expires` then.
    fn check_silent(
        &mut self,
        holder: String,
        quiet: Duration,
        expires: Instant,
        answered: Option<Instant>,
        now: Instant,
    ) -> Action {
        let every = self.renew / 10;
        let stale = match self.probe {
            Probe::Idle => true,
            Probe::Sent { expires: e, .. } | Probe::Answered { expires: e } => e != expires,
        };
        if stale {
            self.probe = Probe::Idle;
        }
        if quiet < self.renew * 3 / 2 {
            return Action::Nothing;
        }
        match self.probe {
            Probe::Idle => {
                self.probe = Probe::Sent {
                    expires,
                    first: now,
                    last: now,
                    sent: 1,
                };
                Action::Probe
            }
            Probe::Answered { .. } => Action::Nothing,
            Probe::Sent { first, .. } if answered.is_some_and(|at| at >= first) => {
                self.probe = Probe::Answered { expires };
                Action::Nothing
            }
            Probe::Sent { last, .. } if now < last + every => Action::Nothing,
            Probe::Sent { first, sent, .. } if sent < PROBES => {
                self.probe = Probe::Sent {
                    expires,
                    first,
                    last: now,
                    sent: sent + 1,
                };
                Action::Probe
            }
            Probe::Sent { .. } => {
                self.probe = Probe::Idle;
                Action::TakeFromSilent { holder, quiet }
            }
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
        assert_eq!(a.next(None, false, true, false, None, now), Action::Nothing);
        assert_eq!(a.next(None, true, true, false, None, now), Action::Create);
        assert_eq!(
            a.next(None, true, false, false, None, now),
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
        assert_eq!(
            a.next(Some(&lease), true, true, false, None, t0),
            Action::Nothing
        );
        assert_eq!(
            a.next(Some(&lease), true, true, false, None, t0 + RENEW),
            Action::Renew
        );
        assert_eq!(
            b.next(Some(&lease), true, true, false, None, t0),
            Action::Nothing
        );
        let expired = t0 + Duration::from_secs(2);
        assert_eq!(
            b.next(Some(&lease), true, true, false, None, expired),
            Action::Take
        );
        // The Lease shows b now: a stops answering.
        assert_eq!(
            a.next(Some(&held_by("b")), true, true, false, None, expired),
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
        assert_eq!(
            a.next(Some(&lease), true, true, false, None, late),
            Action::Renew
        );
        assert!(a.held, "no renewal, nobody heard: still answering");
        assert_eq!(
            a.next(Some(&lease), true, true, true, None, late),
            Action::Withdraw
        );
        // Heard while renewing fine: a neighbour's mistake, not a takeover.
        a.wrote(late);
        assert_eq!(
            a.next(Some(&lease), true, true, true, None, late),
            Action::Nothing
        );
    }

    #[test]
    fn a_node_that_is_not_ready_gives_the_lease_up_and_takes_none() {
        let t0 = Instant::now();
        let mut a = Owner::new("a", RENEW);
        a.wrote(t0);
        assert_eq!(
            a.next(Some(&held_by("a")), true, false, false, None, t0),
            Action::Release
        );
        a.withdrew();
        let free = held_by("");
        assert_eq!(
            a.next(Some(&free), true, false, false, None, t0),
            Action::Nothing
        );
        assert_eq!(
            a.next(Some(&free), true, true, false, None, t0),
            Action::Take
        );
    }

    #[test]
    fn a_standby_whose_take_failed_waits_a_duration_before_the_next() {
        let t0 = Instant::now();
        let mut b = Owner::new("b", RENEW);
        let free = held_by("");
        assert_eq!(
            b.next(Some(&free), true, true, false, None, t0),
            Action::Take
        );
        b.take_failed(t0, Duration::from_secs(2));
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(
            b.next(Some(&free), true, true, false, None, soon),
            Action::Nothing
        );
        let later = t0 + Duration::from_secs(2);
        assert_eq!(
            b.next(Some(&free), true, true, false, None, later),
            Action::Take
        );
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_standby_takes_over_a_holder_silent_for_one_and_a_half_periods_that_answers_no_probe() {
        let t0 = Instant::now();
        let mut b = Owner::new("b", RENEW);
        let lease = held_by("a");
        let mut at = |t: u64, answered: Option<Instant>| {
            b.next(Some(&lease), true, true, false, answered, t0 + ms(t))
        };
        assert_eq!(at(0, None), Action::Nothing);
        assert_eq!(at(700, None), Action::Nothing, "renewals may be late");
        assert_eq!(at(750, None), Action::Probe);
        // An answer from before the probes went out says nothing now.
        assert_eq!(at(775, Some(t0 + ms(600))), Action::Nothing);
        assert_eq!(at(800, Some(t0 + ms(600))), Action::Probe);
        assert_eq!(at(850, None), Action::Probe);
        assert_eq!(at(875, None), Action::Nothing);
        assert_eq!(
            at(900, None),
            Action::TakeFromSilent {
                holder: "a".into(),
                quiet: ms(900)
            },
            "three probes unanswered: 1.1 s before the Lease expires"
        );
    }

    #[test]
    fn a_silent_holder_that_answers_keeps_the_ssh_ip_until_its_lease_expires() {
        let t0 = Instant::now();
        let mut b = Owner::new("b", RENEW);
        let lease = held_by("a");
        let mut at = |t: u64, answered: Option<Instant>| {
            b.next(Some(&lease), true, true, false, answered, t0 + ms(t))
        };
        assert_eq!(at(0, None), Action::Nothing);
        assert_eq!(at(750, None), Action::Probe);
        // Its data path answered: alive, its API away (a partition).
        assert_eq!(at(800, Some(t0 + ms(751))), Action::Nothing);
        for t in (850..2_000).step_by(25) {
            assert_eq!(at(t, None), Action::Nothing, "no probe more at {t} ms");
        }
        assert_eq!(at(2_000, None), Action::Take, "expired");
    }

    #[test]
    fn a_renewal_ends_the_check_and_a_later_silence_starts_another() {
        let t0 = Instant::now();
        let mut b = Owner::new("b", RENEW);
        let first = held_by("a");
        assert_eq!(
            b.next(Some(&first), true, true, false, None, t0),
            Action::Nothing
        );
        assert_eq!(
            b.next(Some(&first), true, true, false, None, t0 + ms(750)),
            Action::Probe
        );
        let renewed = LeaseSpec {
            lease_transitions: Some(1),
            ..held_by("a")
        };
        let t1 = t0 + ms(775);
        assert_eq!(
            b.next(Some(&renewed), true, true, false, None, t1),
            Action::Nothing
        );
        assert_eq!(
            b.next(Some(&renewed), true, true, false, None, t1 + ms(300)),
            Action::Nothing,
            "the old check does not go on"
        );
        assert_eq!(
            b.next(Some(&renewed), true, true, false, None, t1 + ms(750)),
            Action::Probe
        );
        // A standby that is not ready probes nobody.
        let mut c = Owner::new("c", RENEW);
        assert_eq!(
            c.next(Some(&first), true, false, false, None, t0),
            Action::Nothing
        );
        assert_eq!(
            c.next(Some(&first), true, false, false, None, t0 + ms(750)),
            Action::Nothing
        );
    }

    #[test]
    fn a_lease_still_ours_after_a_restart_is_answered_for_again() {
        let mut a = Owner::new("a", RENEW);
        assert_eq!(
            a.next(Some(&held_by("a")), true, true, false, None, Instant::now()),
            Action::Renew
        );
        assert!(a.held);
    }
}
