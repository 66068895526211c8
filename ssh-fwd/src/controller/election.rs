//! Leader election with a coordination.k8s.io Lease, so only one controller
//! replica allocates ports. The API server arbitrates: every write carries the
//! resourceVersion it read, so two replicas cannot both take the Lease. A
//! leader renews every third of the Lease duration, retries a failed renewal
//! every fifteenth (with backoff, as client-go's retryPeriod), and one that
//! cannot renew for two thirds of the duration stops leading
//! (its writes and watches end) before anyone else may take over, and stands
//! for election again; the process stays up, so its webhook goes on admitting
//! (`controller::run`). Its term runs two thirds of the duration from when it
//! sent its last successful Lease write (a standby can see that write no
//! earlier, and takes over a full duration after seeing it), and every API call
//! it makes as leader is bounded by that term ([`Term::bounded`]): a call the
//! API has not answered by then is abandoned, and none starts after it, so a
//! leader whose connection stalls stops writing well before a standby may
//! start. Expiry is judged by the standby's own clock, as client-go does: a
//! Lease is expired once it has not changed for its duration since the standby
//! last saw it change. The holder's renewTime is its clock, and with skew
//! between nodes it would make a standby take over early (or never).

use std::{
    future::Future,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};

use super::api_error::{self, Grant};
pub use crate::k8s::lease::{Observed, Step, decide};

/// Until when this replica may act as leader.
#[derive(Debug, Default)]
pub struct Term(Mutex<Option<tokio::time::Instant>>);

/// A call refused or abandoned because the term ran out.
#[derive(Debug, thiserror::Error)]
pub enum TermError {
    #[error("not {0}: this replica's term as leader has run out")]
    Over(String),
    #[error("gave up {0}: the API did not answer before this replica's term as leader ran out")]
    Abandoned(String),
}

impl Term {
    pub fn until(&self) -> Option<tokio::time::Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, until: Option<tokio::time::Instant>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = until;
    }

    /// Runs `call` (`what` names it for the error) if the term holds, and
    /// abandons it when the term ends.
    pub async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let now = tokio::time::Instant::now();
        let Some(until) = self.until().filter(|until| *until > now) else {
            return Err(TermError::Over(what.to_owned()).into());
        };
        tokio::time::timeout_at(until, call)
            .await
            .map_err(|_| TermError::Abandoned(what.to_owned()))?
    }
}

pub struct Elector {
    pub api: Api<Lease>,
    pub name: String,
    pub me: String,
    pub duration: Duration,
    pub observed: Mutex<Observed>,
    /// Shared with every writer of this replica.
    pub term: Arc<Term>,
    /// Failed attempts to renew the Lease while leading (each retried
    /// until the term ends).
    pub renewal_errors: prometheus_client::metrics::counter::Counter,
}

impl Elector {
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long a term lasts from the send of a successful Lease write.
    fn term_length(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Returns once this replica holds the Lease. API errors are retried
    /// with exponential backoff and jitter, up to the renew interval.
    pub async fn acquire(&self) -> anyhow::Result<()> {
        use backon::BackoffBuilder as _;
        let retries = || {
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(self.renew_every().max(Duration::from_millis(200)))
                .with_jitter()
                .without_max_times()
                .build()
        };
        let mut backoff = retries();
        let mut announced = false;
        loop {
            match self.attempt().await {
                Ok(None) => {
                    tracing::info!(lease = %self.name, identity = %self.me, "leading");
                    return Ok(());
                }
                Ok(Some(Step::Wait { holder, for_ })) => {
                    if !announced {
                        tracing::info!(lease = %self.name, %holder, "standing by: another replica leads");
                        announced = true;
                    }
                    backoff = retries();
                    tokio::time::sleep(
                        for_.min(self.renew_every()).max(Duration::from_millis(200)),
                    )
                    .await;
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "leader election failed; retrying");
                    tokio::time::sleep(backoff.next().unwrap_or_else(|| self.renew_every())).await;
                }
            }
        }
    }

