//! When adverts go out (an advert: a gratuitous ARP reply, or for an
//! IPv6 SSH IP an unsolicited neighbour advertisement): [`BURST`] of them, [`SPACING`] apart, when
//! this node starts to answer for an SSH IP on an interface (or the
//! interface's MAC changes), so that every neighbour and switch moves to
//! it even if one frame is lost; then, with `--announce-garp-interval`,
//! one per interval for as long as it answers. The schedule is pure
//! ([`Adverts::take_due`]) and the same for both families; sending is one
//! `sendto` each.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use super::AnnounceMetrics;
use crate::datapath::{
    announce::{AnnounceAt, Desired, Plan},
    neighbour::NeighbourSocket,
};

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
pub struct Adverts {
    socket: Option<NeighbourSocket>,
    every: Option<Duration>,
    metrics: AnnounceMetrics,
    pending: BTreeMap<AnnounceAt, Pending>,
    /// A refused send was logged; the next success says so.
    failing: bool,
}

impl Adverts {
    pub fn new(socket: NeighbourSocket, every: Option<Duration>, metrics: AnnounceMetrics) -> Self {
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
    pub fn track(&mut self, announced: &Desired, plan: &Plan, now: Instant) {
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
    fn take_due(&mut self, now: Instant) -> Vec<(AnnounceAt, [u8; 6])> {
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

    /// Probes for `key`'s SSH IP out of its interface, from `mac`, to `to`
    /// or to everyone (a standby watching the holder): an ARP probe, or
    /// for an IPv6 SSH IP a neighbour solicitation from this node's
    /// address on the interface.
    pub fn probe(&self, key: AnnounceAt, mac: [u8; 6], to: Option<[u8; 6]>) {
        let Some(socket) = &self.socket else { return };
        let (sent, counter) = match key.ip {
            IpAddr::V4(ip) => (
                socket.probe(key.ifindex, mac, ip, to),
                &self.metrics.probes_sent,
            ),
            IpAddr::V6(ip) => (
                socket.solicit(key.ifindex, mac, ip, to),
                &self.metrics.solicitations_sent,
            ),
        };
        match sent {
            Ok(()) => {
                counter.inc();
            }
            Err(e) => {
                self.metrics.garp_errors.inc();
                tracing::debug!(ssh_ip = %key.ip, ifindex = key.ifindex, error = %e, "cannot send an {}", super::probe(key.ip));
            }
        }
    }

    /// Sends what is due at `now`.
    pub fn send_due(&mut self, now: Instant) {
        for (key, mac) in self.take_due(now) {
            let Some(socket) = &self.socket else { continue };
            match socket.send(key.ifindex, mac, key.ip) {
                Ok(()) => {
                    match key.ip {
                        IpAddr::V4(_) => self.metrics.garps_sent.inc(),
                        IpAddr::V6(_) => self.metrics.adverts_sent.inc(),
                    };
                    if std::mem::take(&mut self.failing) {
                        tracing::info!("gratuitous ARPs and neighbour advertisements sent again");
                    }
                }
                Err(e) => {
                    self.metrics.garp_errors.inc();
                    if !std::mem::replace(&mut self.failing, true) {
                        tracing::warn!(
                            ssh_ip = %key.ip,
                            ifindex = key.ifindex,
                            error = %e,
                            "cannot send a gratuitous ARP or neighbour advertisement; neighbours learn the SSH IP's MAC when they ask"
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

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn started(key: AnnounceAt) -> (Desired, Plan) {
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
        let key = AnnounceAt::new(3, Ipv4Addr::new(198, 18, 0, 10));
        let mut adverts = Adverts::unsent(None);
        let t0 = Instant::now();
        let (announced, plan) = started(key);
        adverts.track(&announced, &plan, t0);
        assert_eq!(adverts.take_due(t0), vec![(key, MAC)]);
        assert_eq!(adverts.take_due(t0 + SPACING / 2), vec![], "spaced");
        assert_eq!(adverts.next_due(), Some(t0 + SPACING));
        assert_eq!(adverts.take_due(t0 + SPACING).len(), 1);
        assert_eq!(adverts.take_due(t0 + SPACING * 2).len(), 1);
        assert_eq!(adverts.next_due(), None, "{BURST} in all");
    }

    #[test]
    fn an_ipv6_ssh_ip_is_told_on_the_same_schedule_beside_an_ipv4_one() {
        let v4 = AnnounceAt::new(3, Ipv4Addr::new(198, 18, 0, 10));
        let v6 = AnnounceAt::new(3, "fd00:198::10".parse::<IpAddr>().unwrap());
        let entry = Announce {
            mac: MAC,
            flags: 0,
            since_ms: 1,
        };
        let plan = Plan {
            upserts: vec![(v4, entry), (v6, entry)],
            deletes: vec![],
        };
        let announced = Desired::from([(v4, MAC), (v6, MAC)]);
        let mut adverts = Adverts::unsent(None);
        let t0 = Instant::now();
        adverts.track(&announced, &plan, t0);
        for n in 0..BURST {
            let t = t0 + SPACING * n;
            assert_eq!(adverts.take_due(t), vec![(v4, MAC), (v6, MAC)], "{n}");
        }
        assert_eq!(adverts.next_due(), None);
    }

    #[test]
    fn with_an_interval_one_goes_out_each_interval_until_withdrawn() {
        let key = AnnounceAt::new(3, Ipv4Addr::new(198, 18, 0, 10));
        let every = Duration::from_secs(30);
        let mut adverts = Adverts::unsent(Some(every));
        let t0 = Instant::now();
        let (announced, plan) = started(key);
        adverts.track(&announced, &plan, t0);
        let mut t = t0;
        for _ in 0..BURST {
            assert_eq!(adverts.take_due(t).len(), 1);
            t += SPACING;
        }
        let last = t - SPACING;
        assert_eq!(adverts.next_due(), Some(last + every));
        assert_eq!(adverts.take_due(last + every).len(), 1);
        assert_eq!(adverts.next_due(), Some(last + every * 2));
        adverts.track(&Desired::new(), &Plan::default(), last + every);
        assert_eq!(adverts.next_due(), None, "withdrawn: nothing more");
    }
}
