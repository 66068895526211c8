//! From the cached pods and Services to the API writes that make them agree:
//! a pure function of the caches, so every rule is a unit test.
//!
//! Rules: each pod labelled `ssh-fwd.io/ssh=enabled` that is not finished or
//! terminating gets one Service on a free port. Two Services holding one port
//! on the SSH IP: the oldest keeps it (then by name; the agents decide the
//! same way) and a younger one of ours is deleted, so its pod gets another
//! port. A pod is told its endpoint only once its Service holds the port.
//! Services whose pod is gone or no longer asks are deleted.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};
use rand::Rng;

use super::{
    expect::Expectations,
    ports,
    service::{self, Claim, Settings},
};
use crate::k8s::desired::seniority;

/// A pod, by what the API needs to address it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Create {
        pod: PodRef,
        port: u16,
        service: Box<Service>,
    },
    Delete {
        namespace: String,
        name: String,
        why: DeleteReason,
    },
    /// Write `status.loadBalancer.ingress` of a LoadBalancer Service.
    SetIngress {
        namespace: String,
        name: String,
    },
    /// Label the pod for its Service's selector, annotate the endpoint and
    /// send the "ssh ..." event.
    Publish {
        pod: PodRef,
        service: String,
        port: u16,
        /// The endpoint is new to the pod: tell the user.
        announce: bool,
    },
    /// Forget a published endpoint on a pod that no longer has a Service
    /// (it may be gone: not finding it is fine).
    Unpublish {
        namespace: String,
        name: String,
    },
    NoFreePort {
        pod: PodRef,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    PodGone,
    /// A second Service for a pod that has one.
    Duplicate,
    LostPort {
        port: u16,
        holder: String,
    },
}

pub struct Input<'a> {
    pub pods: &'a [std::sync::Arc<Pod>],
    pub services: &'a [std::sync::Arc<Service>],
    /// Our writes the caches do not show yet.
    pub expected: &'a Expectations,
}

pub fn compute(
    input: &Input<'_>,
    settings: &Settings,
    range: &std::ops::RangeInclusive<u16>,
    endpoint_host: &str,
    rng: &mut impl Rng,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let claims: Vec<Claim> = input
        .services
        .iter()
        .flat_map(|s| service::claims(s, settings.ssh_ip))
        .collect();
    let lost = retire_port_losers(&claims, &mut actions);
    let wanted: BTreeMap<&str, &Pod> = input
        .pods
        .iter()
        .filter(|p| asks_for_ssh(p))
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p.as_ref())))
        .collect();
    let (ours, retiring) = sort_out_ours(input.services, &wanted, &lost, &mut actions);

    let mut used: BTreeSet<u16> = claims.iter().map(|c| c.port).collect();
    used.extend(input.expected.ports());
    for (uid, pod) in wanted {
        let pod_ref = PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_owned(),
        };
        if let Some(svc) = ours.get(uid) {
            let published = input.expected.published(uid);
            publish(svc, pod, pod_ref, published, endpoint_host, &mut actions);
        } else if retiring.contains(uid) {
            // A new port next pass, once the old Service (same name) is gone.
        } else if input.expected.creating(uid) {
            // Created; the cache will show it.
        } else if let Some(port) = ports::pick_free(range, &used, rng) {
            used.insert(port);
            actions.push(Action::Create {
                service: Box::new(service::build(pod, port, settings)),
                pod: pod_ref,
                port,
            });
        } else {
            actions.push(Action::NoFreePort { pod: pod_ref });
        }
    }
    actions
}

/// Deletes our Services that hold a port an older Service holds; returns
/// their `namespace/name`s.
fn retire_port_losers(claims: &[Claim], actions: &mut Vec<Action>) -> BTreeSet<String> {
    let losers = port_losers(claims);
    for (service, holder) in &losers {
        let (namespace, name) = split(&service.service);
        actions.push(Action::Delete {
            namespace,
            name,
            why: DeleteReason::LostPort {
                port: service.port,
                holder: holder.clone(),
            },
        });
    }
    losers.into_iter().map(|(c, _)| c.service).collect()
}

