//! One SSH IP's Lease as one node sees it: whether this node answers ARP
//! (or, for an IPv6 SSH IP, neighbour solicitations) for it, by one rule
//! for both families. Pure: the caller reads the Lease (from its watch),
//! makes the writes this asks for, and reports how they went.
//!
//! - Only a ready node (attached, synced, an external interface up)
//!   takes the Lease; one that stops being ready gives it up.
//! - A holder renews every `--announce-renew`. One that cannot renew
//!   keeps answering (an API outage must not take the SSH IP down) until
//!   it hears another agent claim the SSH IP on the segment (a MAC that
//!   agent published with its Lease; any other claim is foreign and
//!   changes nothing), or the API shows another holder.
//! - A holder that stopped answering while the Lease, as last read, still
//!   names it (it gave way, or was not ready) answers again only once a
//!   renewal goes through, or the Lease shows it given up: what it last
//!   read may be long out of date (a partition stalls the watch too), and
//!   taking the SSH IP back from it would fight the new holder.
//! - A standby watches the holder's data path: an ARP probe (a neighbour
//!   solicitation for an IPv6 SSH IP) every fifth of a period, to the MAC
//!   that answered last. A holder that leaves [`PROBES`] in a row
//!   unanswered and has missed a renewal is gone (its node died), and is
//!   taken over then, without waiting for the Lease to expire; one that
//!   answers is alive with its API away, and keeps the SSH IP until the
//!   Lease expires.
//! - A standby whose take failed reads the Lease before it takes again,
//!   and counts its duration from that read: a take sent while the API
//!   is away would land when it comes back, maybe before the holder's
//!   renewal, and move the SSH IP for nothing.

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
    /// Ask who holds the SSH IP (an ARP probe, or a neighbour
    /// solicitation): of the MAC that last answered (`unicast`), or of the
    /// whole segment (for IPv6, the SSH IP's solicited-node group).
    Probe {
        unicast: bool,
    },
    Renew,
    /// Read the Lease from the API.
    Read,
    /// Hand the Lease back (holder cleared) and stop answering.
    Release,
    /// Stop answering: another node holds it, or was heard announcing.
    Withdraw,
}

/// What one node knows of one SSH IP when it decides its next step.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// The Lease as last read.
    pub lease: Option<&'a LeaseSpec>,
    /// The watch has listed once, so a missing Lease is really missing.
    pub synced: bool,
    /// This node may answer: attached, synced, an external interface up.
    pub ready: bool,
    /// Another agent claimed the SSH IP since this node's last renewal.
    pub heard_other: bool,
    /// When the holder last answered this node's probe for the SSH IP.
    pub answered: Option<Instant>,
}

// The tests' usual case, changed field by field where a case differs.
#[cfg(test)]
impl<'a> Seen<'a> {
    /// A ready node with a listed watch that heard no other agent and no
    /// answer to a probe, reading `lease`.
    pub fn ready(lease: Option<&'a LeaseSpec>) -> Self {
        Self {
            lease,
            synced: true,
            ready: true,
            heard_other: false,
            answered: None,
        }
    }
}

/// This node's holding of one SSH IP's Lease: whether it answers for the
/// SSH IP, and what it tracks to decide its next step.
#[derive(Debug)]
pub struct Holding {
    me: String,
    renew: Duration,
    observed: Observed,
    /// This node answers for the SSH IP.
    pub held: bool,
    /// When the last write that made or kept us holder was sent.
    pub renewed: Option<Instant>,
    /// A take failed: the Lease is read from the API (no sooner than
    /// this) before any other take. A take sent while the API is away
    /// could land when it comes back, before the holder's renewal, and
    /// move the SSH IP for nothing; and a Lease read with the API back
    /// gives its holder a full duration, from then, to renew.
    verify: Option<Instant>,
    /// Stopped answering and written nothing since: a Lease that still
    /// names us is renewed before we answer for it again.
    withdrawn: bool,
    /// The last renewal tried while [`Holding::withdrawn`].
    retried: Option<Instant>,
    /// The watch on another node's holding.
    watch: Watch,
}

/// Probes in a row the holder must leave unanswered to count as gone.
pub const PROBES: u32 = 3;

/// A standby's watch on the holder's data path: a probe every
/// [`Holding::probe_every`], and how many in a row went unanswered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Watch {
    /// The holder watched; another holder starts the count again.
    holder: String,
    /// The first probe of this watch: answers from before it are about
    /// whoever held the SSH IP then.
    first_sent: Option<Instant>,
    last_sent: Option<Instant>,
    /// Probes sent since the last answer.
    unanswered: u32,
    /// When the last answer to this watch's probes was heard.
    answered: Option<Instant>,
}
impl Holding {
    pub fn new(me: &str, renew: Duration) -> Self {
        Self {
            me: me.to_owned(),
            renew,
            observed: Observed::default(),
            held: false,
            renewed: None,
            verify: None,
            withdrawn: false,
            retried: None,
            watch: Watch::default(),
        }
    }

    /// A Create or Take was refused or not answered, at `now`: read the
    /// Lease a period later, and take nothing before.
    pub fn take_failed(&mut self, now: Instant) {
        self.verify = Some(now + self.renew);
    }

    /// The Lease as the API answered a [`Action::Read`] at `now` (`None`:
    /// there is none). Its duration counts from now: time the API was
    /// away is no proof that its holder is gone.
    pub fn read(&mut self, lease: Option<&LeaseSpec>, now: Instant) {
        self.verify = None;
        match lease {
            Some(spec) => self.observed.read_at(spec, now),
            None => self.observed = Observed::default(),
        }
    }

