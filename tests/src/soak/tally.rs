//! What the load saw, told apart by when it happened: a session that broke
//! or a login that failed while a fault was on is counted against that
//! window; one outside every window, or a session broken while a path to
//! its pod existed, is a failure. Pure: times are offsets from the start
//! of the load.

use std::time::Duration;

use super::schedule::Fault;

/// A fault as it really ran: when it started and ended (faults on the
/// same target wait for each other, so these differ from the plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub fault: Fault,
    pub from: Duration,
    pub to: Duration,
    /// Whether a new connection may fail meanwhile: the fault's kind
    /// says so ([`Fault::excuses_failed_logins`]), or it stopped the agent
    /// that held the SSH IP, which then moves.
    pub excuses: bool,
}

/// How long after a fault ends its effects may still show: a restarted
/// agent's first lists, a failover's ARP, a TCP retransmission's backoff.
pub const SETTLE: Duration = Duration::from_secs(5);

impl Window {
    /// Whether `t` falls inside the window or its settling time.
    pub fn covers(&self, t: Duration) -> bool {
        self.from <= t && t <= self.to + SETTLE
    }
}

/// Where a failure at `t` belongs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placed {
    /// Outside every window: a defect.
    Outside,
    /// Inside a window that removed the only path (listed first if
    /// several cover `t`).
    NoPath(Window),
    /// Inside a fault window that left a path.
    Inside(Window),
}

/// Places a failure at `t` among `windows`: a window that removed a path
/// wins over one that did not; a window of a fault that cannot make a new
/// connection fail (see [`Window::excuses`]) places nothing.
pub fn place(t: Duration, windows: &[Window]) -> Placed {
    let covering = || (windows.iter()).filter(|w| w.covers(t) && w.excuses);
    if let Some(w) = covering().find(|w| w.fault.removes_a_path()) {
        return Placed::NoPath(*w);
    }
    covering()
        .next()
        .map_or(Placed::Outside, |w| Placed::Inside(*w))
}

/// How a long session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// Still running when the load stopped, then closed by the test.
    AtStop,
    /// The test ended its job (pod churn) and closed it first.
    JobEnded,
    /// It broke at `at` (ssh exited, or an echo did not come back).
    Broke { at: Duration, why: String },
}

/// The verdict on sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sessions {
    pub opened: u64,
    pub ended_by_test: u64,
    /// Broke while a path existed: each with when and why.
    pub lost: Vec<(Duration, String)>,
    /// Broke in a window the test made with no path: when, why, window.
    pub lost_no_path: Vec<(Duration, String, Window)>,
}

impl Sessions {
    pub fn add(&mut self, end: &SessionEnd, windows: &[Window]) {
        self.opened += 1;
        match end {
            SessionEnd::AtStop | SessionEnd::JobEnded => self.ended_by_test += 1,
            SessionEnd::Broke { at, why } => match place(*at, windows) {
                Placed::NoPath(w) => self.lost_no_path.push((*at, why.clone(), w)),
                _ => self.lost.push((*at, why.clone())),
            },
        }
    }
}

/// The verdict on new logins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logins {
    pub tried: u64,
    pub landed: u64,
    /// Failed inside a fault window, by fault name.
    pub failed_inside: Vec<(Duration, String, Window)>,
    /// Failed outside every window: defects.
    pub failed_outside: Vec<(Duration, String)>,
    /// Failed because the test ended the job meanwhile.
    pub job_ended: u64,
}

impl Logins {
    /// A login started at `at`; `Err(why)` if it failed; `job_ended` if the
    /// test ended its job before it finished.
    pub fn add(
        &mut self,
        at: Duration,
        result: Result<(), String>,
        job_ended: bool,
        windows: &[Window],
    ) {
        self.tried += 1;
        let Err(why) = result else {
            self.landed += 1;
            return;
        };
        if job_ended {
            self.job_ended += 1;
            return;
        }
        match place(at, windows) {
            Placed::Outside => self.failed_outside.push((at, why)),
            Placed::NoPath(w) | Placed::Inside(w) => self.failed_inside.push((at, why, w)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn window(fault: Fault, from: u64, to: u64) -> Window {
        Window {
            fault,
            from: secs(from),
            to: secs(to),
            excuses: fault.excuses_failed_logins(),
        }
    }

    #[test]
    fn a_session_broken_while_a_path_existed_is_lost_and_one_in_a_no_path_window_apart() {
        let windows = [
            window(Fault::HolderLinkDown, 10, 14),
            window(Fault::NodeLinkFlap, 30, 33),
        ];
        let mut s = Sessions::default();
        s.add(&SessionEnd::AtStop, &windows);
        s.add(&SessionEnd::JobEnded, &windows);
        let broke = |t| SessionEnd::Broke {
            at: secs(t),
            why: "echo".into(),
        };
        s.add(&broke(12), &windows);
        s.add(&broke(31), &windows);
        s.add(&broke(50), &windows);
        assert_eq!((s.opened, s.ended_by_test), (5, 2));
        assert_eq!(s.lost.len(), 2, "inside a failover and outside all: {s:?}");
        assert_eq!(s.lost_no_path.len(), 1);
        assert_eq!(s.lost_no_path[0].2.fault, Fault::NodeLinkFlap);
    }

    #[test]
    fn a_dead_agent_or_controller_excuses_no_failure_unless_the_agent_held_the_ssh_ip() {
        let mut windows = vec![
            window(Fault::AgentKill(0), 0, 20),
            window(Fault::AgentRestart(1), 0, 20),
            window(Fault::LeaderKill, 0, 20),
        ];
        assert_eq!(place(secs(5), &windows), Placed::Outside);
        windows[1].excuses = true;
        assert!(
            matches!(place(secs(5), &windows), Placed::Inside(w) if w.fault == Fault::AgentRestart(1))
        );
    }

    #[test]
    fn a_window_counts_until_its_settling_time_is_over() {
        let windows = [window(Fault::ApiStall, 10, 12)];
        assert_eq!(place(secs(9), &windows), Placed::Outside);
        assert!(matches!(place(secs(10), &windows), Placed::Inside(_)));
        assert!(matches!(
            place(secs(12) + SETTLE, &windows),
            Placed::Inside(_)
        ));
        assert_eq!(place(secs(13) + SETTLE, &windows), Placed::Outside);
    }

    #[test]
    fn a_no_path_window_wins_over_a_failover_that_covers_the_same_moment() {
        let windows = [
            window(Fault::HolderLinkDown, 0, 20),
            window(Fault::NodeLinkFlap, 5, 8),
        ];
        assert!(
            matches!(place(secs(6), &windows), Placed::NoPath(w) if w.fault == Fault::NodeLinkFlap)
        );
    }

    #[test]
    fn logins_that_failed_are_split_by_window_and_by_the_test_ending_their_job() {
        let windows = [window(Fault::ApiRestart, 10, 15)];
        let mut l = Logins::default();
        l.add(secs(1), Ok(()), false, &windows);
        l.add(secs(11), Err("timeout".into()), false, &windows);
        l.add(secs(40), Err("refused".into()), false, &windows);
        l.add(secs(41), Err("gone".into()), true, &windows);
        assert_eq!((l.tried, l.landed, l.job_ended), (4, 1, 1));
        assert_eq!(l.failed_inside.len(), 1);
        assert_eq!(l.failed_outside, [(secs(40), "refused".to_owned())]);
    }
}
