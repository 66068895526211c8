//! What a Lease as read means for a candidate holder, shared by the
//! controller's leader election and the agents' ownership of the SSH IPs
//! (`--announce l2`). Expiry is judged by the observer's own clock, as
//! client-go does: a Lease is expired once it has not changed for its
//! duration since the observer last saw it change. The holder's renewTime
//! is its clock, and with skew between nodes it would make a candidate
//! take over early (or never).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;

/// What to do about the Lease as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Create,
    /// Free or expired: take it over.
    Take,
    /// Ours: renew it.
    Renew,
    /// Someone else holds it until `for_` from now.
    Wait {
        holder: String,
        for_: Duration,
    },
}

/// The Lease as last read, and since when (by our clock) it has read so.
#[derive(Debug, Default)]
pub struct Observed {
    last: Option<(LeaseSpec, Instant)>,
}

impl Observed {
    /// Notes the Lease as read at `now`; returns since when it has been so.
    fn see(&mut self, spec: &LeaseSpec, now: Instant) -> Instant {
        match &self.last {
            Some((seen, since)) if seen == spec => *since,
            _ => {
                self.last = Some((spec.clone(), now));
                now
            }
        }
    }

    /// Notes the Lease as read afresh from the API at `now`: it has read
    /// so since `now`, whatever an older read said.
    pub fn read_at(&mut self, spec: &LeaseSpec, now: Instant) {
        self.last = Some((spec.clone(), now));
    }
}

pub fn decide(spec: Option<&LeaseSpec>, me: &str, observed: &mut Observed, now: Instant) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let since = observed.see(spec, now);
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == me {
        return Step::Renew;
    }
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    let expires = since + Duration::from_secs(seconds);
    if holder.is_empty() || expires <= now {
        return Step::Take;
    }
    Step::Wait {
        holder: holder.to_owned(),
        for_: expires - now,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::MicroTime, jiff::Timestamp};

    use super::*;

    fn held_by(holder: &str, renewed: Timestamp, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_missing_lease_is_created_and_our_own_is_renewed() {
        let (now, mut seen) = (Instant::now(), Observed::default());
        assert_eq!(decide(None, "a", &mut seen, now), Step::Create);
        let ours = held_by("a", Timestamp::now(), 15);
        assert_eq!(decide(Some(&ours), "a", &mut seen, now), Step::Renew);
    }

    #[test]
    fn a_live_lease_of_another_replica_is_waited_for_its_duration_from_its_last_change() {
        let (t0, mut seen) = (Instant::now(), Observed::default());
        let lease = held_by("b", Timestamp::now(), 15);
        let Step::Wait { holder, for_ } = decide(Some(&lease), "a", &mut seen, t0) else {
            panic!("expected to wait")
        };
        assert_eq!((holder.as_str(), for_), ("b", secs(15)));
        let later = decide(Some(&lease), "a", &mut seen, t0 + secs(5));
        assert!(matches!(later, Step::Wait { for_, .. } if for_ == secs(10)));
        // Renewed: the wait starts over.
        let renewed = held_by("b", Timestamp::now() + secs(1), 15);
        let after = decide(Some(&renewed), "a", &mut seen, t0 + secs(14));
        assert!(matches!(after, Step::Wait { for_, .. } if for_ == secs(15)));
        assert_eq!(
            decide(Some(&renewed), "a", &mut seen, t0 + secs(29)),
            Step::Take
        );
    }

    #[test]
    fn the_holders_clock_does_not_decide_expiry() {
        // A holder whose clock runs an hour behind looks long expired by its
        // renewTime, and one an hour ahead looks live for an hour: neither
        // counts, only how long the Lease has gone unchanged here.
        let hour = secs(3600);
        for renewed in [Timestamp::now() - hour, Timestamp::now() + hour] {
            let (t0, mut seen) = (Instant::now(), Observed::default());
            let lease = held_by("b", renewed, 15);
            assert!(matches!(
                decide(Some(&lease), "a", &mut seen, t0),
                Step::Wait { .. }
            ));
            assert_eq!(
                decide(Some(&lease), "a", &mut seen, t0 + secs(15)),
                Step::Take
            );
        }
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let (now, mut seen) = (Instant::now(), Observed::default());
        let released = held_by("", Timestamp::now(), 15);
        assert_eq!(decide(Some(&released), "a", &mut seen, now), Step::Take);
        let empty = LeaseSpec::default();
        assert_eq!(decide(Some(&empty), "a", &mut seen, now), Step::Take);
    }
}
