//! Leader election with a coordination.k8s.io Lease, so only one controller
//! replica allocates ports. The API server arbitrates: every write carries the
//! resourceVersion it read, so two replicas cannot both take the Lease.
//! A leader that cannot renew for two thirds of the Lease duration stops
//! (the process exits and restarts as a standby) before anyone else may
//! take over.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{Api, api::PostParams};

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

pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == me {
        return Step::Renew;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let expires = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .and_then(|t| t.0.checked_add(duration).ok());
    match expires {
        Some(expires) if !holder.is_empty() && expires > now => Step::Wait {
            holder: holder.to_owned(),
            for_: Duration::try_from(expires.duration_since(now)).unwrap_or_default(),
        },
        _ => Step::Take,
    }
}

pub struct Elector {
    pub api: Api<Lease>,
    pub name: String,
    pub me: String,
    pub duration: Duration,
}

impl Elector {
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&self) -> anyhow::Result<()> {
        let mut announced = false;
        loop {
            match self.try_once().await {
                Ok(None) => {
                    tracing::info!(lease = %self.name, identity = %self.me, "leading");
                    return Ok(());
                }
                Ok(Some(Step::Wait { holder, for_ })) => {
                    if !announced {
                        tracing::info!(lease = %self.name, %holder, "standing by: another replica leads");
                        announced = true;
                    }
                    tokio::time::sleep(
                        for_.min(self.renew_every()).max(Duration::from_millis(200)),
                    )
                    .await;
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "leader election failed; retrying");
                    tokio::time::sleep(self.renew_every()).await;
                }
            }
        }
    }

    /// Renews until it cannot; the error says why leadership ended.
    pub async fn hold(&self) -> anyhow::Error {
        let deadline = self.duration * 2 / 3;
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.renew_every()).await;
            match self.try_once().await {
                Ok(None) => renewed = tokio::time::Instant::now(),
                Ok(Some(Step::Wait { holder, .. })) => {
                    return anyhow::anyhow!("lost the Lease {} to {holder}", self.name);
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "cannot renew the Lease; retrying")
                }
            }
            if renewed.elapsed() > deadline {
                return anyhow::anyhow!(
                    "could not renew the Lease {} for {deadline:?}; stopping before another replica takes over",
                    self.name
                );
            }
        }
    }

    /// Hands the Lease back so a standby takes over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(&self.me)
        {
            spec.holder_identity = None;
            if self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .is_ok()
            {
                tracing::info!(lease = %self.name, "released the Lease");
            }
        }
    }

    /// One round: `None` when we hold the Lease afterwards, else the step
    /// that stopped us (a conflicting write shows up as an error).
    async fn try_once(&self) -> anyhow::Result<Option<Step>> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .context("reading the Lease")?;
        let now = Timestamp::now();
        let step = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.me,
            now,
        );
        let seconds = i32::try_from(self.duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1);
        match (&step, current) {
            (Step::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.me.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .context("creating the Lease")?;
                Ok(None)
            }
            (Step::Take | Step::Renew, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if step == Step::Take {
                    spec.holder_identity = Some(self.me.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(MicroTime(now));
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                    .context("writing the Lease")?;
                Ok(None)
            }
            _ => Ok(Some(step)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, renewed: Timestamp, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_missing_lease_is_created_and_our_own_is_renewed() {
        let now = Timestamp::now();
        assert_eq!(decide(None, "a", now), Step::Create);
        assert_eq!(decide(Some(&held_by("a", now, 15)), "a", now), Step::Renew);
    }

    #[test]
    fn a_live_lease_of_another_replica_is_waited_for() {
        let now = Timestamp::now();
        let renewed = now - SignedDuration::from_secs(5);
        let Step::Wait { holder, for_ } = decide(Some(&held_by("b", renewed, 15)), "a", now) else {
            panic!("expected to wait")
        };
        assert_eq!(holder, "b");
        assert_eq!(for_.as_secs(), 10);
    }

    #[test]
    fn an_expired_or_released_lease_is_taken() {
        let now = Timestamp::now();
        let renewed = now - SignedDuration::from_secs(16);
        assert_eq!(
            decide(Some(&held_by("b", renewed, 15)), "a", now),
            Step::Take
        );
        assert_eq!(decide(Some(&held_by("", now, 15)), "a", now), Step::Take);
        assert_eq!(decide(Some(&LeaseSpec::default()), "a", now), Step::Take);
    }
}
