//! The handler with real `AdmissionReview` bodies, reserving against an API
//! server that speaks the real JSON (`ssh_fwd_tests::fake_api`).

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use ssh_fwd_tests::fake_api::{FakeApi, Kind};

use super::*;
use crate::controller::webhook::{keys::Keys, mutate::tests::job_pod};
use crate::vocabulary;

pub async fn client(api: &FakeApi) -> kube::Client {
    crate::k8s::client::of_fake(api).await
}

/// An Admitter for the SSH IP 198.18.0.10 whose reservations live in the
/// namespace ssh-fwd of `api`; its watch of them is left empty, so every
/// collision is the API server's to find.
pub async fn admitter(api: &FakeApi, range: RangeInclusive<u16>, deadline: Duration) -> Admitter {
    let client = client(api).await;
    let (store, _writer) = kube::runtime::reflector::store();
    Admitter {
        injection: Injection {
            variable: "SSH_FWD_PUBLIC_SSH".into(),
            host: "ssh.example.org".into(),
            keys: Keys {
                image: "ssh-fwd:test".into(),
                dir: "/etc/ssh-fwd".into(),
                file: "authorized_keys".into(),
                uid: None,
                default_secret: None,
                interval: Duration::from_secs(2),
            },
            host_certs: None,
        },
        reservations: Api::namespaced(client, "ssh-fwd"),
        store,
        ssh_ip: "198.18.0.10".parse().unwrap(),
        range,
        reuse_after: Duration::from_secs(600),
        deadline,
        budget: Budget::new(1000, 1000, Duration::from_secs(10)),
        metrics: AdmissionMetrics::default(),
    }
}

/// An AdmissionReview v1 as kube-apiserver sends it for a pod create.
pub fn review_of(uid: &str, pod: &Value, dry_run: bool) -> Value {
    json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": "jobs",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod,
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// The response, and the pod with its patch applied.
pub fn outcome(answer: &Value, pod: &Value) -> (Value, Value) {
    let response = answer["response"].clone();
    let mut patched = pod.clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    (response, patched)
}

async fn answer(admitter: &Admitter, body: &Value) -> (u16, Value) {
    admitter.review(body.to_string().as_bytes()).await
}

fn reservations(api: &FakeApi) -> Vec<Value> {
    api.list(Kind::Lease)
        .into_iter()
        .filter(|l| l["metadata"]["labels"][vocabulary::PORT_RESERVATION] == "198.18.0.10")
        .collect()
}

#[tokio::test]
async fn a_labelled_pod_made_from_generate_name_gets_a_port_reserved_in_the_api() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    let pod = job_pod();
    let (code, body) = answer(&admitter, &review_of("u-1", &pod, false)).await;
    assert_eq!(code, 200);
    let (response, patched) = outcome(&body, &pod);
    assert_eq!(response["uid"], "u-1");
    assert_eq!(response["allowed"], true);
    let endpoint = patched["metadata"]["annotations"][vocabulary::ENDPOINT]
        .as_str()
        .unwrap();
    let port: u16 = endpoint
        .strip_prefix("ssh.example.org:")
        .unwrap()
        .parse()
        .unwrap();
    assert!((9000..=9099).contains(&port));
    let token = patched["metadata"]["annotations"][vocabulary::RESERVATION]
        .as_str()
        .unwrap();
    assert_eq!(
        patched["spec"]["containers"][1]["env"][0]["value"],
        endpoint
    );
    // The reservation: named after the port, carrying the pod's token and
    // its generateName, since the pod has no name yet.
    let leases = reservations(&api);
    assert_eq!(leases.len(), 1);
    let lease = &leases[0];
    assert_eq!(
        lease["metadata"]["name"],
        format!("ssh-port-198.18.0.10-{port}")
    );
    assert_eq!(lease["metadata"]["namespace"], "ssh-fwd");
    assert_eq!(lease["metadata"]["annotations"][vocabulary::TOKEN], token);
    assert_eq!(lease["spec"]["holderIdentity"], "pod jobs/job-4711-*");
}

#[tokio::test]
async fn a_dry_run_is_mutated_but_reserves_nothing() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    let pod = job_pod();
    let (code, body) = answer(&admitter, &review_of("u-2", &pod, true)).await;
    assert_eq!(code, 200);
    let (response, patched) = outcome(&body, &pod);
    assert!(patched["metadata"]["annotations"][vocabulary::ENDPOINT].is_string());
    assert!(
        patched["metadata"]["annotations"]
            .get(vocabulary::RESERVATION)
            .is_none()
    );
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("dry run"),
        "{response}"
    );
    assert!(reservations(&api).is_empty());
    assert!(
        api.requests().is_empty(),
        "no API call at all: {:?}",
        api.requests()
    );
}

