//! One admission: read the review, reserve a port for a labelled pod being
//! created (nothing for a dry run), and answer with the mutation. The
//! reservation is bounded by a deadline shorter than the webhook's
//! `timeoutSeconds`: past it the pod is admitted without a port, and the
//! controller gives it one once it exists, rather than the API server
//! timing the call out. The API server's timeout covers the whole call, so
//! the deadline counts from the connection's accept (`tls::Arrived`), and
//! a shorter `?timeout=` in the URL shortens it.

use std::{
    collections::BTreeSet,
    ops::RangeInclusive,
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, runtime::reflector::Store};
use serde_json::{Value, json};

use super::{
    budget::Budget,
    metrics::{AdmissionMetrics, Outcome},
    mutate::{self, Injection, Port},
    review::{self, Request},
};
use crate::{
    controller::{
        api_error::{self, Grant},
        ports,
        reservation::{self, Holder, LeaseView, Reservation, ReserveError},
    },
    vocabulary,
};

/// What an admission needs.
pub struct Admitter {
    pub injection: Injection,
    pub reservations: Api<Lease>,
    /// The reservations as last watched: which ports to try first.
    pub store: Store<LeaseView>,
    pub ssh_ip: std::net::IpAddr,
    pub range: RangeInclusive<u16>,
    /// `--port-reuse-after`: how long the port of a job that ended goes to
    /// no other while another is free.
    pub reuse_after: Duration,
    /// How long a reservation may take before the pod is admitted without.
    pub deadline: Duration,
    /// How many reservations may wait for their pod at once.
    pub budget: Budget,
    pub metrics: AdmissionMetrics,
}

/// An HTTP status and the JSON body to answer with.
pub type Answer = (u16, Value);

/// The least an admission keeps back from the API server's timeout to
/// answer in (a fifth of it, when that is more).
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

impl Admitter {
    /// [`Admitter::review_within`] from now, with `--webhook-deadline`.
    #[cfg(test)]
    pub async fn review(&self, body: &[u8]) -> Answer {
        self.review_within(body, Instant::now(), self.deadline)
            .await
    }

    /// The time an admission that arrived with the API server's `timeout`
    /// (`?timeout=` of the URL) has for its reservation: the deadline, or
    /// less when that timeout is shorter, less a margin to answer in.
    pub fn budget(&self, timeout: Option<Duration>) -> Duration {
        match timeout {
            Some(timeout) => {
                let margin = (timeout / 5).max(ANSWER_MARGIN);
                self.deadline.min(timeout.saturating_sub(margin))
            }
            None => self.deadline,
        }
    }

    /// Answers one review body, `budget` after `started` at the latest
    /// (past it, without a port); never fails: a body that is not a
    /// review gets a 400 saying why, a request that cannot be served is
    /// allowed unchanged or refused with a message.
    pub async fn review_within(&self, body: &[u8], started: Instant, budget: Duration) -> Answer {
        let (answer, outcome) = match review::parse(body) {
            Ok(request) => self.admit(&request, started, budget).await,
            Err(e) => {
                tracing::warn!(error = %e, "not an AdmissionReview; answered 400");
                let message = format!("ssh-fwd webhook: {e}");
                (
                    (
                        400,
                        json!({"kind": "Status", "status": "Failure", "message": message, "code": 400}),
                    ),
                    Outcome::Malformed,
                )
            }
        };
        self.metrics.observe(outcome, started.elapsed());
        answer
    }

