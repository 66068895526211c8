//! Writes over HTTP, checked against what kube-apiserver does: a create
//! whose body names another namespace than its path, a PATCH of a type the
//! fake does not implement, and the graceful deletion of pods.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::super::{FakeApi, Kind};

const MERGE: &str = "application/merge-patch+json";

/// One request with a JSON body: the status code and the JSON answer.
fn send(api: &FakeApi, method: &str, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
    let mut stream = TcpStream::connect(api.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let body = body.to_string();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: fake\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let answer = text.split_once("\r\n\r\n").unwrap().1;
    (code, serde_json::from_str(answer).unwrap())
}

fn service(namespace: Option<&str>) -> Value {
    let mut service = json!({"apiVersion": "v1", "kind": "Service",
                             "metadata": {"name": "s"}, "spec": {"ports": [{"port": 22}]}});
    if let Some(namespace) = namespace {
        service["metadata"]["namespace"] = json!(namespace);
    }
    service
}

#[test]
fn a_create_whose_object_names_another_namespace_than_its_path_is_a_bad_request() {
    let api = FakeApi::start_on_loopback().unwrap();
    let path = "/api/v1/namespaces/jobs/services";
    let (code, status) = send(
        &api,
        "POST",
        path,
        "application/json",
        &service(Some("other")),
    );
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    assert!(api.list(Kind::Service).is_empty());
    // Unset, it is the path's; the same, it is accepted.
    let (code, created) = send(&api, "POST", path, "application/json", &service(None));
    assert_eq!(
        (code, &created["metadata"]["namespace"]),
        (201, &json!("jobs"))
    );
    api.delete(Kind::Service, "jobs", "s");
    let (code, _) = send(
        &api,
        "POST",
        path,
        "application/json",
        &service(Some("jobs")),
    );
    assert_eq!(code, 201);
}

#[test]
fn a_patch_is_applied_as_its_content_type_says_and_one_the_fake_does_not_implement_is_refused() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(Kind::Service, service(Some("jobs")));
    let path = "/api/v1/namespaces/jobs/services/s";
    let patch = json!({"metadata": {"labels": {"a": "b"}}});
    for content_type in [
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
        "application/json",
    ] {
        let (code, status) = send(&api, "PATCH", path, content_type, &patch);
        assert_eq!(code, 415, "{content_type}: {status}");
        assert_eq!(status["reason"], "UnsupportedMediaType");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.starts_with("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json"),
            "{message}"
        );
    }
    let stored = api.get(Kind::Service, "jobs", "s").unwrap();
    assert!(stored["metadata"]["labels"].is_null(), "{stored}");
    // A charset parameter is no part of the type.
    let (code, patched) = send(
        &api,
        "PATCH",
        path,
        &format!("{MERGE}; charset=utf-8"),
        &patch,
    );
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
}

