//! From the cached pods and Services to the API writes that make them agree:
//! a pure function of the caches, so every rule is a unit test.
//!
//! Rules: each pod labelled `ssh-fwd.io/ssh=enabled` that is not finished or
//! terminating gets one Service on a free port. Two Services holding one port
//! on the SSH IP: the oldest keeps it (then by name; the agents decide the
//! same way) and a younger one of ours is deleted, so its pod gets another
//! port. A pod is told its endpoint only once its Service holds the port
//! and, for a LoadBalancer, once the cache shows the ingress address written.
//! Services whose pod is gone or no longer asks are deleted, after the
//! endpoint is taken off the pod. A pod that cannot be served (bad
//! target-port annotation, its Service name taken by someone else's, no
//! free port) gets a Warning instead.

use crate::vocabulary;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Time};
use rand::Rng;

pub use super::warn::Problem;
use super::{
    expect::Expectations,
    pod::{PodRef, PodView, asks_for_ssh},
    reservation::upkeep::Free,
    service::{self, Settings},
    ssh_ips::{self, SshIps},
    world::World,
};
pub use action::{Action, DeleteReason};
use races::retire_port_losers;
use scope::{PortSet, Scope};

mod action;
mod races;
pub mod scope;
mod serve;

/// What one pass reads: the world, the part of it to plan for, and what
/// the leader remembers.
pub struct Pass<'a> {
    pub world: &'a World,
    pub scope: &'a Scope,
    /// Our writes the caches do not show yet.
    pub expected: &'a Expectations,
    /// The endpoint variable the webhook sets, when it runs: a pod that
    /// gets its port only now is warned that it lacks it.
    pub variable: Option<&'a str>,
}

/// The writes that make the part of the world `pass.scope` names agree
/// with the rules (see the module's doc).
pub fn compute(
    pass: &Pass<'_>,
    settings: &Settings,
    range: &std::ops::RangeInclusive<u16>,
    endpoint_host: &str,
    rng: &mut impl Rng,
) -> Vec<Action> {
    let world = pass.world;
    let mut actions = Vec::new();
    retire_port_losers(world, pass.scope.ports(world), &mut actions);
    let (ours, retiring) = sort_out_ours(world, pass.scope, &mut actions);
    let taken = PortSet {
        world,
        expected: pass.expected,
    };
    let mut handed = BTreeSet::new();
    for (uid, pod) in pass.scope.pods(world) {
        if !asks_for_ssh(pod) {
            continue;
        }
        let pod_ref = PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_owned(),
        };
        if let Some(svc) = ours.get(uid) {
            let published = pass.expected.published(uid);
            let to = Target {
                ips: &settings.ssh_ips,
                host: endpoint_host,
            };
            publish(svc, pod, pod_ref, published, &to, &mut actions);
            continue;
        }
        // Retiring: a new port next pass, once the old Service (same name)
        // is gone. Creating: the cache will show it.
        if !retiring.contains(uid) && !pass.expected.creating(uid) {
            let mut free = Free {
                range,
                taken: &taken,
                handed: &mut handed,
                rng: &mut *rng,
            };
            let new = serve::New {
                world,
                settings,
                variable: pass.variable,
            };
            actions.extend(serve::serve_new(pod, pod_ref, &new, &mut free));
        }
    }
    actions
}

/// Where a published endpoint points.
struct Target<'a> {
    ips: &'a SshIps,
    host: &'a str,
}

