//! The real kube client and watchers against a fake API server that speaks
//! the API's JSON: lists with resourceVersions, watch events, bookmarks,
//! `410 Gone` and server errors. Each test is bounded by a timeout.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::SendResponse;

use super::*;
use crate::vocabulary;

const SELECTOR: &str = "service.kubernetes.io/service-proxy-name=ssh-fwd";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Services,
    Slices,
}

#[derive(Default)]
struct Resource {
    items: Vec<Value>,
    /// The label selector of every list and watch request.
    selectors: Vec<String>,
    /// Watch requests left open, as a long poll with no events yet.
    parked: Vec<SendResponse<Response<Body>>>,
    /// Status codes for the next list requests.
    list_errors: Vec<u16>,
    lists_served: usize,
}

/// The fake API server's state, shared with the test body.
#[derive(Default)]
struct Fake {
    rv: u64,
    services: Resource,
    slices: Resource,
}

impl Fake {
    fn resource(&mut self, kind: Kind) -> &mut Resource {
        match kind {
            Kind::Services => &mut self.services,
            Kind::Slices => &mut self.slices,
        }
    }

    fn list(&mut self, kind: Kind) -> Response<Body> {
        let rv = self.rv.to_string();
        let r = self.resource(kind);
        r.lists_served += 1;
        if !r.list_errors.is_empty() {
            let code = r.list_errors.remove(0);
            return status_response(code, "injected failure");
        }
        let (api_version, list_kind) = match kind {
            Kind::Services => ("v1", "ServiceList"),
            Kind::Slices => ("discovery.k8s.io/v1", "EndpointSliceList"),
        };
        json_response(
            json!({"apiVersion": api_version, "kind": list_kind, "metadata": {"resourceVersion": rv}, "items": r.items}),
        )
    }
}

type Shared = Arc<Mutex<Fake>>;

fn json_response(v: Value) -> Response<Body> {
    Response::new(Body::from(serde_json::to_vec(&v).expect("json")))
}

fn status_response(code: u16, message: &str) -> Response<Body> {
    let mut r = json_response(
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}),
    );
    *r.status_mut() = StatusCode::from_u16(code).expect("status");
    r
}

/// Serves requests until the client is dropped.
fn start_fake(fake: Shared) -> Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let uri = request.uri().to_string();
            let kind = if uri.contains("/services") {
                Kind::Services
            } else {
                Kind::Slices
            };
            let mut f = fake.lock().expect("lock");
            let selector = request
                .uri()
                .query()
                .into_iter()
                .flat_map(|q| q.split('&'))
                .find_map(|kv| kv.strip_prefix("labelSelector="))
                .unwrap_or("")
                .to_owned();
            f.resource(kind).selectors.push(selector);
            if uri.contains("watch=true") {
                f.resource(kind).parked.push(send);
            } else {
                send.send_response(f.list(kind));
            }
        }
    });
    Client::new(service, "default")
}

/// Answers every parked watch of `kind` with these events (newline-delimited
/// JSON, as the API streams them); the watcher then watches again.
fn deliver(fake: &Shared, kind: Kind, events: &[Value]) {
    let mut f = fake.lock().expect("lock");
    let body: Vec<u8> = events
        .iter()
        .flat_map(|e| {
            let mut line = serde_json::to_vec(e).expect("json");
            line.push(b'\n');
            line
        })
        .collect();
    for send in f.resource(kind).parked.drain(..) {
        send.send_response(Response::new(Body::from(body.clone())));
    }
}

fn bump(fake: &Shared) -> String {
    let mut f = fake.lock().expect("lock");
    f.rv += 1;
    f.rv.to_string()
}

fn service(name: &str, port: i32, rv: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "jobs", "resourceVersion": rv, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS, "allocateLoadBalancerNodePorts": false, "ports": [{"name": "ssh", "port": port, "targetPort": 22}]},
        "status": crate::k8s::grant::status_json(&["198.18.0.10"], u16::try_from(port).expect("port"), &format!("uid-{name}"))
    })
}

fn slice(service: &str, ip: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-x1"), "namespace": "jobs", "resourceVersion": rv, "labels": {"kubernetes.io/service-name": service, "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
        "addressType": "IPv4",
        "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "name": service, "uid": format!("uid-{service}")}}]
    })
}

fn policy() -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: ["198.18.0.10".parse().expect("ip")].into(),
        ports: 8000..=16000,
        styles: super::super::desired::Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    }
}

fn backends(source: &KubeSource) -> Vec<String> {
    source
        .mappings()
        .iter()
        .map(|m| format!("{}->{}", m.frontend, m.backend))
        .collect()
}