    /// Renews until it cannot; the error says why leadership ended.
    pub async fn hold(&self) -> anyhow::Error {
        loop {
            tokio::time::sleep(self.renew_every()).await;
            if let Err(why) = self.renew().await {
                self.term.set(None);
                return why;
            }
        }
    }

    /// How soon a failed renewal is tried again (client-go's retryPeriod),
    /// growing with each failure.
    fn retry_every(&self) -> Duration {
        self.duration / 15
    }

    /// One renewal: a failed attempt is tried again every
    /// [`Self::retry_every`] (with backoff and jitter) until the term ends,
    /// so one refused or lost request does not end the leadership. Each
    /// attempt is bounded by the term ([`Term::bounded`]) and by the renew
    /// interval, so one that hangs leaves time for another.
    async fn renew(&self) -> anyhow::Result<()> {
        use backon::BackoffBuilder as _;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.retry_every())
            .with_max_delay(self.renew_every() / 2)
            .with_jitter()
            .without_max_times()
            .build();
        let mut failed = 0_u32;
        loop {
            let outcome = self.term.bounded("renewing the Lease", self.attempt());
            match outcome.await {
                Ok(None) => {
                    if failed > 0 {
                        tracing::info!(lease = %self.name, failed, "renewed the Lease after failed attempts");
                    }
                    return Ok(());
                }
                Ok(Some(Step::Wait { holder, .. })) => {
                    anyhow::bail!("lost the Lease {} to {holder}", self.name);
                }
                Ok(Some(_)) => {}
                Err(e) if e.is::<TermError>() => break,
                Err(e) => {
                    failed += 1;
                    self.renewal_errors.inc();
                    if failed == 1 {
                        tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "cannot renew the Lease; retrying until this term ends");
                    } else {
                        tracing::debug!(lease = %self.name, error = %format!("{e:#}"), failed, "cannot renew the Lease; retrying");
                    }
                }
            }
            let Some(until) = self.term.until() else {
                break;
            };
            let next = tokio::time::Instant::now() + backoff.next().unwrap_or(self.retry_every());
            if next >= until {
                break;
            }
            tokio::time::sleep_until(next).await;
        }
        Err(anyhow::anyhow!(
            "could not renew the Lease {} within {:?}; stopped writing before another replica may take over",
            self.name,
            self.term_length()
        ))
    }

    /// Hands the Lease back so a standby takes over at once.
    pub async fn release(&self) {
        let read = self.api.get_opt(&self.name);
        let Ok(Ok(Some(mut lease))) = tokio::time::timeout(self.renew_every(), read).await else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(&self.me)
        {
            spec.holder_identity = None;
            let params = PostParams::default();
            let write = self.api.replace(&self.name, &params, &lease);
            self.term.set(None);
            if let Ok(Ok(_)) = tokio::time::timeout(self.renew_every(), write).await {
                tracing::info!(lease = %self.name, "released the Lease");
            }
        }
    }

    /// [`Self::try_once`] bounded by the renew interval, so that one
    /// request that hangs leaves time for another.
    async fn attempt(&self) -> anyhow::Result<Option<Step>> {
        tokio::time::timeout(self.renew_every(), self.try_once())
            .await
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "the API did not answer within {:?}",
                    self.renew_every()
                ))
            })
    }

    /// One round: `None` when we hold the Lease afterwards, else the step
    /// that stopped us (a conflicting write shows up as an error).
    async fn try_once(&self) -> anyhow::Result<Option<Step>> {
        let failed = |e, what: &str| {
            api_error::context(e, format!("{what} the Lease {}", self.name), Grant::Lease)
        };
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| failed(e, "reading"))?;
        let now = Timestamp::now();
        let step = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.me,
            &mut self.observed.lock().unwrap_or_else(PoisonError::into_inner),
            Instant::now(),
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
                let sent = tokio::time::Instant::now();
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map_err(|e| failed(e, "creating"))?;
                self.term.set(Some(sent + self.term_length()));
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
                let sent = tokio::time::Instant::now();
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                    .map_err(|e| failed(e, "writing"))?;
                self.term.set(Some(sent + self.term_length()));
                Ok(None)
            }
            _ => Ok(Some(step)),
        }
    }
}