/// Our Services by the uid of the pod they serve (the oldest when there are
/// several), and the uids whose Service is being retired for losing its
/// port, for the pods the scope names. Services of pods that no longer
/// ask, and extra ones, are deleted (oldest first).
fn sort_out_ours<'a>(
    world: &'a World,
    scope: &'a Scope,
    actions: &mut Vec<Action>,
) -> (BTreeMap<&'a str, &'a Service>, BTreeSet<&'a str>) {
    let mut ours = BTreeMap::new();
    let mut retiring = BTreeSet::new();
    let mut deletes = Vec::new();
    for uid in scope.groups(world) {
        let wanted = world.pod(uid).is_some_and(asks_for_ssh);
        let mut by_age: Vec<&Service> = world.ours_of(uid).collect();
        by_age.sort_by_cached_key(|s| age(s));
        for svc in by_age {
            if races::lost(world, svc) {
                retiring.insert(uid);
                continue;
            }
            let why = if !wanted {
                DeleteReason::PodGone
            } else if ours.contains_key(uid) {
                DeleteReason::Duplicate
            } else {
                ours.insert(uid, svc);
                continue;
            };
            let key = full_name(svc);
            let (namespace, name) = split(&key);
            let unpublish = match why {
                DeleteReason::PodGone => pod_of(svc, &namespace),
                _ => None,
            };
            let delete = Action::Delete {
                namespace,
                name,
                uid: svc.metadata.uid.clone(),
                why,
                unpublish,
            };
            deletes.push((age(svc), delete));
        }
    }
    deletes.sort_by(|a, b| a.0.cmp(&b.0));
    actions.extend(deletes.into_iter().map(|(_, delete)| delete));
    (ours, retiring)
}

/// Oldest first, a missing timestamp last, then by name.
fn age(s: &Service) -> (bool, Option<Time>, String) {
    let created = s.metadata.creation_timestamp.clone();
    (created.is_none(), created, full_name(s))
}

/// What a pod with a Service still needs: the LoadBalancer status, then (in
/// a later pass, once the cache shows the status) the label, annotation and
/// event, so "Connected!" is never sent for an address not yet written.
fn publish(
    svc: &Service,
    pod: &PodView,
    pod_ref: PodRef,
    published: Option<&str>,
    to: &Target<'_>,
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
    let is_lb = service::is_load_balancer(svc);
    if is_lb && !has_ingress(svc, to.ips) {
        actions.push(Action::SetIngress {
            namespace: pod_ref.namespace.clone(),
            name,
        });
        return;
    }
    let endpoint = ssh_ips::endpoint(to.host, port);
    let meta = &pod.metadata;
    // Published in a pass the pod cache has not caught up with: done.
    if published == Some(endpoint.as_str()) {
        return;
    }
    let told = service::told_endpoint(pod) == Some(endpoint.as_str());
    let annotated = meta.annotation(vocabulary::ENDPOINT) == Some(endpoint.as_str());
    let labelled = meta.label(vocabulary::SERVICE) == Some(name.as_str());
    if !(annotated && labelled && told) {
        actions.push(Action::Publish {
            pod: pod_ref,
            service: name,
            port,
            announce: !told,
        });
    }
}

/// Whether the LoadBalancer status is exactly what we write, `[{ip:
/// IP}]` for each SSH IP (in any order); a stale, missing or extra address
/// is rewritten. Fields the API server fills in itself (`ipMode`) do not
/// count.
fn has_ingress(svc: &Service, ips: &SshIps) -> bool {
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    let read: BTreeSet<Option<std::net::IpAddr>> = (ingress.iter())
        .map(|i| {
            let plain = i.hostname.as_deref().unwrap_or("").is_empty();
            // Any text that parses to an SSH IP is as good as its
            // canonical form.
            i.ip.as_deref()
                .and_then(|ip| ip.parse().ok())
                .filter(|_| plain)
        })
        .collect();
    let ours: BTreeSet<Option<std::net::IpAddr>> = ips.all().map(Some).collect();
    ingress.len() == ours.len() && read == ours
}

fn full_name(s: &Service) -> String {
    format!(
        "{}/{}",
        s.metadata.namespace.as_deref().unwrap_or(""),
        s.metadata.name.as_deref().unwrap_or("")
    )
}

/// The pod that owns one of our Services (in its namespace).
fn pod_of(s: &Service, namespace: &str) -> Option<PodRef> {
    s.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "Pod")
        .map(|o| PodRef {
            namespace: namespace.to_owned(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

pub(super) fn split(key: &str) -> (String, String) {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    (ns.to_owned(), name.to_owned())
}

#[cfg(test)]
mod tests;
