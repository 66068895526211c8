//! The events a pod is told by (`kubectl describe pod`, `kubectl events`).
//! kube's `Recorder` keeps every event it sent for minutes, to patch a
//! repeat into a series, and reads back the object it created. This
//! controller sends each event once (`Warned`, the announced annotation),
//! so an event is one `events.k8s.io/v1` object, written as the Recorder
//! writes a first one, whose answer is not decoded.

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::runtime::events::{EventType, Reporter};

use crate::controller::pod::PodRef;

/// What one event says about a pod.
pub struct Told<'a> {
    pub type_: EventType,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: String,
}

/// The event object for `pod` sent by `reporter` at `now`. Its name is the
/// pod's and the time in nanoseconds, as the Recorder names one.
pub fn object(reporter: &Reporter, pod: &PodRef, told: Told<'_>, now: Timestamp) -> Event {
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: Some(pod.uid.clone()),
        ..ObjectReference::default()
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(
            match told.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        reason: Some(told.reason.into()),
        action: Some(told.action.into()),
        note: Some(told.note),
        regarding: Some(regarding),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary;

    #[test]
    fn an_event_names_its_pod_reporter_and_time_as_the_recorder_does() {
        let pod = PodRef {
            namespace: "jobs".into(),
            name: "job-1".into(),
            uid: "u-1".into(),
        };
        let reporter = Reporter {
            controller: "ssh-fwd-controller".into(),
            instance: Some("replica-a".into()),
        };
        let now: Timestamp = "2026-11-26T02:00:00.000001Z".parse().unwrap();
        let told = Told {
            type_: EventType::Warning,
            reason: vocabulary::reason::NO_FREE_PORT,
            action: "Allocate",
            note: "every port is taken".into(),
        };
        let event = serde_json::to_value(object(&reporter, &pod, told, now)).unwrap();
        let expected = serde_json::json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": format!("job-1.{:x}", now.as_nanosecond()), "namespace": "jobs"},
            "eventTime": "2026-11-26T02:00:00.000001Z",
            "type": "Warning",
            "reason": vocabulary::reason::NO_FREE_PORT,
            "action": "Allocate",
            "note": "every port is taken",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "job-1",
                          "namespace": "jobs", "uid": "u-1"},
            "reportingController": "ssh-fwd-controller",
            "reportingInstance": "replica-a",
        });
        assert_eq!(event, expected);
        // Without an instance, the controller reports as itself.
        let lone = Reporter {
            controller: "ssh-fwd-controller".into(),
            instance: None,
        };
        let told = Told {
            type_: EventType::Normal,
            reason: vocabulary::reason::SSH_READY,
            action: "Publish",
            note: String::new(),
        };
        let event = object(&lone, &pod, told, now);
        assert_eq!(
            event.reporting_instance.as_deref(),
            Some("ssh-fwd-controller")
        );
        assert_eq!(event.type_.as_deref(), Some("Normal"));
    }
}
