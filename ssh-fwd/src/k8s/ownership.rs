//! Which Service owns a port on an SSH IP when several claim it. The agents
//! (`source::kubernetes::desired`) and the controller (`controller::plan`)
//! both decide with [`owner`], so they always agree on the owner whatever
//! order events arrive in.
//!
//! A claim the controller granted ([`crate::k8s::grant`]) beats every claim
//! without one, however old: a port the controller gave a job is the job's,
//! whatever Service someone else wrote first. Among claims alike in that,
//! ownership depends on age alone: the oldest Service owns the port, a
//! missing timestamp counts as youngest, and equal ages go by
//! `namespace/name`. Readiness plays no part. While the owner has no ready
//! endpoint its port is closed; it is never handed to a younger claimant,
//! which would otherwise capture the port every time the owner's pod
//! restarts (and keep it, were ownership to follow whoever forwards).

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A Service claiming a port.
pub trait Claimant {
    /// Whether the controller granted it the port.
    fn granted(&self) -> bool;
    fn created(&self) -> Option<&Time>;
    /// `namespace/name`.
    fn service(&self) -> &str;
}

impl<C: Claimant + ?Sized> Claimant for &C {
    fn granted(&self) -> bool {
        (**self).granted()
    }
    fn created(&self) -> Option<&Time> {
        (**self).created()
    }
    fn service(&self) -> &str {
        (**self).service()
    }
}

/// Granted first; then oldest first, a missing timestamp last; then by
/// `namespace/name`.
pub fn seniority(a: &impl Claimant, b: &impl Claimant) -> Ordering {
    let (ca, cb) = (a.created(), b.created());
    (b.granted().cmp(&a.granted()))
        .then_with(|| ca.is_none().cmp(&cb.is_none()))
        .then_with(|| ca.cmp(&cb))
        .then_with(|| a.service().cmp(b.service()))
}

/// The owner among the Services claiming one address and port.
pub fn owner<C: Claimant>(claimants: impl IntoIterator<Item = C>) -> Option<C> {
    claimants.into_iter().min_by(seniority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    struct Timed(Option<Time>, &'static str);

    impl Claimant for Timed {
        fn granted(&self) -> bool {
            false
        }
        fn created(&self) -> Option<&Time> {
            self.0.as_ref()
        }
        fn service(&self) -> &str {
            self.1
        }
    }

    #[test]
    fn the_oldest_owns_then_the_name_and_a_missing_age_counts_youngest() {
        let claims = [
            Timed(None, "a/first-by-name"),
            Timed(Some(at("2026-02-01T00:00:00Z")), "b/young"),
            Timed(Some(at("2026-01-01T00:00:00Z")), "c/old"),
            Timed(Some(at("2026-01-01T00:00:00Z")), "d/old-twin"),
        ];
        assert_eq!(owner(&claims).map(|c| c.1), Some("c/old"));
        assert_eq!(owner(claims.iter().rev()).map(|c| c.1), Some("c/old"));
        assert_eq!(owner(&claims[..2]).map(|c| c.1), Some("b/young"));
        assert_eq!(owner(&claims[..1]).map(|c| c.1), Some("a/first-by-name"));
        let untimed = [Timed(None, "z/b"), Timed(None, "z/a")];
        assert_eq!(owner(&untimed).map(|c| c.1), Some("z/a"));
    }

    struct Claim(bool, Option<Time>, &'static str);

    impl Claimant for Claim {
        fn granted(&self) -> bool {
            self.0
        }
        fn created(&self) -> Option<&Time> {
            self.1.as_ref()
        }
        fn service(&self) -> &str {
            self.2
        }
    }

    #[test]
    fn a_granted_claim_beats_any_older_claim_without_a_grant() {
        let claims = [
            Claim(false, Some(at("2020-01-01T00:00:00Z")), "a/oldest"),
            Claim(true, Some(at("2026-02-01T00:00:00Z")), "z/young"),
            Claim(true, None, "b/untimed"),
        ];
        assert_eq!(owner(&claims).map(|c| c.2), Some("z/young"));
        assert_eq!(owner(claims.iter().rev()).map(|c| c.2), Some("z/young"));
        assert_eq!(owner(&claims[..1]).map(|c| c.2), Some("a/oldest"));
        assert_eq!(
            owner([&claims[0], &claims[2]]).map(|c| c.2),
            Some("b/untimed")
        );
    }
}
