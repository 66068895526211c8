//! From the cached pods and Services to the API writes that make them agree:
//! a pure function of the caches, so every rule is a unit test.
//!
//! Rules: each pod labelled `ssh-fwd.io/ssh=enabled` that is not finished or
//! terminating gets one Service on a free port, and the grant of that port
//! on the Service's status (`k8s::grant`), which is what the agents honour.
//! The port is the pod's reservation's, never what the Service's spec says:
//! the spec is its namespace's to write, and where someone changed it, it
//! is put back ([`publish`]). A Service of ours whose pod holds no
//! reservation of its port (two grants of one port: never by design, but a
//! Lease removed by hand can cause it) is deleted, so its pod gets another
//! port; someone else's Service holds no grant and never moves ours. A pod
//! is told its endpoint only once the
//! cache shows its grant written. Services whose pod is gone or no longer
//! asks are deleted, after the endpoint is taken off the pod. A pod that
//! cannot be served (bad target-port annotation, its Service name taken by
//! someone else's, no free port) gets a Warning instead.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Time};
use rand::Rng;

pub use super::warn::Problem;
use super::{
    expect::Expectations,
    pod::{PodRef, asks_for_ssh},
    service::Settings,
    world::World,
};
pub use action::{Action, DeleteReason};
use publish::{Publishing, publish};
use scope::{PortSet, Scope};
use upkeep::Free;

mod action;
mod publish;
pub mod scope;
mod serve;
pub mod upkeep;

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
    /// When a pod's endpoint may be told (`--publish-when`).
    pub gate: super::served::Gate<'a>,
    /// `--port-reuse-after`, and now: which port a pod without one gets.
    pub quarantine: super::ports::Quarantine,
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
    let ours = sort_out_ours(world, pass.scope, &mut actions);
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
            let at = Publishing {
                world,
                settings,
                host: endpoint_host,
                published: pass.expected.published(uid),
                gate: pass.gate,
            };
            actions.extend(publish(svc, pod, pod_ref, &at));
            continue;
        }
        // Creating: the cache will show it.
        if !pass.expected.creating(uid) {
            let mut free = Free {
                range,
                quarantine: &pass.quarantine,
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

/// Our Services by the uid of the pod they serve (the oldest when there are
/// several), for the pods the scope names. Services of pods that no longer
/// ask, and extra ones, are deleted (oldest first).
fn sort_out_ours<'a>(
    world: &'a World,
    scope: &'a Scope,
    actions: &mut Vec<Action>,
) -> BTreeMap<&'a str, &'a Service> {
    let mut ours = BTreeMap::new();
    let mut deletes = Vec::new();
    for uid in scope.groups(world) {
        let pod = world.pod(uid);
        let wanted = pod.is_some_and(asks_for_ssh);
        // An owner reference names a pod of the Service's own namespace:
        // one elsewhere naming this pod's uid is not ours to keep or delete.
        let mut by_age: Vec<&Service> = (world.ours_of(uid))
            .filter(|s| pod.is_none_or(|p| p.metadata.namespace == s.metadata.namespace))
            .collect();
        by_age.sort_by_cached_key(|s| age(s));
        for svc in by_age {
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
    ours
}

/// Oldest first, a missing timestamp last, then by name.
fn age(s: &Service) -> (bool, Option<Time>, String) {
    let created = s.metadata.creation_timestamp.clone();
    (created.is_none(), created, full_name(s))
}

pub(super) fn full_name(s: &Service) -> String {
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
