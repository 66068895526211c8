//! When gratuitous ARPs go out: [`BURST`] of them, [`SPACING`] apart,
//! when this node starts to answer for an SSH IP on an interface (or the
//! interface's MAC changes), so that every neighbour and switch moves to
//! it even if one frame is lost; then, with `--announce-garp-interval`,
//! one per interval for as long as it answers. The schedule is pure
//! ([`Garps::take_due`]); sending is one `sendto` each.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use ssh_fwd_common::maps::AnnounceKey;

use super::AnnounceMetrics;
use crate::datapath::{announce::Plan, garp::GarpSocket};

/// Gratuitous ARPs sent when announcing starts.
pub const BURST: u32 = 3;
/// Between two of them.
pub const SPACING: Duration = Duration::from_millis(500);

/// What is still to be sent for one `(interface, SSH IP)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    mac: [u8; 6],
    /// Frames left in the current burst (1 for a repeat).
    left: u32,
    next: Instant,
}

/// The schedule and the socket.
pub struct Garps {
    socket: Option<GarpSocket>,
    every: Option<Duration>,
    metrics: AnnounceMetrics,
    pending: BTreeMap<AnnounceKey, Pending>,
    /// A refused send was logged; the next success says so.
    failing: bool,
}

impl Garps {
    pub fn new(socket: GarpSocket, every: Option<Duration>, metrics: AnnounceMetrics) -> Self {
        Self {
            socket: Some(socket),
            every,
            metrics,
            pending: BTreeMap::new(),
            failing: false,
        }
    }

    /// A schedule that sends nothing (tests).
    #[cfg(test)]
    fn unsent(every: Option<Duration>) -> Self {
        Self {
            socket: None,
            every,
            metrics: AnnounceMetrics::default(),
            pending: BTreeMap::new(),
            failing: false,
        }
    }

    /// Follows a change of what is announced: a burst for each entry the
    /// plan wrote, nothing more for those withdrawn.
    pub fn track(
        &mut self,
        announced: &crate::datapath::announce::Desired,
        plan: &Plan,
        now: Instant,
    ) {
        self.pending.retain(|key, _| announced.contains_key(key));
        for (key, entry) in plan.started() {
            self.pending.insert(
                *key,
                Pending {
                    mac: entry.mac,
                    left: BURST,
                    next: now,
                },
            );
        }
    }

    /// When the next frame is due, if any is.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next).min()
    }

    /// The frames due at `now`, the schedule moved past them.
    fn take_due(&mut self, now: Instant) -> Vec<(AnnounceKey, [u8; 6])> {
        let mut due = Vec::new();
        let every = self.every;
        self.pending.retain(|key, p| {
            if p.next > now {
                return true;
            }
            due.push((*key, p.mac));
            p.left -= 1;
            if p.left > 0 {
                p.next = now + SPACING;
                return true;
            }
            match every {
                Some(every) => {
                    p.left = 1;
                    p.next = now + every;
                    true
                }
                None => false,
            }
        });
        due
    }

    /// Sends an ARP probe for `key`'s SSH IP out of its interface, from
    /// `mac`, to `to` or to everyone (a standby watching the holder).
    pub fn probe(&self, key: AnnounceKey, mac: [u8; 6], to: Option<[u8; 6]>) {
        let Some(socket) = &self.socket else { return };
        match socket.probe(key.ifindex, mac, key.ip(), to) {
            Ok(()) => {
                self.metrics.probes_sent.inc();
            }
            Err(e) => {
                self.metrics.garp_errors.inc();
                tracing::debug!(ssh_ip = %key.ip(), ifindex = key.ifindex, error = %e, "cannot send an ARP probe");
            }
        }
    }

    /// Sends what is due at `now`.
    pub fn send_due(&mut self, now: Instant) {
        for (key, mac) in self.take_due(now) {
            let Some(socket) = &self.socket else { continue };
            match socket.send(key.ifindex, mac, key.ip()) {
                Ok(()) => {
                    self.metrics.garps_sent.inc();
                    if std::mem::take(&mut self.failing) {
                        tracing::info!("gratuitous ARPs sent again");
                    }
                }
                Err(e) => {
                    self.metrics.garp_errors.inc();
                    if !std::mem::replace(&mut self.failing, true) {
                        tracing::warn!(
                            ssh_ip = %key.ip(),
                            ifindex = key.ifindex,
                            error = %e,
                            "cannot send a gratuitous ARP; neighbours learn the SSH IP's MAC when they ask"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use ssh_fwd_common::maps::Announce;

    use super::*;
    use crate::datapath::announce::Desired;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn started(key: AnnounceKey) -> (Desired, Plan) {
        let entry = Announce {
            mac: MAC,
            flags: 0,
            since_ms: 1,
        };
        let plan = Plan {
            upserts: vec![(key, entry)],
            deletes: vec![],
        };
        (Desired::from([(key, MAC)]), plan)
    }

    #[test]
    fn a_start_sends_a_spaced_burst_and_then_nothing_by_default() {
        let key = AnnounceKey::new(3, Ipv4Addr::new(198, 18, 0, 10));
        let mut garps = Garps::unsent(None);
        let t0 = Instant::now();
        let (announced, plan) = started(key);
        garps.track(&announced, &plan, t0);
        assert_eq!(garps.take_due(t0), vec![(key, MAC)]);
        assert_eq!(garps.take_due(t0 + SPACING / 2), vec![], "spaced");
        assert_eq!(garps.next_due(), Some(t0 + SPACING));
        assert_eq!(garps.take_due(t0 + SPACING).len(), 1);
        assert_eq!(garps.take_due(t0 + SPACING * 2).len(), 1);
        assert_eq!(garps.next_due(), None, "{BURST} in all");
    }

    #[test]
    fn with_an_interval_one_goes_out_each_interval_until_withdrawn() {
        let key = AnnounceKey::new(3, Ipv4Addr::new(198, 18, 0, 10));
        let every = Duration::from_secs(30);
        let mut garps = Garps::unsent(Some(every));
        let t0 = Instant::now();
        let (announced, plan) = started(key);
        garps.track(&announced, &plan, t0);
        let mut t = t0;
        for _ in 0..BURST {
            assert_eq!(garps.take_due(t).len(), 1);
            t += SPACING;
        }
        let last = t - SPACING;
        assert_eq!(garps.next_due(), Some(last + every));
        assert_eq!(garps.take_due(last + every).len(), 1);
        assert_eq!(garps.next_due(), Some(last + every * 2));
        garps.track(&Desired::new(), &Plan::default(), last + every);
        assert_eq!(garps.next_due(), None, "withdrawn: nothing more");
    }
}
