//! What a job's connections are doing, per frontend, from [`CONNS`]: how
//! many are open and when the last of them carried a packet. An idle
//! culler reads it (through `/metrics`, `ssh-fwd list` and the pod
//! annotation the controller writes) to tell a job someone works in from
//! one left alone.
//!
//! The time is `last_seen_ns`, the last segment from the server: every
//! keystroke the client sends is acknowledged or echoed, so it moves with
//! the client's packets too. The kernel writes it on
//! `CLOCK_MONOTONIC_COARSE`, to the second ([`CLOCK_GRANULARITY_NS`]);
//! [`Clock::wall`] turns it into wall time by its age.
//!
//! Only connections the node's packet path tracks are here: in-cluster
//! clients the hairpin programs translate at `connect()` never enter
//! [`CONNS`].
//!
//! [`CONNS`]: ssh_fwd_common::maps::CONNS
//! [`CLOCK_GRANULARITY_NS`]: ssh_fwd_common::conntrack::CLOCK_GRANULARITY_NS

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use ssh_fwd_common::{
    conntrack::closing,
    maps::{Conn, Endpoint},
};

use crate::datapath::family::MapFamily;

/// One frontend's connections, as a walk of the table found them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Entries neither side has closed.
    pub open: u64,
    /// The latest `last_seen_ns` of any entry, closed ones too (kernel
    /// clock).
    pub last_seen_ns: u64,
}

/// Tallies by frontend, of both families.
pub type Tallies = BTreeMap<SocketAddr, Tally>;

/// Counts `conn` in `tallies`; `open` is false for an entry that is
/// closing or that the sweep is removing, whose last packet still counts.
pub fn tally<A: MapFamily>(tallies: &mut Tallies, conn: &Conn<Endpoint<A>>, open: bool) {
    let t = tallies.entry(A::socket(&conn.frontend)).or_default();
    t.open += u64::from(open);
    t.last_seen_ns = t.last_seen_ns.max(conn.last_seen_ns);
}

/// Adds the tallies of a table's entries to `tallies`.
pub fn aggregate<'a, A: MapFamily + 'a>(
    tallies: &mut Tallies,
    conns: impl IntoIterator<Item = &'a Conn<Endpoint<A>>>,
) {
    for conn in conns {
        tally(tallies, conn, !closing(conn));
    }
}

/// One frontend's activity in wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    pub open: u64,
    /// When its last packet passed; `None` before any.
    pub last: Option<SystemTime>,
}

/// The kernel's clock and the wall clock read at one moment: what turns a
/// kernel time into wall time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `CLOCK_MONOTONIC_COARSE`, nanoseconds (`conntrack::clock_ns`).
    pub kernel_ns: u64,
    pub wall: SystemTime,
}

impl Clock {
    /// Both clocks now. Read after a walk, so no entry is younger than it.
    pub fn now() -> Self {
        Self {
            kernel_ns: super::clock_ns(),
            wall: SystemTime::now(),
        }
    }

    /// The wall time of `kernel_ns`: now less its age. A time ahead of
    /// the clock (a packet after the reading) is now.
    pub fn wall(&self, kernel_ns: u64) -> SystemTime {
        let age = Duration::from_nanos(self.kernel_ns.saturating_sub(kernel_ns));
        self.wall.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// `tallies` in wall time.
    pub fn activity(&self, tallies: &Tallies) -> BTreeMap<SocketAddr, Activity> {
        tallies
            .iter()
            .map(|(frontend, t)| {
                let activity = Activity {
                    open: t.open,
                    last: Some(self.wall(t.last_seen_ns)),
                };
                (*frontend, activity)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use ssh_fwd_common::maps::{CONN_FIN_CLIENT, CONN_FIN_SERVER};

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn frontend(port: u16) -> Endpoint {
        Endpoint::new(Ipv4Addr::new(203, 0, 113, 10), port)
    }

    fn socket(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), port))
    }

    fn agg(conns: &[Conn]) -> Tallies {
        let mut tallies = Tallies::new();
        aggregate(&mut tallies, conns);
        tallies
    }

    fn conn(port: u16, last_seen_s: u64, flags: u32) -> Conn {
        Conn {
            frontend: frontend(port),
            flags,
            last_seen_ns: last_seen_s * SECOND,
            ..Conn::ZERO
        }
    }

    #[test]
    fn open_connections_are_counted_per_frontend_and_the_latest_packet_wins() {
        let entries = [conn(2222, 100, 0), conn(2222, 250, 0), conn(2223, 90, 0)];
        let tallies = agg(&entries);
        assert_eq!(
            tallies[&socket(2222)],
            Tally {
                open: 2,
                last_seen_ns: 250 * SECOND
            }
        );
        assert_eq!(tallies[&socket(2223)].open, 1);
        assert_eq!(tallies.len(), 2);
    }

    #[test]
    fn a_closing_connection_is_not_open_but_its_last_packet_counts() {
        let entries = [
            conn(2222, 100, 0),
            conn(2222, 300, CONN_FIN_CLIENT | CONN_FIN_SERVER),
            // Half closed: still open.
            conn(2222, 50, CONN_FIN_SERVER),
        ];
        let t = agg(&entries)[&socket(2222)];
        assert_eq!(t.open, 2);
        assert_eq!(t.last_seen_ns, 300 * SECOND);
    }

    #[test]
    fn a_frontend_whose_connections_all_closed_has_none_open() {
        let entries = [conn(2222, 10, CONN_FIN_CLIENT | CONN_FIN_SERVER)];
        assert_eq!(agg(&entries)[&socket(2222)].open, 0);
        assert!(agg(&[]).is_empty());
    }

    #[test]
    fn ipv6_connections_are_tallied_beside_ipv4_ones_by_their_frontend() {
        use ssh_fwd_common::maps::{Conn6, Endpoint6};
        let ip = "2001:db8::10".parse().unwrap();
        let conn6 = Conn6 {
            frontend: Endpoint6::new6(ip, 2222),
            last_seen_ns: 7 * SECOND,
            ..Conn6::ZERO
        };
        let mut tallies = agg(&[conn(2222, 100, 0)]);
        aggregate(&mut tallies, &[conn6]);
        assert_eq!(tallies[&socket(2222)].open, 1);
        let v6 = SocketAddr::from((ip, 2222));
        assert_eq!(
            tallies[&v6],
            Tally {
                open: 1,
                last_seen_ns: 7 * SECOND
            }
        );
    }

    #[test]
    fn kernel_time_becomes_wall_time_by_its_age() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let clock = Clock {
            kernel_ns: 5_000 * SECOND,
            wall,
        };
        assert_eq!(clock.wall(4_990 * SECOND), wall - Duration::from_secs(10));
        assert_eq!(clock.wall(5_000 * SECOND), wall);
        // A packet after the clocks were read is not in the future.
        assert_eq!(clock.wall(5_002 * SECOND), wall);
        let activity = clock.activity(&agg(&[conn(2222, 4_400, 0)]));
        assert_eq!(
            activity[&socket(2222)],
            Activity {
                open: 1,
                last: Some(wall - Duration::from_secs(600))
            }
        );
    }
}
