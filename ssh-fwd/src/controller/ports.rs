//! Port allocation, the one rule both the webhook and the leader use: a
//! uniformly random free port of the range; when none is free, the port
//! whose job ended longest ago, even within its quarantine
//! (`--port-reuse-after`), which then gives way. The ports in use and
//! those quarantined come from the API server (the reservations' Leases,
//! the Services, plus creates not yet seen in the cache), never from
//! memory alone, so a restarted controller cannot hand out a port twice,
//! nor forget a quarantine.
//!
//! A free port has no reservation at all: no job held it within the
//! quarantine (the leader deletes a quarantined reservation once its
//! quarantine is over), so every free port is older than every
//! quarantined one, and the least recently used port is a free one, or
//! else the quarantined one that ended first.

use std::{ops::RangeInclusive, time::Duration};

use k8s_openapi::jiff::Timestamp;
use rand::Rng;

/// Random probes before falling back to counting the free ports; with the
/// range mostly free one probe almost always hits.
const PROBES: usize = 16;

/// A port whose job ended at `since`, its reservation kept as quarantined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resting {
    pub port: u16,
    pub since: Timestamp,
}

/// `--port-reuse-after`, and the time of the choice.
#[derive(Clone, Copy, Debug)]
pub struct Quarantine {
    pub after: Duration,
    pub now: Timestamp,
}

impl Quarantine {
    /// No quarantine (`--port-reuse-after 0`), now: for tests of what
    /// the quarantine leaves alone.
    #[cfg(test)]
    pub fn off() -> Self {
        Self {
            after: Duration::ZERO,
            now: Timestamp::now(),
        }
    }

    /// Whether a port whose job ended at `since` is still quarantined.
    pub fn holds(&self, since: Timestamp) -> bool {
        let over = (self.now.duration_since(since)).unsigned_abs();
        !self.after.is_zero() && (self.now < since || over < self.after)
    }
}

/// The port a job gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// A port nobody holds.
    Free(u16),
    /// No port was free: this one, whose job ended longest ago, is taken
    /// from its quarantined reservation. `early`: its quarantine was not
    /// over (it gave way; the pod is told).
    Resting {
        port: u16,
        since: Timestamp,
        early: bool,
    },
}

impl Pick {
    pub fn port(&self) -> u16 {
        match *self {
            Self::Free(port) | Self::Resting { port, .. } => port,
        }
    }
}

/// The port for a job: a free one of `range` ([`pick_free`]; `used` says
/// which are not, quarantined ones included), else the one of `resting`
/// in the range that ended first (then the lowest), or none.
pub fn pick(
    range: &RangeInclusive<u16>,
    used: &impl Fn(u16) -> bool,
    resting: impl IntoIterator<Item = Resting>,
    quarantine: &Quarantine,
    rng: &mut impl Rng,
) -> Option<Pick> {
    if let Some(port) = pick_free(range, used, rng) {
        return Some(Pick::Free(port));
    }
    let oldest = (resting.into_iter())
        .filter(|r| range.contains(&r.port))
        .min_by_key(|r| (r.since, r.port))?;
    Some(Pick::Resting {
        port: oldest.port,
        since: oldest.since,
        early: quarantine.holds(oldest.since),
    })
}