    async fn admit(
        &self,
        request: &Request,
        started: Instant,
        budget: Duration,
    ) -> (Answer, Outcome) {
        let is_pod = request.kind.group.is_empty() && request.kind.kind == "Pod";
        if !is_pod || request.operation != "CREATE" {
            return (allow_unchanged(request), Outcome::Skipped);
        }
        let pod = &request.object;
        if !pod.is_object() || !pod["spec"].is_object() {
            let message = "ssh-fwd webhook: the request's object is not a Pod with a spec";
            tracing::warn!(uid = %request.uid, "{message}");
            return (
                (200, review::deny(&request.uid, 400, message)),
                Outcome::Malformed,
            );
        }
        if pod["metadata"]["labels"][vocabulary::SSH] != vocabulary::SSH_ENABLED {
            return (allow_unchanged(request), Outcome::Skipped);
        }
        let namespace = request
            .namespace
            .clone()
            .or_else(|| pod["metadata"]["namespace"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let shown = shown_name(request, pod);
        let (port, outcome) = self
            .port(request, &namespace, &shown, started, budget)
            .await;
        let mutation = mutate::mutate(pod, &port, &self.injection);
        match &port {
            Port::Reserved { port, .. } => {
                tracing::info!(pod = %format!("{namespace}/{shown}"), port, took_ms = started.elapsed().as_millis() as u64, "admitted with a reserved port")
            }
            Port::DryRun { port } => {
                tracing::debug!(pod = %format!("{namespace}/{shown}"), port, "dry run: nothing reserved")
            }
            // Past a cap under a flood of forged reviews, a warning each
            // would flood the log too: the metric counts them.
            Port::None { why } if outcome == Outcome::Capped => {
                tracing::debug!(pod = %format!("{namespace}/{shown}"), %why, "admitted without a port")
            }
            Port::None { why } => {
                tracing::warn!(pod = %format!("{namespace}/{shown}"), %why, "admitted without a port; the controller assigns one once the pod exists")
            }
        }
        for warning in &mutation.warnings {
            tracing::info!(pod = %format!("{namespace}/{shown}"), "{warning}");
        }
        let mut warnings = mutation.warnings;
        if let Port::DryRun { port } = port {
            warnings.push(format!(
                "ssh-fwd: dry run: port {port} was not reserved; a real create gets its own"
            ));
        }
        (
            (200, review::allow(&request.uid, &mutation.patch, &warnings)),
            outcome,
        )
    }

    /// The port for a pod being admitted: none past a provisional cap
    /// ([`Budget`]).
    async fn port(
        &self,
        request: &Request,
        namespace: &str,
        shown: &str,
        started: Instant,
        budget: Duration,
    ) -> (Port, Outcome) {
        let quarantine = ports::Quarantine {
            after: self.reuse_after,
            now: k8s_openapi::jiff::Timestamp::now(),
        };
        if request.dry_run {
            let watched = self.watched();
            let used: BTreeSet<u16> = watched.iter().map(|r| r.port).collect();
            let resting = watched.iter().filter_map(Reservation::resting);
            let pick = ports::pick(
                &self.range,
                &|p| used.contains(&p),
                resting,
                &quarantine,
                &mut rand::rng(),
            );
            return match pick {
                Some(pick) => (Port::DryRun { port: pick.port() }, Outcome::DryRun),
                None => (Port::None { why: self.full() }, Outcome::NoPort),
            };
        }
        let token = reservation::new_token();
        let (watched, slot) =
            (self.budget).take(|| self.watched(), namespace, &token, Instant::now());
        let slot = match slot {
            Ok(slot) => slot,
            Err(capped) => {
                let why = capped.to_string();
                return (Port::None { why }, Outcome::Capped);
            }
        };
        let holder = Holder::Admitted {
            namespace: namespace.to_owned(),
            name: shown.to_owned(),
            token: token.clone(),
        };
        let left = budget.saturating_sub(started.elapsed());
        let reserved = self.reserve(&watched, &holder, &quarantine);
        match tokio::time::timeout(left, reserved).await {
            Ok(Ok(pick)) => {
                let port = pick.port();
                if let ports::Pick::Resting {
                    since, early: true, ..
                } = pick
                {
                    tracing::warn!(pod = %format!("{namespace}/{shown}"), port, %since, "every other port is taken: the quarantine of this one gave way (--port-reuse-after)");
                }
                slot.made(reservation::name(self.ssh_ip, port));
                (Port::Reserved { port, token }, Outcome::Reserved)
            }
            Ok(Err(ReserveError::Full(_))) => (Port::None { why: self.full() }, Outcome::NoPort),
            Ok(Err(ReserveError::Api { port, source })) => (
                Port::None {
                    why: format!("no port reserved at admission: {}", refused(port, source)),
                },
                Outcome::NoPort,
            ),
            Err(_) => {
                let why = format!(
                    "no port reserved at admission: the API server did not answer within {}",
                    humantime::format_duration(budget)
                );
                (Port::None { why }, Outcome::NoPort)
            }
        }
    }

    /// [`reservation::reserve_free`], tried again after a failure that may
    /// pass ([`passing`]; the caller's deadline ends it). Any other failure
    /// is the answer at once: a refusal (RBAC, a missing namespace, an
    /// invalid object) would only come again until the deadline, and every
    /// SSH pod would wait that long.
    async fn reserve(
        &self,
        watched: &[Reservation],
        holder: &Holder,
        quarantine: &ports::Quarantine,
    ) -> Result<ports::Pick, ReserveError> {
        let mut pause = Duration::from_millis(50);
        loop {
            match reservation::reserve_free(
                &self.reservations,
                self.ssh_ip,
                &self.range,
                watched,
                holder,
                quarantine,
            )
            .await
            {
                Err(ReserveError::Api { port, source }) if passing(&source) => {
                    tracing::warn!(port, error = %source, "reserving a port failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(800));
                }
                done => return done,
            }
        }
    }

    /// The reservations, as last watched.
    fn watched(&self) -> Vec<Reservation> {
        self.store
            .state()
            .iter()
            .filter_map(|lease| reservation::read(lease, self.ssh_ip))
            .collect()
    }

    fn full(&self) -> String {
        format!(
            "no free SSH port at admission: all of {}-{} are taken",
            self.range.start(),
            self.range.end()
        )
    }
}

/// Whether a failed reservation may succeed when tried again: the API
/// server overloaded (429) or failing (5xx), or no answer at all (the
/// connection failed or timed out).
fn passing(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Why the API server would not reserve `port`, with the RBAC fix for a
/// 403.
fn refused(port: u16, source: kube::Error) -> String {
    let kube::Error::Api(status) = &source else {
        return format!("reserving port {port} failed: {source}");
    };
    let what = format!(
        "the API server answered {} {} to the reservation of port {port} ({})",
        status.code, status.reason, status.message
    );
    // The top context only: the RBAC fix for a 403, not the error again.
    api_error::context(source, what, Grant::Lease).to_string()
}

/// The name to log and show as the reservation's holder: the pod's name,
/// or its generateName prefix with `*` (the name is made after admission).
fn shown_name(request: &Request, pod: &Value) -> String {
    if let Some(name) = pod["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    if !request.name.is_empty() {
        return request.name.clone();
    }
    match pod["metadata"]["generateName"].as_str() {
        Some(prefix) => format!("{prefix}*"),
        None => "(unnamed)".to_owned(),
    }
}

fn allow_unchanged(request: &Request) -> Answer {
    (
        200,
        review::allow(&request.uid, &json_patch::Patch(vec![]), &[]),
    )
}

#[cfg(test)]
mod tests;
