//! Writes the caches have not shown yet. Without this, a pass that runs
//! before the watch delivers our own write would redo it: create the Service
//! again on another port, or announce the endpoint twice. Each expectation
//! ends when the cache shows the write, or after [`EXPECT_FOR`] (a write the
//! cache never shows is redone then).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

#[cfg(test)]
use super::pod::PodView;
use super::{service, world::World};

pub const EXPECT_FOR: Duration = Duration::from_secs(60);

/// A write that succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// A Service for the pod with this uid, on this port.
    Created { uid: String, port: u16 },
    /// The endpoint annotation written on the pod with this uid.
    Published { uid: String, endpoint: String },
}

#[derive(Debug, Default)]
pub struct Expectations {
    created: BTreeMap<String, (u16, Instant)>,
    /// The ports of `created`.
    creating_on: BTreeSet<u16>,
    published: BTreeMap<String, (String, Instant)>,
}

impl Expectations {
    pub fn record(&mut self, done: Done, at: Instant) {
        match done {
            Done::Created { uid, port } => {
                self.creating_on.insert(port);
                self.created.insert(uid, (port, at)).map(drop)
            }
            Done::Published { uid, endpoint } => {
                self.published.insert(uid, (endpoint, at)).map(drop)
            }
        };
    }

    /// Forgets what the caches now show, and what is too old. Costs as
    /// much as there are writes in flight, not pods.
    pub fn settle(&mut self, world: &World, now: Instant) {
        self.created.retain(|uid, (_, at)| {
            now.duration_since(*at) < EXPECT_FOR && world.ours_of(uid).next().is_none()
        });
        self.published.retain(|uid, (endpoint, at)| {
            now.duration_since(*at) < EXPECT_FOR
                && world.pod(uid).and_then(service::told_endpoint) != Some(endpoint.as_str())
        });
        self.creating_on = self.created.values().map(|(port, _)| *port).collect();
    }

    /// Whether a Service on `port` was created but is not seen yet.
    pub fn is_creating_on(&self, port: u16) -> bool {
        self.creating_on.contains(&port)
    }

    /// When the oldest expectation runs out (the cache never showed it):
    /// a full pass is due then.
    pub fn next_due(&self) -> Option<Instant> {
        let created = self.created.values().map(|(_, at)| *at);
        let published = self.published.values().map(|(_, at)| *at);
        created.chain(published).min().map(|at| at + EXPECT_FOR)
    }

    /// Whether a Service for this pod was created but is not seen yet.
    pub fn creating(&self, uid: &str) -> bool {
        self.created.contains_key(uid)
    }

    /// The endpoint published on this pod but not seen yet.
    pub fn published(&self, uid: &str) -> Option<&str> {
        self.published.get(uid).map(|(e, _)| e.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::vocabulary;

    const IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));

    fn pod(annotations: serde_json::Value) -> std::sync::Arc<PodView> {
        std::sync::Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "p", "uid": "u", "annotations": annotations}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn expectations_end_when_the_cache_shows_the_write_or_time_runs_out() {
        let t0 = Instant::now();
        let mut e = Expectations::default();
        e.record(
            Done::Created {
                uid: "u".into(),
                port: 9000,
            },
            t0,
        );
        e.record(
            Done::Published {
                uid: "u".into(),
                endpoint: "h:9000".into(),
            },
            t0,
        );
        let world = |pods: &[std::sync::Arc<PodView>]| {
            World::of(crate::controller::world::policy_for(IP), IP, pods, &[], &[])
        };
        e.settle(&world(&[pod(json!({}))]), t0);
        assert!(e.creating("u"));
        assert!(e.is_creating_on(9000));
        assert_eq!(e.published("u"), Some("h:9000"));
        assert_eq!(e.next_due(), Some(t0 + EXPECT_FOR));

        e.settle(&world(&[pod(json!({vocabulary::ENDPOINT: "h:9000"}))]), t0);
        assert_eq!(e.published("u"), None, "the cache shows the annotation");
        e.settle(&world(&[]), t0 + EXPECT_FOR);
        assert!(!e.creating("u"), "expired");
        assert!(!e.is_creating_on(9000));
        assert_eq!(e.next_due(), None);
    }
}