/// A free port of `range`; `used` says which are not.
pub fn pick_free(
    range: &RangeInclusive<u16>,
    used: &impl Fn(u16) -> bool,
    rng: &mut impl Rng,
) -> Option<u16> {
    for _ in 0..PROBES {
        let port = rng.random_range(range.clone());
        if !used(port) {
            return Some(port);
        }
    }
    // Nearly full: pick uniformly among what is left.
    let free = range.clone().filter(|p| !used(*p)).count();
    if free == 0 {
        return None;
    }
    let nth = rng.random_range(0..free);
    range.clone().filter(|p| !used(*p)).nth(nth)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::{SeedableRng as _, rngs::StdRng};

    use super::*;

    #[test]
    fn picks_spread_over_the_whole_range() {
        let mut rng = StdRng::seed_from_u64(1);
        let range = 8000..=8099;
        let mut hits = [0u32; 100];
        for _ in 0..20_000 {
            let port = pick_free(&range, &|_| false, &mut rng).unwrap();
            hits[usize::from(port - 8000)] += 1;
        }
        // 200 expected per port; every port is hit and none is favoured.
        assert!(hits.iter().all(|&h| (120..=280).contains(&h)), "{hits:?}");
    }

    #[test]
    fn never_returns_a_used_port_and_finds_the_last_free_one() {
        let mut rng = StdRng::seed_from_u64(2);
        let range = 9000..=9999;
        let mut used: BTreeSet<u16> = range.clone().collect();
        used.remove(&9421);
        for _ in 0..100 {
            assert_eq!(
                pick_free(&range, &|p| used.contains(&p), &mut rng),
                Some(9421)
            );
        }
    }

    #[test]
    fn a_full_range_is_exhausted() {
        let mut rng = StdRng::seed_from_u64(3);
        let range = 8000..=8009;
        let used: BTreeSet<u16> = (7990..=8020).collect();
        assert_eq!(pick_free(&range, &|p| used.contains(&p), &mut rng), None);
    }

    #[test]
    fn allocating_until_full_gives_each_port_once() {
        let mut rng = StdRng::seed_from_u64(4);
        let range = 8000..=8255;
        let mut used = BTreeSet::new();
        while let Some(port) = pick_free(&range, &|p| used.contains(&p), &mut rng) {
            assert!(used.insert(port), "port {port} handed out twice");
        }
        assert_eq!(used.len(), 256);
    }

    #[test]
    fn ports_outside_the_range_do_not_count_against_it() {
        let mut rng = StdRng::seed_from_u64(5);
        let used: BTreeSet<u16> = (1..8000).collect();
        assert!(pick_free(&(8000..=8000), &|p| used.contains(&p), &mut rng).is_some());
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    const TEN_MINUTES: Duration = Duration::from_secs(600);

    #[test]
    fn with_a_port_free_the_quarantined_ones_are_left_alone() {
        let mut rng = StdRng::seed_from_u64(6);
        let range = 8000..=8001;
        let resting = [Resting {
            port: 8000,
            since: at(0),
        }];
        let quarantine = Quarantine {
            after: TEN_MINUTES,
            now: at(60),
        };
        for _ in 0..100 {
            let picked = pick(&range, &|p| p == 8000, resting, &quarantine, &mut rng);
            assert_eq!(picked, Some(Pick::Free(8001)));
        }
    }

    #[test]
    fn with_none_free_the_port_quarantined_longest_gives_way() {
        let mut rng = StdRng::seed_from_u64(7);
        let range = 8000..=8002;
        let resting = [
            Resting {
                port: 8000,
                since: at(30),
            },
            Resting {
                port: 8001,
                since: at(10),
            },
            // Outside the range (narrowed since): never handed out.
            Resting {
                port: 7999,
                since: at(0),
            },
        ];
        let quarantine = Quarantine {
            after: TEN_MINUTES,
            now: at(60),
        };
        let picked = pick(&range, &|_| true, resting, &quarantine, &mut rng);
        assert_eq!(
            picked,
            Some(Pick::Resting {
                port: 8001,
                since: at(10),
                early: true
            })
        );
    }

    #[test]
    fn a_quarantine_that_is_over_does_not_count_as_giving_way() {
        let mut rng = StdRng::seed_from_u64(8);
        let resting = [Resting {
            port: 8000,
            since: at(0),
        }];
        let mut early = |after, now| {
            let quarantine = Quarantine { after, now };
            match pick(&(8000..=8000), &|_| true, resting, &quarantine, &mut rng) {
                Some(Pick::Resting { early, .. }) => early,
                other => panic!("{other:?}"),
            }
        };
        assert!(early(TEN_MINUTES, at(599)));
        assert!(!early(TEN_MINUTES, at(600)));
        assert!(!early(Duration::ZERO, at(0)));
        // A release stamped ahead of this clock (another replica's) holds.
        assert!(early(TEN_MINUTES, at(-5)));
    }

    #[test]
    fn a_range_all_in_use_and_none_quarantined_is_exhausted() {
        let mut rng = StdRng::seed_from_u64(9);
        let quarantine = Quarantine {
            after: TEN_MINUTES,
            now: at(0),
        };
        assert_eq!(
            pick(&(8000..=8009), &|_| true, [], &quarantine, &mut rng),
            None
        );
    }
}