    /// A [`Action::Read`] failed at `now`: the next one a period later.
    pub fn read_failed(&mut self, now: Instant) {
        self.verify = Some(now + self.renew);
    }

    /// The read owed after a failed take, once it is due.
    fn verify_now(&mut self, due: Instant, now: Instant) -> Action {
        if now < due {
            return Action::Nothing;
        }
        self.verify = Some(now + self.renew);
        Action::Read
    }

    /// The step for what this node has `seen` of the SSH IP.
    pub fn next(&mut self, seen: &Seen<'_>, now: Instant) -> Action {
        let Seen {
            lease,
            synced,
            ready,
            heard_other,
            answered,
        } = *seen;
        let step = decide(lease, &self.me, &mut self.observed, now);
        if !matches!(step, Step::Wait { .. }) || !ready {
            self.watch = Watch::default();
        }
        if step != Step::Renew {
            // The Lease moved on from us: nothing of it to take back.
            self.withdrawn = false;
            self.retried = None;
        }
        if !ready {
            return if self.held {
                Action::Release
            } else {
                Action::Nothing
            };
        }
        match step {
            Step::Wait { .. } if self.held => Action::Withdraw,
            Step::Create | Step::Take | Step::Wait { .. } if let Some(due) = self.verify => {
                self.verify_now(due, now)
            }
            Step::Create if synced => Action::Create,
            Step::Create => Action::Nothing,
            Step::Take => Action::Take,
            Step::Renew if self.withdrawn => self.retry(now),
            Step::Renew if !self.held => {
                // Ours from before a restart, as the first list showed it:
                // answer again, and say so.
                self.held = true;
                Action::Renew
            }
            Step::Renew if self.gives_way(heard_other, now) => Action::Withdraw,
            Step::Renew if self.renewed.is_none_or(|at| now >= at + self.renew) => Action::Renew,
            Step::Renew => Action::Nothing,
            Step::Wait { holder, for_ } => {
                let seconds = lease.and_then(|l| l.lease_duration_seconds).unwrap_or(0);
                let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
                let quiet = duration.saturating_sub(for_);
                self.watch_holder(holder, quiet, answered, now)
            }
        }
    }

    /// How often a standby probes the holder: a fifth of the renewal
    /// period (an answer on a LAN takes well under a millisecond).
    fn probe_every(&self) -> Duration {
        self.renew / 5
    }

    /// A standby's look at `holder`, whose Lease has not changed for
    /// `quiet`, given when another machine last answered for the SSH IP.
    /// The holder counts as gone once its data path, heard answering
    /// before, left [`PROBES`] probes in a row unanswered and it missed a
    /// renewal (a fifth of a period late: more than a renewal's usual
    /// jitter). A holder that renews is alive whatever its data path does;
    /// one whose data path answers, or was never heard (on another segment,
    /// or behind a device that drops the answers), keeps the SSH IP until
    /// its Lease expires.
    fn watch_holder(
        &mut self,
        holder: String,
        quiet: Duration,
        answered: Option<Instant>,
        now: Instant,
    ) -> Action {
        let every = self.probe_every();
        if self.watch.holder != holder {
            self.watch = Watch {
                holder,
                ..Watch::default()
            };
        }
        if let Some(at) = answered
            && self.watch.first_sent.is_some_and(|first| at >= first)
            && self.watch.answered.is_none_or(|seen| at > seen)
        {
            self.watch.answered = Some(at);
            self.watch.unanswered = 0;
        }
        let due = self.watch.last_sent.is_none_or(|at| now >= at + every);
        let missed_renewal = quiet >= self.renew + self.renew / 5;
        if due && self.watch.answered.is_some() && self.watch.unanswered >= PROBES && missed_renewal
        {
            let holder = std::mem::take(&mut self.watch).holder;
            return Action::TakeFromSilent { holder, quiet };
        }
        if !due {
            return Action::Nothing;
        }
        // Once the holder is known to answer, a probe goes to its MAC
        // alone; after one unanswered, to everyone, in case another node
        // holds it now.
        let unicast = self.watch.unanswered == 0 && self.watch.answered.is_some();
        self.watch.first_sent.get_or_insert(now);
        self.watch.last_sent = Some(now);
        self.watch.unanswered += 1;
        Action::Probe { unicast }
    }

    /// A renewal is overdue: the last good one is older than two periods.
    fn renew_failing(&self, now: Instant) -> bool {
        self.renewed.is_none_or(|at| now >= at + self.renew * 2)
    }

    /// Whether a holder gives way to another agent's claim heard since its
    /// last renewal (`heard_other`): only while its renewals fail. One
    /// heard while they go through is a mistake the Lease corrects.
    pub fn gives_way(&self, heard_other: bool, now: Instant) -> bool {
        self.held && heard_other && self.renew_failing(now)
    }

    /// A withdrawn holder's renewal, tried once a period.
    fn retry(&mut self, now: Instant) -> Action {
        if self.retried.is_some_and(|at| now < at + self.renew) {
            return Action::Nothing;
        }
        self.retried = Some(now);
        Action::Renew
    }

    /// A write that makes or keeps us holder went through; it was sent at
    /// `sent`.
    pub fn wrote(&mut self, sent: Instant) {
        self.held = true;
        self.renewed = Some(sent);
        self.withdrawn = false;
        self.retried = None;
    }

    /// We answer no more.
    pub fn withdrew(&mut self) {
        self.held = false;
        self.renewed = None;
        self.withdrawn = true;
    }
}

#[cfg(test)]
mod tests;
