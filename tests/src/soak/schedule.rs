//! The faults of a soak and when each starts, drawn from a seed: the same
//! seed and length give the same schedule, so a failure can be replayed.
//!
//! Every kind of fault comes once per round, in an order the seed shuffles;
//! starts are spaced by less than the longest fault lasts, so faults
//! overlap. Pure: no clock, no I/O.

use std::time::Duration;

use crate::flood::Rng;

/// One thing the soak breaks, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL the agent of node N, start it again after the fault.
    AgentKill(usize),
    /// SIGTERM the agent of node N, start this build again after the
    /// fault (a rolling restart: what an upgrade to the same layout does).
    AgentRestart(usize),
    /// SIGKILL the agent holding the SSH IP's Lease.
    HolderKill,
    /// Take the holder's external link down, then up.
    HolderLinkDown,
    /// Stall the holder's own API connection (its Lease renewals hang).
    HolderApiStall,
    /// SIGKILL the controller that leads; start it again as a standby.
    LeaderKill,
    /// Every API request and watch event waits until the fault ends.
    ApiStall,
    /// The API server goes away (watches closed, requests unanswered)
    /// and comes back with its state: its clients resume or relist.
    ApiRestart,
    /// The sshd of one job stops listening and a new one starts; the
    /// job's open sessions stay, as `systemctl restart ssh` leaves them.
    SshdRestart,
    /// The link between the nodes goes down, then up: cross-node paths
    /// are gone meanwhile (a window the test made).
    NodeLinkFlap,
}

impl Fault {
    /// Every kind, node-specific ones once per node.
    pub const ALL: [Fault; 12] = [
        Fault::AgentKill(0),
        Fault::AgentKill(1),
        Fault::AgentRestart(0),
        Fault::AgentRestart(1),
        Fault::HolderKill,
        Fault::HolderLinkDown,
        Fault::HolderApiStall,
        Fault::LeaderKill,
        Fault::ApiStall,
        Fault::ApiRestart,
        Fault::SshdRestart,
        Fault::NodeLinkFlap,
    ];

    /// A stable name for reports.
    pub fn name(self) -> String {
        match self {
            Fault::AgentKill(n) => format!("agent-kill node{n}"),
            Fault::AgentRestart(n) => format!("agent-restart node{n}"),
            Fault::HolderKill => "holder-kill".into(),
            Fault::HolderLinkDown => "holder-link-down".into(),
            Fault::HolderApiStall => "holder-api-stall".into(),
            Fault::LeaderKill => "leader-kill".into(),
            Fault::ApiStall => "api-stall".into(),
            Fault::ApiRestart => "api-restart".into(),
            Fault::SshdRestart => "sshd-restart".into(),
            Fault::NodeLinkFlap => "node-link-flap".into(),
        }
    }

    /// Whether the fault removes the only path to some pods while it
    /// lasts: a session that breaks then is counted apart.
    pub fn removes_a_path(self) -> bool {
        matches!(self, Fault::NodeLinkFlap)
    }

    /// Whether a new connection may fail while the fault is on: it moves
    /// the SSH IP to the other node (its holder killed, its link down, or
    /// its Lease unrenewed while the API is away), removes a path, or has
    /// no sshd listening for a moment. A dead controller is not one, nor
    /// an agent that does not hold the SSH IP (the soak tells those from
    /// the holder's at the time): the data path forwards without them.
    pub fn excuses_failed_logins(self) -> bool {
        matches!(
            self,
            Fault::HolderKill
                | Fault::HolderLinkDown
                | Fault::HolderApiStall
                | Fault::ApiStall
                | Fault::ApiRestart
                | Fault::SshdRestart
                | Fault::NodeLinkFlap
        )
    }
}

/// A fault, when it starts after the load began, and how long it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
    pub lasts: Duration,
}

/// How faults are spread over a soak.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The load's length; faults start after `calm` and end before the
    /// last `calm`.
    pub length: Duration,
    pub calm: Duration,
    /// The mean time between two starts.
    pub mean_gap: Duration,
    /// Each fault lasts between these.
    pub shortest: Duration,
    pub longest: Duration,
}

/// The faults of a soak of `shape` for `seed`, ordered by start.
pub fn plan(seed: u64, shape: Shape) -> Vec<Planned> {
    let mut rng = Rng::new(seed ^ 0x5eed_50a4);
    let end = shape.length.saturating_sub(shape.calm);
    let mut at = shape.calm;
    let mut round: Vec<Fault> = Vec::new();
    let mut out = Vec::new();
    let gap_ms = shape.mean_gap.as_millis().max(2) as u64;
    let (lo, hi) = (
        shape.shortest.as_millis() as u64,
        shape.longest.as_millis() as u64,
    );
    // Bounded: at most one fault per 100 ms of the soak.
    for _ in 0..=shape.length.as_millis() / 100 {
        if round.is_empty() {
            round = Fault::ALL.to_vec();
            shuffle(&mut round, &mut rng);
        }
        let span = lo + rng.draw() % (hi.saturating_sub(lo) + 1);
        let lasts = Duration::from_millis(span);
        if at + lasts > end {
            break;
        }
        let fault = round.pop().unwrap_or(Fault::ApiStall);
        out.push(Planned { at, fault, lasts });
        // Half the mean to one and a half times it; closer while the
        // first round has not run, so every kind fits in a short soak.
        let mut gap = Duration::from_millis(gap_ms / 2 + rng.draw() % (gap_ms + 1));
        if out.len() < Fault::ALL.len() {
            let left = (Fault::ALL.len() - out.len()) as u32;
            let room = end.saturating_sub(at + Duration::from_millis(hi)) / left;
            gap = gap.min(room);
        }
        at += gap;
    }
    out
}

fn shuffle(items: &mut [Fault], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        let j = (rng.draw() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(secs: u64) -> Shape {
        Shape {
            length: Duration::from_secs(secs),
            calm: Duration::from_secs(5),
            mean_gap: Duration::from_secs(4),
            shortest: Duration::from_secs(2),
            longest: Duration::from_secs(6),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        assert_eq!(plan(7, shape(60)), plan(7, shape(60)));
        assert_ne!(plan(7, shape(60)), plan(8, shape(60)));
    }

    #[test]
    fn a_minute_holds_every_kind_of_fault_once_and_some_overlap() {
        let faults = plan(42, shape(60));
        let mut kinds: Vec<Fault> = faults.iter().map(|p| p.fault).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), Fault::ALL.len(), "{faults:?}");
        let overlapping = faults
            .windows(2)
            .filter(|w| w[0].at + w[0].lasts > w[1].at)
            .count();
        assert!(overlapping > 0, "{faults:?}");
    }

    #[test]
    fn faults_stay_inside_the_calm_margins_and_in_order() {
        for seed in 0..50 {
            let faults = plan(seed, shape(300));
            assert!(faults.windows(2).all(|w| w[0].at <= w[1].at));
            for p in &faults {
                assert!(p.at >= Duration::from_secs(5), "{p:?}");
                assert!(p.at + p.lasts <= Duration::from_secs(295), "{p:?}");
                assert!((2..=6).contains(&p.lasts.as_secs()), "{p:?}");
            }
        }
    }

    #[test]
    fn a_soak_too_short_for_any_fault_has_none() {
        assert!(plan(1, shape(10)).is_empty());
    }
}