/// Our Services by the uid of the pod they serve (the oldest when there are
/// several), and the uids whose Service is being retired for losing its
/// port. Services of pods that no longer ask, and extra ones, are deleted.
fn sort_out_ours<'a>(
    services: &'a [std::sync::Arc<Service>],
    wanted: &BTreeMap<&str, &Pod>,
    lost: &BTreeSet<String>,
    actions: &mut Vec<Action>,
) -> (BTreeMap<&'a str, &'a Service>, BTreeSet<&'a str>) {
    let mut by_age: Vec<&Service> = services
        .iter()
        .map(AsRef::as_ref)
        .filter(|s| service::is_managed(s))
        .collect();
    by_age.sort_by(|a, b| {
        let (name_a, name_b) = (full_name(a), full_name(b));
        seniority(&a.metadata.creation_timestamp, &name_a)
            .cmp(&seniority(&b.metadata.creation_timestamp, &name_b))
    });
    let mut ours = BTreeMap::new();
    let mut retiring = BTreeSet::new();
    for svc in by_age {
        let key = full_name(svc);
        let uid = service::label(svc, service::POD_UID_LABEL).unwrap_or("");
        if lost.contains(&key) {
            retiring.insert(uid);
            continue;
        }
        let why = if !wanted.contains_key(uid) {
            DeleteReason::PodGone
        } else if ours.contains_key(uid) {
            DeleteReason::Duplicate
        } else {
            ours.insert(uid, svc);
            continue;
        };
        let (namespace, name) = split(&key);
        if why == DeleteReason::PodGone
            && let Some(pod) = pod_name_of(svc)
        {
            actions.push(Action::Unpublish {
                namespace: namespace.clone(),
                name: pod,
            });
        }
        actions.push(Action::Delete {
            namespace,
            name,
            why,
        });
    }
    (ours, retiring)
}

/// What a pod with a Service still needs: the LoadBalancer status, then the
/// label, annotation and event.
fn publish(
    svc: &Service,
    pod: &Pod,
    pod_ref: PodRef,
    published: Option<&str>,
    endpoint_host: &str,
    actions: &mut Vec<Action>,
) {
    let Some(port) = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref()?.first())
        .and_then(|p| u16::try_from(p.port).ok())
    else {
        return;
    };
    let name = svc.metadata.name.clone().unwrap_or_default();
    let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
    if is_lb && !has_ingress(svc) {
        actions.push(Action::SetIngress {
            namespace: pod_ref.namespace.clone(),
            name: name.clone(),
        });
    }
    let endpoint = format!("{endpoint_host}:{port}");
    let meta = &pod.metadata;
    // Published in a pass the pod cache has not caught up with: done.
    if published == Some(endpoint.as_str()) {
        return;
    }
    let annotated = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(service::ENDPOINT_ANNOTATION))
        == Some(&endpoint);
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(service::SERVICE_LABEL))
        == Some(&name);
    if !(annotated && labelled) {
        actions.push(Action::Publish {
            pod: pod_ref,
            service: name,
            port,
            announce: !annotated,
        });
    }
}

fn has_ingress(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

/// Labelled, not terminating, not finished.
pub fn asks_for_ssh(pod: &Pod) -> bool {
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(service::SSH_LABEL))
        .is_some_and(|v| v == service::SSH_ENABLED);
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    labelled && !finished && pod.metadata.deletion_timestamp.is_none()
}

/// Our Services that hold a port an older Service also holds, each with the
/// holder; the same order the agents use to pick a winner.
fn port_losers(claims: &[Claim]) -> Vec<(Claim, String)> {
    let mut by_port: BTreeMap<u16, Vec<&Claim>> = BTreeMap::new();
    for claim in claims {
        by_port.entry(claim.port).or_default().push(claim);
    }
    let mut losers = Vec::new();
    for (_, mut holders) in by_port {
        holders.sort_by(|a, b| {
            seniority(&a.created, &a.service).cmp(&seniority(&b.created, &b.service))
        });
        holders.dedup_by(|a, b| a.service == b.service);
        let winner = holders[0].service.clone();
        for loser in holders.into_iter().skip(1).filter(|c| c.managed) {
            losers.push((loser.clone(), winner.clone()));
        }
    }
    losers
}

fn full_name(s: &Service) -> String {
    format!(
        "{}/{}",
        s.metadata.namespace.as_deref().unwrap_or(""),
        s.metadata.name.as_deref().unwrap_or("")
    )
}

fn pod_name_of(s: &Service) -> Option<String> {
    s.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "Pod")
        .map(|o| o.name.clone())
}

fn split(key: &str) -> (String, String) {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    (ns.to_owned(), name.to_owned())
}

#[cfg(test)]
mod tests;
