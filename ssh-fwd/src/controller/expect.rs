//! Writes the caches have not shown yet. Without this, a pass that runs
//! before the watch delivers our own write would redo it: create the Service
//! again on another port, or announce the endpoint twice. Each expectation
//! ends when the cache shows the write, or after [`EXPECT_FOR`] (a write the
//! cache never shows is redone then).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Service;

#[cfg(test)]
use super::service::ENDPOINT_ANNOTATION;
use super::{pod::PodView, service};

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
    published: BTreeMap<String, (String, Instant)>,
}

impl Expectations {
    pub fn record(&mut self, done: Done, at: Instant) {
        match done {
            Done::Created { uid, port } => self.created.insert(uid, (port, at)).map(drop),
            Done::Published { uid, endpoint } => {
                self.published.insert(uid, (endpoint, at)).map(drop)
            }
        };
    }

    /// Forgets what the caches now show, and what is too old.
    pub fn settle(
        &mut self,
        pods: &[std::sync::Arc<PodView>],
        services: &[std::sync::Arc<Service>],
        now: Instant,
    ) {
        let with_service: BTreeSet<&str> = services
            .iter()
            .filter(|s| service::is_managed(s))
            .filter_map(|s| service::label(s, service::POD_UID_LABEL))
            .collect();
        self.created.retain(|uid, (_, at)| {
            now.duration_since(*at) < EXPECT_FOR && !with_service.contains(uid.as_str())
        });
        let annotated: BTreeMap<&str, &str> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, service::told_endpoint(p)?)))
            .collect();
        self.published.retain(|uid, (endpoint, at)| {
            now.duration_since(*at) < EXPECT_FOR
                && annotated.get(uid.as_str()) != Some(&endpoint.as_str())
        });
    }

    /// Ports of Services created but not yet seen.
    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.created.values().map(|(port, _)| *port)
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
        e.settle(&[pod(json!({}))], &[], t0);
        assert!(e.creating("u"));
        assert_eq!(e.ports().collect::<Vec<_>>(), [9000]);
        assert_eq!(e.published("u"), Some("h:9000"));

        e.settle(&[pod(json!({ENDPOINT_ANNOTATION: "h:9000"}))], &[], t0);
        assert_eq!(e.published("u"), None, "the cache shows the annotation");
        e.settle(&[], &[], t0 + EXPECT_FOR);
        assert!(!e.creating("u"), "expired");
    }
}