/// A pod on a node, running, that stops within `grace` seconds.
fn scheduled_pod(name: &str, grace: Option<u64>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": "jobs"},
                         "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
                         "status": {"phase": "Running"}});
    if let Some(grace) = grace {
        pod["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    }
    pod
}

fn delete(api: &FakeApi, name: &str, options: &Value) -> (u16, Value) {
    let path = format!("/api/v1/namespaces/jobs/pods/{name}");
    send(api, "DELETE", &path, "application/json", options)
}

#[test]
fn a_running_pod_deleted_is_marked_and_stays_until_its_grace_ends_or_it_is_forced() {
    let api = FakeApi::start_on_loopback().unwrap();
    // The default grace: the pod's terminationGracePeriodSeconds (30
    // when unset, as the API server defaults it).
    api.apply(Kind::Pod, scheduled_pod("p", None));
    let (code, marked) = delete(&api, "p", &json!({}));
    assert_eq!(code, 200, "{marked}");
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let stored = api.get(Kind::Pod, "jobs", "p").expect("still there");
    assert_eq!(
        stored["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    // A second delete asking for more time changes nothing, one asking
    // for less shortens the grace, one asking for none removes it at once
    // (a force delete).
    let (_, again) = delete(&api, "p", &json!({"gracePeriodSeconds": 60}));
    assert_eq!(again["metadata"]["deletionGracePeriodSeconds"], 30);
    let (_, shorter) = delete(&api, "p", &json!({"gracePeriodSeconds": 20}));
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 20);
    let (code, _) = delete(&api, "p", &json!({"gracePeriodSeconds": 0}));
    assert_eq!(code, 200);
    assert!(api.get(Kind::Pod, "jobs", "p").is_none());

    // Its grace over, the pod is gone (the kubelet's final delete).
    api.apply(Kind::Pod, scheduled_pod("q", Some(1)));
    let started = Instant::now();
    let (_, marked) = delete(&api, "q", &json!({}));
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 1);
    assert!(api.get(Kind::Pod, "jobs", "q").is_some());
    while api.get(Kind::Pod, "jobs", "q").is_some() {
        assert!(started.elapsed() < Duration::from_secs(5), "never removed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[test]
fn pods_on_no_node_or_finished_and_other_kinds_are_deleted_at_once() {
    let api = FakeApi::start_on_loopback().unwrap();
    let mut unscheduled = scheduled_pod("unscheduled", Some(30));
    unscheduled["spec"]["nodeName"] = Value::Null;
    let mut finished = scheduled_pod("finished", Some(30));
    finished["status"]["phase"] = json!("Succeeded");
    for pod in [unscheduled, finished] {
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        api.apply(Kind::Pod, pod);
        let (code, _) = delete(&api, &name, &json!({}));
        assert_eq!(code, 200);
        assert!(api.get(Kind::Pod, "jobs", &name).is_none(), "{name}");
    }
    // The query parameter counts as the body's field does.
    api.apply(Kind::Pod, scheduled_pod("forced", Some(30)));
    let path = "/api/v1/namespaces/jobs/pods/forced?gracePeriodSeconds=0";
    assert_eq!(
        send(&api, "DELETE", path, "application/json", &Value::Null).0,
        200
    );
    assert!(api.get(Kind::Pod, "jobs", "forced").is_none());
    api.apply(Kind::Service, service(Some("jobs")));
    let (code, _) = send(
        &api,
        "DELETE",
        "/api/v1/namespaces/jobs/services/s",
        "application/json",
        &json!({}),
    );
    assert_eq!(code, 200);
    assert!(api.get(Kind::Service, "jobs", "s").is_none());
}

fn event(note: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": "job-1.1", "namespace": "jobs"},
           "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "SSHReady", "action": "Publish",
           "type": "Normal", "reportingController": "ssh-fwd-controller",
           "reportingInstance": "a", "regarding": {"kind": "Pod", "name": "job-1"},
           "note": note})
}

#[test]
fn an_event_whose_note_is_over_1024_bytes_is_invalid() {
    let api = FakeApi::start_on_loopback().unwrap();
    let path = "/apis/events.k8s.io/v1/namespaces/jobs/events";
    // 1024 bytes in 512 two-byte characters: taken.
    let (code, _) = send(
        &api,
        "POST",
        path,
        "application/json",
        &event(&"é".repeat(512)),
    );
    assert_eq!(code, 201);
    let mut long = event(&"x".repeat(1025));
    long["metadata"]["name"] = json!("job-1.2");
    let (code, status) = send(&api, "POST", path, "application/json", &long);
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "Event.events.k8s.io \"job-1.2\" is invalid: note: Invalid value: \"\": can have at most 1024 characters"
    );
}

#[test]
fn config_maps_refuse_keys_kubernetes_refuses_and_go_with_the_node_that_owns_them() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(
        Kind::Node,
        json!({"metadata": {"name": "n1", "uid": "node-1"}}),
    );
    let path = "/api/v1/namespaces/ssh-fwd/configmaps";
    let cm = |key: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "ssh-fwd-activity-n1",
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                 "name": "n1", "uid": "node-1"}]},
               "data": {key: "{}"}})
    };
    let (code, status) = send(
        &api,
        "POST",
        path,
        "application/json",
        &cm("198.18.0.10:8022"),
    );
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    let (code, created) = send(
        &api,
        "POST",
        path,
        "application/json",
        &cm("198.18.0.10_8022"),
    );
    assert_eq!(code, 201, "{created}");
    // A merge patch's null removes a key (RFC 7386).
    let patch = json!({"data": {"198.18.0.10_8022": null, "198.18.0.10_8023": "{}"}});
    let (code, patched) = send(
        &api,
        "PATCH",
        &format!("{path}/ssh-fwd-activity-n1"),
        MERGE,
        &patch,
    );
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["data"], json!({"198.18.0.10_8023": "{}"}));
    let (code, node) = send(
        &api,
        "GET",
        "/api/v1/nodes/n1",
        "application/json",
        &Value::Null,
    );
    assert_eq!(
        (code, &node["metadata"]["uid"]),
        (200, &json!("node-1")),
        "{node}"
    );
    api.delete(Kind::Node, "", "n1");
    assert!(
        api.get(Kind::ConfigMap, "ssh-fwd", "ssh-fwd-activity-n1")
            .is_none()
    );
}
