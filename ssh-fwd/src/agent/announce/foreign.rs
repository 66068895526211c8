//! Claims of an SSH IP from a MAC no agent published ([`super::macs`]):
//! those the data path counted while this node answers for the SSH IP
//! (`ARP_FOREIGN`, `NDP_FOREIGN`), and answers to this node's probes of a
//! holder from a MAC the holder did not publish. Each is counted
//! (`ssh_fwd_announce_foreign_claims_total`, by family) and told at most
//! once a minute per SSH IP with the last MAC; none is given way to.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use prometheus_client::metrics::{counter::Counter, family::Family};
use ssh_fwd_common::maps::Foreign;

use super::FamilyLabel;
use crate::datapath::announce::mac_text;

/// The shortest time between two lines about one SSH IP.
pub const EVERY: Duration = Duration::from_secs(60);

/// What was heard of one SSH IP since its last line.
#[derive(Debug, Default)]
struct Tally {
    claims: u64,
    mac: [u8; 6],
    told: Option<Instant>,
}

/// The counts and the lines.
pub struct ForeignClaims {
    metric: Family<FamilyLabel, Counter>,
    /// The data path's count of each SSH IP at the last read; `None`
    /// before the first, which is history (an earlier agent's).
    counted: Option<BTreeMap<IpAddr, u64>>,
    tallies: BTreeMap<IpAddr, Tally>,
}

impl ForeignClaims {
    pub fn new(metric: Family<FamilyLabel, Counter>) -> Self {
        Self {
            metric,
            counted: None,
            tallies: BTreeMap::new(),
        }
    }

    /// The data path's counts as read at `now`: the rise since the last
    /// read is what it heard meanwhile.
    pub fn read(&mut self, counts: &BTreeMap<IpAddr, Foreign>, now: Instant) {
        let first = self.counted.is_none();
        let counted = self.counted.get_or_insert_with(BTreeMap::new);
        let mut rises = Vec::new();
        for (ip, heard) in counts {
            let before = counted.insert(*ip, heard.claims).unwrap_or(0);
            // A count below the last is a map made anew: the rise is lost.
            let rise = heard.claims.saturating_sub(before);
            if !first && rise > 0 {
                rises.push((*ip, heard.mac, rise));
            }
        }
        for (ip, mac, rise) in rises {
            self.note(ip, mac, rise, now);
        }
    }

    /// `mac` answered this node's probe for `ip`, and the holder did not
    /// publish it.
    pub fn answered(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) {
        self.note(ip, mac, 1, now);
    }

    fn note(&mut self, ip: IpAddr, mac: [u8; 6], claims: u64, now: Instant) {
        self.metric
            .get_or_create(&FamilyLabel::of(ip))
            .inc_by(claims);
        if let Some(claims) = self.tally(ip, mac, claims, now) {
            tracing::warn!(
                ssh_ip = %ip,
                mac = mac_text(mac),
                claims,
                "a MAC no agent published claims the SSH IP; not giving way to it (a host of the \
                 segment that forges claims, or one given the SSH IP by mistake)"
            );
        }
    }

    /// Adds `claims` by `mac` to `ip`'s tally; the claims to tell if a line
    /// is due at `now`.
    fn tally(&mut self, ip: IpAddr, mac: [u8; 6], claims: u64, now: Instant) -> Option<u64> {
        let tally = self.tallies.entry(ip).or_default();
        tally.claims += claims;
        tally.mac = mac;
        if tally.told.is_some_and(|at| now < at + EVERY) {
            return None;
        }
        tally.told = Some(now);
        Some(std::mem::take(&mut tally.claims))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10));
    const MAC: [u8; 6] = [2, 0x66, 0x66, 0, 0, 1];

    fn counts(claims: u64) -> BTreeMap<IpAddr, Foreign> {
        let heard = Foreign {
            mac: MAC,
            _pad: [0; 2],
            at_ns: 1,
            claims,
        };
        BTreeMap::from([(IP, heard)])
    }

    fn counted(f: &ForeignClaims) -> u64 {
        f.metric.get_or_create(&FamilyLabel::of(IP)).get()
    }

    #[test]
    fn the_data_paths_count_is_counted_from_the_first_read_on() {
        let mut f = ForeignClaims::new(Family::default());
        let now = Instant::now();
        f.read(&counts(500), now);
        assert_eq!(counted(&f), 0, "an earlier agent's");
        f.read(&counts(620), now);
        assert_eq!(counted(&f), 120);
        f.read(&counts(3), now);
        assert_eq!(counted(&f), 120, "a map made anew");
        f.read(&counts(10), now);
        assert_eq!(counted(&f), 127);
        f.answered(IP, MAC, now);
        assert_eq!(counted(&f), 128);
    }

    #[test]
    fn claims_are_told_at_most_once_a_minute_and_none_is_lost_between() {
        let mut f = ForeignClaims::new(Family::default());
        let t0 = Instant::now();
        assert_eq!(f.tally(IP, MAC, 1, t0), Some(1));
        assert_eq!(f.tally(IP, MAC, 99, t0 + Duration::from_secs(1)), None);
        assert_eq!(f.tally(IP, MAC, 100, t0 + Duration::from_secs(59)), None);
        assert_eq!(f.tally(IP, MAC, 5, t0 + EVERY), Some(204));
        let other = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11));
        assert_eq!(f.tally(other, MAC, 1, t0 + EVERY), Some(1), "each SSH IP");
    }
}