#[tokio::test]
async fn pods_without_the_label_and_other_requests_pass_unchanged() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    let mut plain = job_pod();
    plain["metadata"]["labels"] = json!({"job-name": "x"});
    let mut update = review_of("u-4", &job_pod(), false);
    update["request"]["operation"] = json!("UPDATE");
    let mut service = review_of("u-5", &json!({"metadata": {}, "spec": {}}), false);
    service["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Service"});
    for (uid, body) in [
        ("u-3", review_of("u-3", &plain, false)),
        ("u-4", update),
        ("u-5", service),
    ] {
        let (code, answer) = answer(&admitter, &body).await;
        assert_eq!(code, 200);
        assert_eq!(
            answer["response"],
            json!({"uid": uid, "allowed": true}),
            "{answer}"
        );
    }
    assert!(reservations(&api).is_empty());
}

#[tokio::test]
async fn malformed_requests_get_a_clear_answer_and_never_a_crash() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    let (code, body) = admitter.review(b"\x00not json").await;
    assert_eq!(code, 400);
    assert!(
        body["message"].as_str().unwrap().contains("not JSON"),
        "{body}"
    );
    let old = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "x"}});
    let (code, body) = answer(&admitter, &old).await;
    assert_eq!(code, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("admissionReviewVersions: [v1]")
    );
    // A readable request whose object is no Pod: refused, with the reason.
    for object in [
        json!("a string"),
        json!({"metadata": {"labels": {vocabulary::SSH: "enabled"}}}),
    ] {
        let (code, body) = answer(&admitter, &review_of("u-6", &object, false)).await;
        assert_eq!(code, 200);
        assert_eq!(body["response"]["allowed"], false, "{body}");
        assert_eq!(body["response"]["uid"], "u-6");
        assert!(
            body["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains("not a Pod")
        );
    }
    // Oddly typed fields of a labelled pod: still answered, never a panic.
    let mut odd = job_pod();
    odd["spec"]["containers"][0]["env"] = json!("not a list");
    odd["metadata"]["annotations"] = json!(["not", "a", "map"]);
    let (code, body) = answer(&admitter, &review_of("u-7", &odd, false)).await;
    assert_eq!(code, 200);
    assert_eq!(body["response"]["uid"], "u-7");
}

#[tokio::test]
async fn a_slow_api_server_gets_the_pod_admitted_without_a_port_before_the_deadline() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.delay(Kind::Lease, "create", Duration::from_secs(5));
    let deadline = Duration::from_millis(400);
    let admitter = admitter(&api, 9000..=9099, deadline).await;
    let pod = job_pod();
    let started = Instant::now();
    let (code, body) = answer(&admitter, &review_of("u-8", &pod, false)).await;
    let took = started.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_millis(500),
        "{took:?}"
    );
    assert_eq!(code, 200);
    let (response, patched) = outcome(&body, &pod);
    assert_eq!(response["allowed"], true);
    let why = patched["metadata"]["annotations"][vocabulary::ADMISSION]
        .as_str()
        .unwrap();
    assert!(why.contains("did not answer within 400ms"), "{why}");
    assert!(
        patched["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "SSH_FWD_PUBLIC_SSH")
    );
}

#[tokio::test]
async fn concurrent_admissions_never_share_a_port_even_in_a_nearly_full_range() {
    let api = FakeApi::start_on_loopback().unwrap();
    // 60 pods for 64 ports, with no watch to hint at what is taken: every
    // collision is a 409 from the API server, and another port is tried.
    let admitter = std::sync::Arc::new(admitter(&api, 9000..=9063, Duration::from_secs(20)).await);
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let admitter = admitter.clone();
            tokio::spawn(async move {
                let pod = job_pod();
                let (_, body) = answer(&admitter, &review_of(&format!("u-{i}"), &pod, false)).await;
                let (_, patched) = outcome(&body, &pod);
                patched["metadata"]["annotations"][vocabulary::ENDPOINT]
                    .as_str()
                    .map(str::to_owned)
            })
        })
        .collect();
    let mut ports = BTreeSet::new();
    for task in tasks {
        let endpoint = task.await.unwrap().expect("every pod got a port");
        assert!(
            ports.insert(endpoint.clone()),
            "{endpoint} handed out twice"
        );
    }
    assert_eq!(reservations(&api).len(), 60);
    // The range is then full: the next pod is admitted without a port.
    let pod = job_pod();
    for i in 0..5 {
        let (_, body) = answer(&admitter, &review_of(&format!("v-{i}"), &pod, false)).await;
        let (_, patched) = outcome(&body, &pod);
        if patched["metadata"]["annotations"][vocabulary::ADMISSION].is_string() {
            return;
        }
    }
    panic!("the range never filled up");
}