/// Takes in changes until `check` holds, or fails the test after 10 s.
async fn until(source: &mut KubeSource, what: &str, check: impl Fn(&KubeSource) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check(source) {
        match tokio::time::timeout_at(deadline, source.changed()).await {
            Ok(changed) => drop(changed.expect("watchers running")),
            Err(_) => panic!("timed out waiting for: {what}"),
        }
    }
}

/// Polls until `check` holds, or fails the test after 10 s.
/// Waits until the source has a watch parked on each kind, so an event
/// delivered now reaches it.
async fn both_watches_open(fake: &Shared) {
    eventually("both watches open", || {
        let f = fake.lock().expect("lock");
        !f.slices.parked.is_empty() && !f.services.parked.is_empty()
    })
    .await;
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A source on the fake API, once its first lists are complete.
async fn ready_source(fake: &Shared) -> (KubeSource, Counter) {
    let errors = Counter::default();
    let mut source = KubeSource::start(
        start_fake(fake.clone()),
        SELECTOR,
        policy(),
        BTreeMap::new(),
        &errors,
    );
    tokio::time::timeout(Duration::from_secs(10), source.wait_until_ready())
        .await
        .expect("ready in time")
        .expect("ready");
    (source, errors)
}

fn fake_with_one_job() -> Shared {
    let fake = Shared::default();
    {
        let mut f = fake.lock().expect("lock");
        f.rv = 10;
        f.services.items = vec![service("job-1", 8123, "5")];
        f.slices.items = vec![slice("job-1", "10.244.1.5", "6")];
    }
    fake
}

#[tokio::test]
async fn first_complete_lists_make_the_source_ready_with_the_mapping() {
    let fake = fake_with_one_job();
    let (source, errors) = ready_source(&fake).await;
    assert_eq!(backends(&source), ["198.18.0.10:8123->10.244.1.5:22"]);
    assert_eq!(errors.get(), 0);
}

#[tokio::test]
async fn services_and_their_slices_are_selected_on_the_server() {
    let fake = fake_with_one_job();
    let _source = ready_source(&fake).await;
    let f = fake.lock().expect("lock");
    let encoded = "service.kubernetes.io%2Fservice-proxy-name%3Dssh-fwd";
    for (what, selectors) in [
        ("Service", &f.services.selectors),
        ("EndpointSlice", &f.slices.selectors),
    ] {
        assert!(!selectors.is_empty(), "{what}: no request");
        assert!(
            selectors.iter().all(|s| s == encoded),
            "{what} requests without the selector: {selectors:?}"
        );
    }
}

#[tokio::test]
async fn watch_events_move_the_backend_and_delete_the_service() {
    let fake = fake_with_one_job();
    let (mut source, errors) = ready_source(&fake).await;
    both_watches_open(&fake).await;

    let rv = bump(&fake);
    deliver(
        &fake,
        Kind::Slices,
        &[
            json!({"type": "BOOKMARK", "object": {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"resourceVersion": rv}}}),
            json!({"type": "MODIFIED", "object": slice("job-1", "10.244.2.9", &rv)}),
        ],
    );
    until(&mut source, "pod moved", |s| {
        backends(s) == ["198.18.0.10:8123->10.244.2.9:22"]
    })
    .await;

    eventually("services watch reopened", || {
        !fake.lock().expect("lock").services.parked.is_empty()
    })
    .await;
    let rv = bump(&fake);
    deliver(
        &fake,
        Kind::Services,
        &[json!({"type": "DELETED", "object": service("job-1", 8123, &rv)})],
    );
    until(&mut source, "service gone", |s| backends(s).is_empty()).await;
    assert_eq!(errors.get(), 0, "a bookmark is not an error");
}

#[tokio::test]
async fn expired_watch_relists_and_replaces_the_cache_whole() {
    let fake = fake_with_one_job();
    let (mut source, _errors) = ready_source(&fake).await;
    eventually("services watch open", || {
        !fake.lock().expect("lock").services.parked.is_empty()
    })
    .await;
    // While the watch was away, job-1 was deleted and job-2 created; the
    // delete event is lost. The server says 410 Gone and the watcher relists.
    {
        let mut f = fake.lock().expect("lock");
        f.rv = 100;
        f.services.items = vec![service("job-2", 8124, "99")];
        f.slices.items.push(slice("job-2", "10.244.3.3", "98"));
    }
    deliver(
        &fake,
        Kind::Slices,
        &[json!({"type": "ADDED", "object": slice("job-2", "10.244.3.3", "98")})],
    );
    deliver(
        &fake,
        Kind::Services,
        &[
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": 410}}),
        ],
    );
    until(&mut source, "relisted cache", |s| {
        backends(s) == ["198.18.0.10:8124->10.244.3.3:22"]
    })
    .await;
    assert!(
        fake.lock().expect("lock").services.lists_served >= 2,
        "the watcher listed again"
    );
}

