//! The Event on a Service the agents skip: every node reaches the same
//! decision and writes it, the API server keeps one (the first create;
//! the others are refused as already there), and deploy/'s RBAC lets an
//! agent write it in a tenant's namespace. Against the fake API server
//! enforcing deploy/base's RBAC and policies, with two nodes' agent tokens.

use std::time::{Duration, Instant};

use ssh_fwd::{
    agent::source::events::{Events, reason},
    k8s,
    source::kubernetes::desired::Note,
};
use ssh_fwd_tests::fake_api::{FakeApi, Kind};

#[test]
fn fifty_nodes_skipping_a_service_make_one_event_the_tenant_sees() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.enforce_deploy();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let note = Note::StyleNotHonoured {
        service: "team-a/sneaky".into(),
        style: "externalIPs",
    };
    let nodes: Vec<String> = (0..50).map(|n| format!("node-{n}")).collect();
    runtime.block_on(async {
        let mut writers = Vec::new();
        for node in &nodes {
            let token = api.service_account_token("ssh-fwd", "ssh-fwd-agent", Some(node));
            let path = dir.path().join(format!("kubeconfig-{node}"));
            std::fs::write(&path, api.kubeconfig_as(&token)).unwrap();
            let client = k8s::client::open(Some(&path)).await.unwrap().client;
            writers.push(Events::start(client, node.clone()));
        }
        for writer in &writers {
            writer.note(&note);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while answered(&api) < nodes.len() && Instant::now() < deadline {
            // The poll's pace; the deadline is the loop's condition.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(
        answered(&api),
        nodes.len(),
        "every node wrote: {:?}",
        api.requests()
    );
    let events = api.list(Kind::Event);
    let codes: Vec<Option<u16>> = (api.requests().iter())
        .filter(|r| r.resource == "events")
        .map(|r| r.code)
        .collect();
    assert_eq!(events.len(), 1, "one Event for every node: {codes:?}");
    let event = &events[0];
    assert_eq!(event["metadata"]["namespace"], "team-a");
    assert_eq!(event["reason"], reason::STYLE_NOT_HONOURED);
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "Service");
    assert_eq!(event["regarding"]["name"], "sneaky");
    assert!(
        event["note"].as_str().unwrap().contains("--honour-styles"),
        "the fix: {event}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(201)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(409)).count(),
        nodes.len() - 1,
        "the others were refused as already there, not forbidden: {codes:?}"
    );
}

/// Event creates the API server answered.
fn answered(api: &FakeApi) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.resource == "events" && r.code.is_some())
        .count()
}
