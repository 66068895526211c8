//! Each frontend's activity as the agent remembers it: what the last sweep
//! found open, and the latest packet any sweep saw. A connection's entry
//! goes soon after it closes (or idles out), so only the agent's memory
//! keeps its last packet; `/metrics` reads it, and in Kubernetes mode
//! [`publish`] writes it to the node's ConfigMap for the controller.

pub mod publish;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use crate::datapath::conntrack::activity::{Activity, Clock, Tallies};

/// What the sweeps found, shared with `/metrics` and the publisher;
/// `None` until the first sweep.
#[derive(Clone, Debug, Default)]
pub struct Board(Arc<Mutex<Option<BTreeMap<SocketAddr, Activity>>>>);

impl Board {
    /// Takes in one sweep's tallies, read with `clock`.
    pub fn record(&self, clock: &Clock, tallies: &Tallies) {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        remember(known.get_or_insert_default(), clock.activity(tallies));
    }

    /// Every frontend's activity since the agent started; `None` before
    /// the first sweep, when nothing is known yet (not even that nothing
    /// is open).
    pub fn snapshot(&self) -> Option<BTreeMap<SocketAddr, Activity>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Merges a sweep's findings into what is known: the open connections are
/// the sweep's (none for a frontend it found no entry of), the last packet
/// the latest either knows.
fn remember(known: &mut BTreeMap<SocketAddr, Activity>, found: BTreeMap<SocketAddr, Activity>) {
    for activity in known.values_mut() {
        activity.open = 0;
    }
    for (frontend, now) in found {
        let kept = known.entry(frontend).or_insert(Activity {
            open: 0,
            last: None,
        });
        kept.open = now.open;
        kept.last = kept.last.max(now.last);
    }
}

#[cfg(test)]
mod tests {
    use std::{
        net::Ipv4Addr,
        time::{Duration, SystemTime},
    };

    use super::*;

    fn at(s: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s))
    }

    #[test]
    fn a_swept_connection_leaves_its_last_packet_and_none_open() {
        let frontend = SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), 2222));
        let other = SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), 2223));
        let mut known = BTreeMap::new();
        remember(
            &mut known,
            [
                (
                    frontend,
                    Activity {
                        open: 2,
                        last: at(100),
                    },
                ),
                (
                    other,
                    Activity {
                        open: 1,
                        last: at(90),
                    },
                ),
            ]
            .into(),
        );
        // The next sweep finds only `other`, with an older reading of its
        // clock: the time never goes back.
        remember(
            &mut known,
            [(
                other,
                Activity {
                    open: 1,
                    last: at(80),
                },
            )]
            .into(),
        );
        assert_eq!(
            known[&frontend],
            Activity {
                open: 0,
                last: at(100)
            }
        );
        assert_eq!(
            known[&other],
            Activity {
                open: 1,
                last: at(90)
            }
        );
    }
}