#[tokio::test]
async fn a_refused_reservation_is_answered_at_once_and_a_busy_api_server_is_tried_again() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    let pod = job_pod();
    // The RBAC does not grant the create (an old manifest): trying again
    // cannot help, so no admission may wait out the deadline for it.
    for (code, says) in [
        (403, "403 forbidden"),
        (404, "404 notfound"),
        (422, "422 invalid"),
    ] {
        api.fail_creates(Kind::Lease, &[code; 100]);
        let started = Instant::now();
        let (status, body) = answer(&admitter, &review_of("u-r", &pod, false)).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "{code}: answered after {took:?}"
        );
        assert_eq!(status, 200);
        let (response, patched) = outcome(&body, &pod);
        assert_eq!(response["allowed"], true);
        let why = patched["metadata"]["annotations"][vocabulary::ADMISSION]
            .as_str()
            .unwrap_or_else(|| panic!("{code}: admitted with a port: {patched}"));
        assert!(why.to_lowercase().contains(says), "{code}: {why}");
        if code == 403 {
            assert!(
                why.contains("Role ssh-fwd-controller-lease in deploy/base/rbac-controller.yaml"),
                "{why}"
            );
        }
    }
    assert!(reservations(&api).is_empty());
    // Overload and server errors pass: the same admission tries again.
    api.fail_creates(Kind::Lease, &[503, 429, 500]);
    let (_, body) = answer(&admitter, &review_of("u-s", &pod, false)).await;
    let (_, patched) = outcome(&body, &pod);
    assert!(
        patched["metadata"]["annotations"][vocabulary::ENDPOINT].is_string(),
        "{patched}"
    );
    assert_eq!(reservations(&api).len(), 1);
}

#[tokio::test]
async fn past_a_cap_a_pod_is_admitted_without_a_port_saying_which_and_nothing_is_reserved() {
    let api = FakeApi::start_on_loopback().unwrap();
    let mut admitter = admitter(&api, 9000..=9099, DEADLINE_FOR_TESTS).await;
    admitter.budget = Budget::new(2, 3, Duration::from_secs(10));
    let pod = job_pod();
    let in_namespace = |uid: &str, namespace: &str| {
        let mut body = review_of(uid, &pod, false);
        body["request"]["namespace"] = json!(namespace);
        body
    };
    let why = |body: &Value| {
        let (_, patched) = outcome(body, &pod);
        let annotations = &patched["metadata"]["annotations"];
        assert_eq!(
            annotations[vocabulary::ENDPOINT].is_string(),
            annotations[vocabulary::ADMISSION].is_null()
        );
        annotations[vocabulary::ADMISSION]
            .as_str()
            .map(str::to_owned)
    };
    for (uid, namespace, capped) in [
        ("u-1", "jobs", None),
        ("u-2", "jobs", None),
        ("u-3", "jobs", Some("2 pods of namespace jobs")),
        ("u-4", "other", None),
        ("u-5", "third", Some("--provisional-cap-total 3")),
    ] {
        let (_, body) = answer(&admitter, &in_namespace(uid, namespace)).await;
        let why = why(&body);
        match capped {
            None => assert_eq!(why, None, "{uid}"),
            Some(says) => assert!(
                why.as_deref().unwrap_or("").contains(says),
                "{uid}: {why:?}"
            ),
        }
    }
    assert_eq!(reservations(&api).len(), 3);
    let capped = admitter
        .metrics
        .admissions
        .get_or_create(&super::super::metrics::OutcomeLabel {
            outcome: Outcome::Capped,
        })
        .get();
    assert_eq!(capped, 2);
}

const DEADLINE_FOR_TESTS: Duration = Duration::from_secs(10);

mod over_tls;
