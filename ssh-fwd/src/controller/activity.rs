//! The leader mirrors SSH activity onto pods: each agent publishes its
//! node's in a ConfigMap ([`crate::k8s::activity`]); the leader merges them
//! per port (the latest packet of any node, the connections of all), finds
//! the pod its Service on that port serves, and annotates it with
//! [`LAST_ACTIVITY`](vocabulary::LAST_ACTIVITY) and
//! [`SSH_CONNECTIONS`](vocabulary::SSH_CONNECTIONS), at most once per
//! `--activity-interval` a pod, so an idle culler can count SSH sessions
//! as use without a write to the API server for every keystroke.
//!
//! When it last patched each pod lives in memory; a leader that meets a
//! pod already annotated (a restart, a new term) takes the annotation as
//! its last patch, made now, so a failover does not patch every pod at
//! once. The time never goes back: it is at least the annotation's; so a
//! report more than [`CLOCK_SKEW`] ahead of the controller's clock is
//! ignored, or one forged report would pin a pod as active for good.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::reflector::Store,
};
use serde_json::json;

use super::{
    pod::{PodRef, PodView},
    world::{World, served_pod},
};
use crate::{
    k8s::{
        activity::{Report, parse_key, parse_rfc3339, rfc3339},
        answer::Unread,
        ownership, reflector,
    },
    vocabulary,
};

/// One port's activity over every node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    pub last: Option<SystemTime>,
    pub open: u64,
}

/// How far ahead of the controller's clock a report's last packet may be
/// and still be believed. Nodes synchronised by NTP differ by milliseconds;
/// this leaves room for a node whose clock drifted for a while, and for
/// the agent's report interval. A report further ahead is either a clock
/// that is wrong or a forgery (whoever can write a node's ConfigMap, see
/// `docs/kubernetes.md`): believed, it would keep a pod "active" until
/// that time, and the annotation never goes back, which defeats an idle
/// culler.
pub const CLOCK_SKEW: Duration = Duration::from_secs(30);

/// The agents' reports on one SSH IP, merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merge {
    /// By port: the latest packet, the sum of open connections.
    pub ports: BTreeMap<u16, Merged>,
    /// The ConfigMaps with reports ahead of the clock by more than
    /// [`CLOCK_SKEW`], and how many: those reports were ignored whole.
    pub ahead: BTreeMap<String, u64>,
}

/// The agents' reports of the frontends on `ip`, merged by port: the
/// latest packet, the sum of open connections. A value no agent would
/// write is skipped, and so is a report whose last packet is more than
/// [`CLOCK_SKEW`] after `now` (who wrote it is in [`Merge::ahead`]).
///
/// Trust: each ConfigMap is written by one node's agent (deploy/'s
/// ValidatingAdmissionPolicy holds an agent to its own node's); its
/// content is that node's word, never a time beyond ours.
pub fn merge<'a>(
    config_maps: impl IntoIterator<Item = &'a ConfigMap>,
    ip: IpAddr,
    now: SystemTime,
) -> Merge {
    let mut merge = Merge::default();
    let latest = now + CLOCK_SKEW;
    for cm in config_maps {
        for (key, value) in cm.data.iter().flatten() {
            let Some((addr, port)) = parse_key(key) else {
                continue;
            };
            let Ok(report) = serde_json::from_str::<Report>(value) else {
                continue;
            };
            if addr != ip {
                continue;
            }
            if report.last().is_some_and(|last| last > latest) {
                let name = cm.metadata.name.clone().unwrap_or_default();
                *merge.ahead.entry(name).or_default() += 1;
                continue;
            }
            let m = merge.ports.entry(port).or_default();
            m.last = m.last.max(report.last());
            m.open += report.open_connections;
        }
    }
    merge
}

/// What a pod's annotations say, or are to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Annotation {
    /// To the second.
    pub last: SystemTime,
    pub open: u64,
}

