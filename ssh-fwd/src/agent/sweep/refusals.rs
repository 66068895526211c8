//! The log line that tells an operator which clients the connection quota
//! holds back: at most one a minute, however many handshakes a client
//! throws at it, naming the busiest addresses at the limit.

use std::{net::Ipv4Addr, time::Instant};

use super::throttle::Throttle;

/// How many addresses a line names at most.
const NAMED: usize = 5;

/// What was logged last.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// Of the `source_limited` counter.
    throttle: Throttle,
}

/// One line to log: how many handshakes were held back since the last
/// one, and the addresses at the limit with what each holds, busiest
/// first.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    pub held_back: u64,
    pub at_limit: Vec<(Ipv4Addr, u64)>,
}

impl RefusalLog {
    /// The line to log now, if any: `source_limited` is the counter,
    /// `sources` what each client address holds, `limit` the quota.
    pub fn due(
        &mut self,
        now: Instant,
        source_limited: u64,
        sources: &[(Ipv4Addr, u64)],
        limit: u32,
    ) -> Option<Line> {
        let held_back = self.throttle.rose(now, source_limited)?;
        let mut at_limit: Vec<(Ipv4Addr, u64)> = sources
            .iter()
            .filter(|(_, held)| limit != 0 && *held >= u64::from(limit))
            .copied()
            .collect();
        at_limit.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        at_limit.truncate(NAMED);
        Some(Line {
            held_back,
            at_limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_line_names_the_busiest_clients_at_the_limit_at_most_once_a_minute() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        let sources = [
            (ip("192.0.2.66"), 512),
            (ip("192.0.2.2"), 3),
            (ip("198.51.100.7"), 600),
        ];
        assert_eq!(log.due(start, 40, &sources, 512), None, "history");
        assert_eq!(log.due(start, 40, &sources, 512), None, "nothing new");
        let line = log
            .due(start + Duration::from_secs(1), 140, &sources, 512)
            .unwrap();
        assert_eq!(line.held_back, 100);
        assert_eq!(
            line.at_limit,
            [(ip("198.51.100.7"), 600), (ip("192.0.2.66"), 512)]
        );
        // Within the minute: quiet, and what it held back is told next time.
        assert_eq!(
            log.due(start + Duration::from_secs(30), 900, &sources, 512),
            None
        );
        let line = log
            .due(start + Duration::from_secs(62), 1_000, &sources, 512)
            .unwrap();
        assert_eq!(line.held_back, 860);
    }

    #[test]
    fn a_line_names_at_most_five_addresses() {
        let mut log = RefusalLog::default();
        let now = Instant::now();
        let sources: Vec<(Ipv4Addr, u64)> = (1..=9)
            .map(|i| (Ipv4Addr::new(192, 0, 2, i), 10 + u64::from(i)))
            .collect();
        log.due(now, 0, &sources, 10);
        let line = log.due(now, 5, &sources, 10).unwrap();
        assert_eq!(line.at_limit.len(), 5);
        assert_eq!(line.at_limit[0], (Ipv4Addr::new(192, 0, 2, 9), 19));
    }
}