#[tokio::test]
async fn failing_lists_leave_the_source_unready_until_one_succeeds() {
    let fake = fake_with_one_job();
    fake.lock().expect("lock").services.list_errors = vec![500, 503];
    let errors = Counter::default();
    let mut source = KubeSource::start(
        start_fake(fake.clone()),
        SELECTOR,
        policy(),
        BTreeMap::new(),
        &errors,
    );
    let early = tokio::time::timeout(Duration::from_millis(300), source.wait_until_ready()).await;
    assert!(
        early.is_err(),
        "not ready while the Service list fails: an empty cache must never look like zero Services"
    );
    tokio::time::timeout(Duration::from_secs(15), source.wait_until_ready())
        .await
        .expect("ready after retries")
        .expect("ready");
    assert_eq!(backends(&source), ["198.18.0.10:8123->10.244.1.5:22"]);
    assert!(errors.get() >= 2, "both failures counted");
}

/// The agent's requests, recorded by a real HTTP API server, are all in the
/// API-call list its RBAC is built from.
#[tokio::test]
async fn agent_requests_are_all_in_the_api_call_list() {
    use ssh_fwd_tests::fake_api::{FakeApi, Kind as ApiKind};

    use crate::k8s::api_calls::{AGENT, allows};

    let api = FakeApi::start_on_loopback().unwrap();
    api.apply(
        ApiKind::Service,
        json!({"metadata": {"name": "a", "namespace": "jobs"}, "spec": {"ports": [{"port": 8123}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, api.kubeconfig()).unwrap();
    let client = crate::k8s::client::connect(Some(&path)).await.unwrap();
    let mut source = KubeSource::start(
        client,
        SELECTOR,
        policy(),
        BTreeMap::new(),
        &Counter::default(),
    );
    tokio::time::timeout(Duration::from_secs(20), source.wait_until_ready())
        .await
        .expect("first lists within 20 s")
        .unwrap();
    let requests = api.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    for r in requests {
        assert!(
            allows(AGENT, &r.group, &r.resource, r.verb),
            "{r:?} is not in api_calls::AGENT; add it there (and to deploy/ RBAC)"
        );
    }
}

#[tokio::test]
async fn services_listed_before_their_slices_are_not_reported_without_an_endpoint() {
    let fake = fake_with_one_job();
    // The slices' first list fails: the Services' list arrives alone.
    fake.lock().expect("lock").slices.list_errors = vec![500];
    let (mut source, _errors) = ready_source(&fake).await;
    assert_eq!(backends(&source), ["198.18.0.10:8123->10.244.1.5:22"]);
    let notes = source.take_notes();
    assert!(notes.is_empty(), "{notes:?}");
}

#[tokio::test]
async fn a_change_names_the_frontends_it_touched() {
    let fake = fake_with_one_job();
    let (mut source, _errors) = ready_source(&fake).await;
    let (_, first) = source.changed().await.expect("watchers running");
    assert_eq!(first, None, "the first change is the whole state");
    eventually("slices watch open", || {
        !fake.lock().expect("lock").slices.parked.is_empty()
    })
    .await;
    let rv = bump(&fake);
    deliver(
        &fake,
        Kind::Slices,
        &[json!({"type": "MODIFIED", "object": slice("job-1", "10.244.2.9", &rv)})],
    );
    let (_, touched) = tokio::time::timeout(Duration::from_secs(10), source.changed())
        .await
        .expect("in time")
        .expect("watchers running");
    let frontend: SocketAddr = "198.18.0.10:8123".parse().expect("addr");
    assert_eq!(touched, Some([frontend].into()));
}

#[tokio::test]
async fn a_note_raised_without_a_mapping_change_is_returned_at_once() {
    let fake = fake_with_one_job();
    let (mut source, _errors) = ready_source(&fake).await;
    source.changed().await.expect("watchers running");
    drop(source.take_notes());
    both_watches_open(&fake).await;
    // A Service whose endpoint is the node's loopback: skipped, so the
    // mappings stay as they are, but the operator must hear of it now.
    let rv = bump(&fake);
    deliver(
        &fake,
        Kind::Slices,
        &[json!({"type": "ADDED", "object": slice("evil", "127.0.0.1", &rv)})],
    );
    let rv = bump(&fake);
    deliver(
        &fake,
        Kind::Services,
        &[json!({"type": "ADDED", "object": service("evil", 8125, &rv)})],
    );
    let mut notes = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !notes
        .iter()
        .any(|n| matches!(n, Note::Invalid { service, .. } if service == "jobs/evil"))
    {
        match tokio::time::timeout_at(deadline, source.changed()).await {
            Ok(changed) => drop(changed.expect("watchers running")),
            Err(_) => panic!("no change returned for the note; notes so far: {notes:?}"),
        }
        notes.extend(source.take_notes());
    }
    assert_eq!(backends(&source), ["198.18.0.10:8123->10.244.1.5:22"]);
}
