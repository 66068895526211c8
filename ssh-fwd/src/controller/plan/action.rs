//! The API writes a pass plans, for `apply` to carry out.

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service};

use crate::controller::{pod::PodRef, reservation::Reservation, served::Wait, warn::Problem};

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the pod's Service on `port`; first, when `reserve` is set,
    /// reserve the port (a create that finds it taken is retried next
    /// pass), after deleting `reclaim`, the port's quarantined reservation,
    /// when it is taken from one. Its grant is written right after it is
    /// made. A reservation that records a quarantine cut short
    /// ([`vocabulary::QUARANTINE_CUT`](crate::vocabulary::QUARANTINE_CUT))
    /// is told to the pod.
    Create {
        pod: PodRef,
        port: u16,
        service: Box<Service>,
        reserve: Option<Box<Lease>>,
        reclaim: Option<Box<Reservation>>,
    },
    /// Reserve a port a Service already holds (an existing reservation of
    /// it is as good).
    Reserve { lease: Box<Lease> },
    /// Bind a reservation made at admission to its pod's uid: update it
    /// to `lease`, only if it is still the one read (its uid and
    /// resourceVersion); then tell `pod` if its port was taken from a
    /// quarantine that gave way.
    Bind { lease: Box<Lease>, pod: PodRef },
    /// Quarantine a reservation whose job ended: update it to `lease`
    /// (held by nobody since a time), only if it is still the one read.
    Quarantine { lease: Box<Lease> },
    /// Delete a reservation no longer in use, if it is still this one.
    Release {
        name: String,
        port: u16,
        uid: Option<String>,
        resource_version: Option<String>,
    },
    /// Delete one of our Services, only if it is still the one with this
    /// uid. `unpublish`: first take the endpoint off this pod (if it still
    /// exists); the Service stays until that worked, so a failure is retried
    /// instead of leaving a stale endpoint on a pod no Service points to.
    Delete {
        namespace: String,
        name: String,
        uid: Option<String>,
        why: DeleteReason,
        unpublish: Option<PodRef>,
    },
    /// Grant `port` to the pod's Service `name` (in the pod's namespace):
    /// its status condition, and on a LoadBalancer its ingress with the
    /// port ([`crate::k8s::grant`]).
    SetGrant {
        pod: PodRef,
        name: String,
        port: u16,
    },
    /// Put the pod's Service `name` back as the controller made it with
    /// `patch` (a merge patch carrying the Service's uid), and tell the pod
    /// which `fields` someone changed.
    Restore {
        pod: PodRef,
        name: String,
        fields: Vec<&'static str>,
        patch: Box<serde_json::Value>,
    },
    /// Send the "ssh ..." event (when announcing), then label the pod for
    /// its Service's selector and annotate the endpoint, in one patch.
    Publish {
        pod: PodRef,
        service: String,
        port: u16,
        /// The endpoint is new to the pod: tell the user.
        announce: bool,
        /// Told without the agents' word that the port reaches the pod
        /// (`--publish-wait` passed): why, for a Warning beside it.
        unconfirmed: Option<String>,
    },
    /// Put the pod in its Service's endpoints (the selector label) before
    /// its endpoint may be told, so the agents can map it.
    Label {
        pod: PodRef,
        service: String,
        why: Wait,
    },
    /// Issue the pod's host key and certificate into the Secret `secret`
    /// of its namespace (created only if absent), for `port`, then mark
    /// the pod as issued.
    IssueHostKey {
        pod: PodRef,
        secret: String,
        port: u16,
        /// The pod's deadline, which the certificate does not outlive.
        deadline: Option<crate::controller::pod::Deadline>,
    },
    /// No write: the pod's endpoint waits for `why`. The leader plans for
    /// it again at every pass until it is told.
    Await { pod: PodRef, why: Wait },
    /// The pod cannot be served: tell it why (once) and what fixes it.
    Warn { pod: PodRef, problem: Problem },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    PodGone,
    /// A second Service for a pod that has one.
    Duplicate,
    /// Its pod holds no reservation of `port`; `holder`, the reservation
    /// (Lease) that does.
    LostPort {
        port: u16,
        holder: String,
    },
}

impl Action {
    /// The uid of the pod whose endpoint this action leaves waiting.
    pub fn awaiting(&self) -> Option<&str> {
        match self {
            Self::Label { pod, .. } | Self::Await { pod, .. } => Some(&pod.uid),
            _ => None,
        }
    }
}
