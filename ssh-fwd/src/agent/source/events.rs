//! An Event on each Service the agents skip or serve only in part, with the
//! reason and the fix, where `kubectl describe service` shows it: a
//! decision that was only a warning in every agent's log.
//!
//! Every agent sees the same Services and reaches the same decision, so
//! the Event's name is made of the Service, the reason and the message:
//! the first agent to write it creates it, and the others' writes are
//! refused as already there. Fifty nodes make one Event, not fifty.
//!
//! Written in the background at a bounded rate; an Event that cannot be
//! written is dropped (the log and `ssh_fwd_invalid_services` still tell),
//! and the reconcile loop never waits for one.

use std::time::Duration;

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use crate::{source::kubernetes::desired::Note, vocabulary};

/// Events waiting to be written; more are dropped.
const QUEUE: usize = 256;
/// The time between two writes of one agent.
const EVERY: Duration = Duration::from_millis(100);
/// The longest a write is waited for.
const WITHIN: Duration = Duration::from_secs(5);

/// What the Event says of one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub namespace: String,
    pub service: String,
    pub reason: &'static str,
    pub message: String,
}

/// Reasons, one per kind of decision.
pub mod reason {
    pub const STYLE_NOT_HONOURED: &str = "SSHFwdStyleNotHonoured";
    pub const NODE_PORTS: &str = "SSHFwdNodePortsAllocated";
    pub const NOT_GRANTED: &str = "SSHFwdPortNotGranted";
    pub const INVALID: &str = "SSHFwdServiceInvalid";
    pub const CONFLICT: &str = "SSHFwdFrontendTaken";
    pub const MANY_ENDPOINTS: &str = "SSHFwdManyEndpoints";
    pub const NO_ENDPOINT_OF_FAMILY: &str = "SSHFwdNoEndpointOfFamily";
    pub const NARROWED: &str = "SSHFwdGuardNarrowed";
    pub const LEFT_OUT: &str = "SSHFwdOverCapacity";
}