impl Annotation {
    fn of(pod: &PodView) -> Option<Self> {
        let meta = &pod.metadata;
        Some(Self {
            last: parse_rfc3339(meta.annotation(vocabulary::LAST_ACTIVITY)?)?,
            open: meta
                .annotation(vocabulary::SSH_CONNECTIONS)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        })
    }

    /// The merge patch of the pod's metadata.
    fn patch(&self, uid: &str) -> serde_json::Value {
        json!({"metadata": {
            // The uid makes the patch fail on a namesake made since.
            "uid": uid,
            "annotations": {
                vocabulary::LAST_ACTIVITY: rfc3339(self.last),
                vocabulary::SSH_CONNECTIONS: self.open.to_string(),
            },
        }})
    }
}

/// How soon a failed write is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// When each pod was last annotated, and with what.
#[derive(Debug)]
pub struct Mirror {
    interval: Duration,
    /// By pod uid; `None`: a write that failed, tried again after
    /// [`RETRY`].
    patched: BTreeMap<String, (Instant, Option<Annotation>)>,
    /// The earliest a throttled change may be written.
    next_due: Option<Instant>,
    /// The ConfigMaps already warned of for a report ahead of the clock.
    warned_ahead: BTreeSet<String>,
    /// Reports ignored for being ahead of the clock, over every pass.
    reports_ahead: u64,
}

impl Mirror {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            patched: BTreeMap::new(),
            next_due: None,
            warned_ahead: BTreeSet::new(),
            reports_ahead: 0,
        }
    }

    /// Counts the reports `ahead` of the clock ([`Merge::ahead`]); returns
    /// the ConfigMaps not warned of before, each told once (a ConfigMap
    /// keeps its report until the agent writes another).
    pub fn note_ahead(&mut self, ahead: &BTreeMap<String, u64>) -> Vec<String> {
        self.reports_ahead += ahead.values().sum::<u64>();
        ahead
            .keys()
            .filter(|name| self.warned_ahead.insert((*name).clone()))
            .cloned()
            .collect()
    }

    /// How many reports were ignored for being ahead of the clock.
    pub fn reports_ahead(&self) -> u64 {
        self.reports_ahead
    }

    /// The annotations to write now for `merged`, each remembered as
    /// written at `now` (one whose write failed is told with
    /// [`Self::failed`]).
    pub fn due(
        &mut self,
        world: &World,
        merged: &BTreeMap<u16, Merged>,
        now: Instant,
    ) -> Vec<(PodRef, Annotation)> {
        self.patched.retain(|uid, _| world.pod(uid).is_some());
        self.next_due = None;
        let mut writes = Vec::new();
        for (port, m) in merged {
            let Some(last) = m.last else { continue };
            let Some(on) = pod_on(world, *port) else {
                continue;
            };
            // A packet before the Service was made was another pod's, which
            // held the port before.
            if on.since.is_some_and(|since| last < since) {
                continue;
            }
            let current = Annotation::of(on.pod);
            let want = Annotation {
                last: current.map_or(last, |c| c.last.max(last)),
                open: m.open,
            };
            let written = match self.patched.get(on.uid) {
                Some(&remembered) => Some(remembered),
                // Annotated by an earlier leader: as if just written.
                None => current.map(|c| {
                    self.patched.insert(on.uid.to_owned(), (now, Some(c)));
                    (now, Some(c))
                }),
            };
            match written {
                Some((_, Some(value))) if value == want => continue,
                Some((at, _)) if now.saturating_duration_since(at) < self.interval => {
                    let due = at + self.interval;
                    self.next_due = Some(self.next_due.map_or(due, |d| d.min(due)));
                    continue;
                }
                _ => {}
            }
            self.patched.insert(on.uid.to_owned(), (now, Some(want)));
            writes.push((pod_ref(on.pod, on.uid), want));
        }
        writes
    }

    /// A write that failed: tried again [`RETRY`] later.
    pub fn failed(&mut self, uid: &str, now: Instant) {
        let retry = now + RETRY.min(self.interval);
        let as_if = retry.checked_sub(self.interval).unwrap_or(now);
        self.patched.insert(uid.to_owned(), (as_if, None));
        self.next_due = Some(self.next_due.map_or(retry, |d| d.min(retry)));
    }

    /// How long until a change held back by the interval may be written.
    pub fn until_due(&self, now: Instant) -> Option<Duration> {
        self.next_due.map(|d| d.saturating_duration_since(now))
    }
}

