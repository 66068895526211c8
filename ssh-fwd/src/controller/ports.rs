//! Port allocation: a uniformly random free port from the range. The ports
//! in use come from the API server's Services (plus creates not yet seen in
//! the cache), never from memory alone, so a restarted controller cannot
//! hand out a port twice.

use std::ops::RangeInclusive;

use rand::Rng;

/// Random probes before falling back to counting the free ports; with the
/// range mostly free one probe almost always hits.
const PROBES: usize = 16;

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
}