/// The Events a note asks for: warnings about a Service's own shape or
/// claims. A note that says nothing is wrong (no ready endpoint yet, no
/// grant yet) asks for none.
pub fn skips(note: &Note) -> Vec<Skip> {
    let one = |service: &str, reason: &'static str, message: String| {
        split(service).map(|(namespace, service)| Skip {
            namespace,
            service,
            reason,
            message,
        })
    };
    match note {
        Note::StyleNotHonoured { service, style } => one(
            service,
            reason::STYLE_NOT_HONOURED,
            format!(
                "ssh-fwd ignores this Service: its SSH IP is in {style}, a shape the agents' --honour-styles leaves out; use the shape the controller makes (type LoadBalancer, loadBalancerClass {})",
                vocabulary::LB_CLASS
            ),
        )
        .into_iter()
        .collect(),
        Note::NodePortsAllocated { service } => one(
            service,
            reason::NODE_PORTS,
            "ssh-fwd ignores this Service: it lets Kubernetes open NodePorts on every node; set spec.allocateLoadBalancerNodePorts: false".to_owned(),
        )
        .into_iter()
        .collect(),
        Note::NotGranted {
            service,
            port: Some(port),
        } => one(
            service,
            reason::NOT_GRANTED,
            format!(
                "port {port} on the SSH IP stays closed to this Service: the ssh-fwd controller did not grant it; only the port the controller grants a pod reaches it"
            ),
        )
        .into_iter()
        .collect(),
        Note::Invalid { service, problem } => one(
            service,
            reason::INVALID,
            format!("ssh-fwd skips this Service: {problem}"),
        )
        .into_iter()
        .collect(),
        // The winner is another tenant's, maybe: not named.
        Note::Conflict {
            frontend, loser, ..
        } => one(
            loser,
            reason::CONFLICT,
            format!(
                "{frontend} is another Service's (the one the controller granted it to, or an older one); this Service gets no traffic there"
            ),
        )
        .into_iter()
        .collect(),
        Note::ManyReadyEndpoints {
            service,
            chosen,
            ready,
        } => one(
            service,
            reason::MANY_ENDPOINTS,
            format!(
                "{ready} ready endpoints; ssh-fwd forwards to one ({chosen}): an SSH Service should select one pod"
            ),
        )
        .into_iter()
        .collect(),
        Note::NoEndpointOfFamily { service, family } => one(
            service,
            reason::NO_ENDPOINT_OF_FAMILY,
            format!(
                "the Service exposes an {family} address but has endpoints only of the other family, so its ports there stay closed: make it dual-stack (spec.ipFamilyPolicy: PreferDualStack) or drop the address"
            ),
        )
        .into_iter()
        .collect(),
        Note::Narrowed { service, cut } => one(
            service,
            reason::NARROWED,
            format!(
                "the Service asks for more than the operator's --allow or --syn-rate admit and gets those instead: {}",
                cut.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
        .into_iter()
        .collect(),
        Note::OverCapacity { left_out, .. } => left_out
            .iter()
            .filter_map(|service| {
                one(
                    service,
                    reason::LEFT_OUT,
                    "the nodes hold more mappings than --max-mappings; this Service's, among the newest, are left out: the operator raises --max-mappings or narrows the port range".to_owned(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `namespace/name` apart; `None` for a name without a namespace.
fn split(service: &str) -> Option<(String, String)> {
    let (namespace, name) = service.split_once('/')?;
    let name = name.split(':').next().unwrap_or(name);
    (!namespace.is_empty() && !name.is_empty()).then(|| (namespace.to_owned(), name.to_owned()))
}

/// The Event for `skip`, named the same on every node.
pub fn event(skip: &Skip, node: &str, now: Timestamp) -> Event {
    let digest = Sha256::digest(format!("{}\n{}", skip.reason, skip.message).as_bytes());
    let suffix: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    // At most 253 characters; a Service's name is at most 63.
    let name = format!("{}.ssh-fwd.{suffix}", skip.service);
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(skip.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".into()),
        reason: Some(skip.reason.into()),
        action: Some("Serve".into()),
        note: Some(within(&skip.message, NOTE_MAX)),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            name: Some(skip.service.clone()),
            namespace: Some(skip.namespace.clone()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(vocabulary::AGENT.into()),
        reporting_instance: Some(node.to_owned()),
        ..Event::default()
    }
}

/// The API server refuses a longer note.
const NOTE_MAX: usize = 1024;

/// `text` cut to at most `max` bytes, on a character boundary.
fn within(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The writer's handle.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<Skip>,
}

impl Events {
    /// Starts the writer; `node` is what the Events name as reporting
    /// instance.
    pub fn start(client: kube::Client, node: String) -> Self {
        let (queue, skips) = mpsc::channel(QUEUE);
        tokio::spawn(write(client, node, skips));
        Self { queue }
    }

    /// Queues the Events `note` asks for; dropped when the queue is full.
    pub fn note(&self, note: &Note) {
        for skip in skips(note) {
            if self.queue.try_send(skip).is_err() {
                tracing::debug!(
                    "too many Service events waiting; dropped one (the log tells the same)"
                );
            }
        }
    }
}

async fn write(client: kube::Client, node: String, mut skips: mpsc::Receiver<Skip>) {
    let mut forbidden_told = false;
    let mut pace = tokio::time::interval(EVERY);
    while let Some(skip) = skips.recv().await {
        pace.tick().await;
        let api: Api<Event> = Api::namespaced(client.clone(), &skip.namespace);
        let event = event(&skip, &node, Timestamp::now());
        let sent = tokio::time::timeout(WITHIN, api.create(&PostParams::default(), &event)).await;
        match sent {
            Ok(Ok(_)) => {}
            // Another agent wrote it first: one Event for every node.
            Ok(Err(kube::Error::Api(e))) if e.code == 409 => {}
            Ok(Err(kube::Error::Api(e))) if e.code == 403 && !forbidden_told => {
                forbidden_told = true;
                tracing::warn!(
                    namespace = skip.namespace,
                    error = %e.message,
                    "cannot write Events on the Services ssh-fwd skips; grant the agent create on events.k8s.io events in every namespace (deploy/base/rbac-agent.yaml)"
                );
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, service = skip.service, "cannot write a Service event")
            }
            Err(_) => tracing::debug!(
                service = skip.service,
                "a Service event was not answered in time"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_decision_an_operator_must_act_on_makes_an_event_that_says_the_fix() {
        let note = Note::StyleNotHonoured {
            service: "team-a/ssh-job".into(),
            style: "externalIPs",
        };
        let [skip] = skips(&note).try_into().unwrap();
        assert_eq!(
            (skip.namespace.as_str(), skip.service.as_str()),
            ("team-a", "ssh-job")
        );
        assert_eq!(skip.reason, reason::STYLE_NOT_HONOURED);
        assert!(skip.message.contains("--honour-styles"), "{}", skip.message);
        let quiet = Note::NoReadyEndpoint {
            service: "team-a/ssh-job".into(),
        };
        assert!(skips(&quiet).is_empty(), "nothing is wrong yet");
        let over = Note::OverCapacity {
            excess: 2,
            left_out: vec!["a/x".into(), "b/y".into()],
        };
        assert_eq!(skips(&over).len(), 2, "one per Service left out");
    }

    #[test]
    fn every_node_names_the_same_event_and_another_reason_another() {
        let skip = Skip {
            namespace: "team-a".into(),
            service: "ssh-job".into(),
            reason: reason::INVALID,
            message: "ssh-fwd skips this Service: x".into(),
        };
        let (a, b) = (
            event(&skip, "node-1", Timestamp::now()),
            event(&skip, "node-2", Timestamp::now()),
        );
        assert_eq!(a.metadata.name, b.metadata.name);
        assert!(
            a.metadata
                .name
                .as_deref()
                .unwrap()
                .starts_with("ssh-job.ssh-fwd."),
            "{:?}",
            a.metadata.name
        );
        let other = Skip {
            message: "ssh-fwd skips this Service: y".into(),
            ..skip.clone()
        };
        assert_ne!(
            event(&other, "node-1", Timestamp::now()).metadata.name,
            a.metadata.name
        );
        assert_eq!(a.regarding.unwrap().kind.as_deref(), Some("Service"));
    }

    #[test]
    fn a_multi_port_mapping_name_and_a_bare_name_are_read_right() {
        assert_eq!(
            split("ns/svc:ssh"),
            Some(("ns".to_owned(), "svc".to_owned()))
        );
        assert_eq!(split("svc"), None);
        assert_eq!(split("/svc"), None);
    }
}