/// A pod a port leads to.
struct On<'a> {
    pod: &'a PodView,
    uid: &'a str,
    /// When its Service was made.
    since: Option<SystemTime>,
}

/// The pod our Service on `port` serves, if that Service owns the port
/// (the agents' rule, [`ownership::owner`]).
fn pod_on(world: &World, port: u16) -> Option<On<'_>> {
    let owner = ownership::owner(world.claims_on(port))?;
    let uid = served_pod(world.service(&owner.service)?)?;
    Some(On {
        pod: world.pod(uid)?,
        uid,
        since: owner.created.as_ref().map(|t| SystemTime::from(t.0)),
    })
}

fn pod_ref(pod: &PodView, uid: &str) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: uid.to_owned(),
    }
}

/// Writes `writes`, 32 at a time; the pods whose patch failed are told to
/// `mirror` (and logged at debug: the next pass retries).
pub async fn apply(client: &kube::Client, mirror: &mut Mirror, writes: Vec<(PodRef, Annotation)>) {
    use futures::StreamExt as _;
    let results = futures::stream::iter(writes)
        .map(|(pod, annotation)| {
            let api: Api<Unread<Pod>> = Api::namespaced(client.clone(), &pod.namespace);
            async move {
                let patch = annotation.patch(&pod.uid);
                let done = api
                    .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                (pod, done.map(drop))
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for (pod, done) in results {
        if let Err(e) = done {
            tracing::debug!(
                error = %e,
                pod = format!("{}/{}", pod.namespace, pod.name),
                "cannot annotate the pod's SSH activity; retrying at the next pass"
            );
            mirror.failed(&pod.uid, Instant::now());
        }
    }
}

/// The activity mirror of a term, and what it reads.
pub struct Mirroring {
    pub store: Store<ConfigMap>,
    /// A ConfigMap changed since the mirror last looked.
    pub changed: Arc<AtomicBool>,
    pub mirror: Mirror,
}

impl Mirroring {
    /// Annotates the pods due, when a ConfigMap changed, a held-back
    /// change is due, or the pass is a full one; otherwise nothing (a pass
    /// for a pod's change need not read every node's report).
    pub async fn pass(&mut self, world: &World, client: &kube::Client, full: bool) {
        let now = Instant::now();
        let due = self.mirror.until_due(now).is_some_and(|d| d.is_zero());
        if !(self.changed.swap(false, Ordering::Relaxed) || due || full) {
            return;
        }
        let config_maps = self.store.state();
        let merged = merge(
            config_maps.iter().map(AsRef::as_ref),
            world.ip(),
            SystemTime::now(),
        );
        for name in self.mirror.note_ahead(&merged.ahead) {
            tracing::warn!(
                config_map = name,
                skew = ?CLOCK_SKEW,
                ignored_so_far = self.mirror.reports_ahead(),
                "an activity report is ahead of this clock by more than the skew allowed: ignoring it (a node's clock is wrong, or someone forged its report); told once per ConfigMap"
            );
        }
        let writes = self.mirror.due(world, &merged.ports, now);
        apply(client, &mut self.mirror, writes).await;
    }

    pub fn until_due(&self, now: Instant) -> Option<Duration> {
        self.mirror.until_due(now)
    }
}

/// Keeps what the mirror reads of a ConfigMap: its name and data.
pub fn keep_config_map(mut cm: ConfigMap) -> ConfigMap {
    reflector::drop_managed_fields(&mut cm);
    cm.metadata.annotations = None;
    cm.binary_data = None;
    cm
}

#[cfg(test)]
mod tests;
