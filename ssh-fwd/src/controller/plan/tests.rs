use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rand::{SeedableRng as _, rngs::StdRng};
use serde_json::{Value, json};

use super::*;
use crate::args::ServiceStyle;
use crate::controller::expect::{Done, Expectations};
use crate::vocabulary;

mod ownership;
mod publish;
mod reservations;
mod warnings;

const HOST: &str = "ssh.example.org";

fn settings() -> Settings {
    Settings {
        ssh_ips: SshIps::single("198.18.0.10".parse().unwrap()),
        style: ServiceStyle::Loadbalancer,
    }
}

fn pod(name: &str, extra: Value) -> Arc<PodView> {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "jobs", "uid": format!("uid-{name}"),
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}},
        "status": {"podIP": "10.244.0.5", "phase": "Running"},
    });
    merge(&mut value, &extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The Service the controller made for `pod`, as the API returns it.
fn ours(pod: &PodView, port: u16, created: &str, ingress: bool) -> Arc<Service> {
    let mut svc = service::build(pod, port, IntOrString::Int(22), &settings());
    let mut value = serde_json::to_value(&svc).unwrap();
    value["metadata"]["creationTimestamp"] = json!(created);
    value["metadata"]["uid"] = json!(format!("svc-{}", svc.metadata.name.as_deref().unwrap()));
    if ingress {
        value["status"] = json!({"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}});
    }
    svc = serde_json::from_value(value).unwrap();
    Arc::new(svc)
}

fn foreign(name: &str, port: u16, created: &str) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "other", "creationTimestamp": created},
            "spec": {"externalIPs": ["198.18.0.10"], "ports": [{"port": port}]},
        }))
        .unwrap(),
    )
}

fn run(
    pods: &[Arc<PodView>],
    services: &[Arc<Service>],
    range: std::ops::RangeInclusive<u16>,
) -> Vec<Action> {
    run_expecting(pods, services, range, &Expectations::default())
}

fn run_expecting(
    pods: &[Arc<PodView>],
    services: &[Arc<Service>],
    range: std::ops::RangeInclusive<u16>,
    expected: &Expectations,
) -> Vec<Action> {
    let world = World::of(
        crate::controller::world::policy_for(settings().ssh_ips.published()),
        settings().ssh_ips.published(),
        pods,
        services,
        &[],
    );
    let pass = Pass {
        world: &world,
        scope: &Scope::All,
        expected,
        variable: None,
    };
    compute(
        &pass,
        &settings(),
        &range,
        HOST,
        &mut StdRng::seed_from_u64(7),
    )
}

fn created_ports(actions: &[Action]) -> Vec<u16> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { port, .. } => Some(*port),
            _ => None,
        })
        .collect()
}

#[test]
fn a_labelled_pod_gets_a_service_on_a_port_in_range() {
    let actions = run(&[pod("job-1", json!({}))], &[], 8000..=16000);
    let [
        Action::Create {
            pod,
            port,
            service,
            reserve: Some(lease),
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert!((8000..=16000).contains(port));
    assert_eq!(pod.name, "job-1");
    assert_eq!(service.metadata.name.as_deref(), Some("ssh-job-1"));
    // The port is reserved for it first, under its uid.
    let reserved = crate::controller::reservation::read(
        &crate::controller::reservation::kept(lease),
        settings().ssh_ips.published(),
    )
    .unwrap();
    assert_eq!(reserved.port, *port);
    assert_eq!(reserved.pod_uid.as_deref(), Some("uid-job-1"));
}

#[test]
fn services_of_gone_finished_or_unlabelled_pods_are_deleted() {
    let gone = pod("gone", json!({}));
    let finished = pod("done", json!({"status": {"phase": "Succeeded"}}));
    let unlabelled = pod(
        "plain",
        json!({"metadata": {"labels": {vocabulary::SSH: "disabled"}}}),
    );
    let terminating = pod(
        "bye",
        json!({"metadata": {"deletionTimestamp": "2026-11-02T00:00:00Z"}}),
    );
    let services = [
        ours(&gone, 8001, "2026-11-01T00:00:00Z", true),
        ours(&finished, 8002, "2026-11-01T00:00:00Z", true),
        ours(&unlabelled, 8003, "2026-11-01T00:00:00Z", true),
        ours(&terminating, 8004, "2026-11-01T00:00:00Z", true),
    ];
    let actions = run(
        &[finished, unlabelled, terminating],
        &services,
        8000..=16000,
    );
    // Each delete first takes the endpoint off its pod (by uid), in the
    // same action, so the Service stays until that worked.
    let mut deleted: Vec<(&str, &str, &str)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Delete {
                name,
                why: DeleteReason::PodGone,
                unpublish: Some(pod),
                ..
            } => Some((name.as_str(), pod.name.as_str(), pod.uid.as_str())),
            _ => None,
        })
        .collect();
    deleted.sort_unstable();
    assert_eq!(
        deleted,
        [
            ("ssh-bye", "bye", "uid-bye"),
            ("ssh-done", "done", "uid-done"),
            ("ssh-gone", "gone", "uid-gone"),
            ("ssh-plain", "plain", "uid-plain")
        ]
    );
    assert_eq!(actions.len(), 4, "{actions:?}");
}

#[test]
fn after_a_restart_ports_held_by_existing_services_are_not_handed_out() {
    // Ten ports; nine held by our Services and someone's legacy Service.
    let mut pods = Vec::new();
    let mut services = Vec::new();
    for i in 0..8u16 {
        let p = pod(&format!("job-{i}"), json!({}));
        services.push(ours(&p, 9000 + i, "2026-11-01T00:00:00Z", true));
        pods.push(p);
    }
    services.push(foreign("legacy", 9008, "2026-10-01T00:00:00Z"));
    pods.push(pod("new", json!({})));
    let actions = run(&pods, &services, 9000..=9009);
    assert_eq!(created_ports(&actions), [9009]);
}

#[test]
fn writes_the_cache_does_not_show_yet_are_not_redone() {
    let now = std::time::Instant::now();
    let mut expected = Expectations::default();
    // job-a's Service is created but not cached: no second create, and its
    // port stays taken.
    expected.record(
        Done::Created {
            uid: "uid-job-a".into(),
            port: 9000,
        },
        now,
    );
    let actions = run_expecting(
        &[pod("job-a", json!({})), pod("job-b", json!({}))],
        &[],
        9000..=9001,
        &expected,
    );
    assert_eq!(created_ports(&actions), [9001]);
    // job-c is published but the pod cache does not show it: no second event.
    let c = pod("job-c", json!({}));
    expected.record(
        Done::Published {
            uid: "uid-job-c".into(),
            endpoint: format!("{HOST}:9002"),
        },
        now,
    );
    let services = [ours(&c, 9002, "2026-11-01T00:00:00Z", true)];
    assert_eq!(run_expecting(&[c], &services, 9000..=9100, &expected), []);
}

#[test]
fn a_service_that_lost_its_port_to_an_older_one_is_replaced() {
    let p = pod("job", json!({}));
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:05Z", false),
        foreign("rival", 9000, "2026-11-01T00:00:01Z"),
    ];
    let actions = run(std::slice::from_ref(&p), &services, 9000..=9100);
    assert_eq!(
        actions,
        [Action::Delete {
            namespace: "jobs".into(),
            name: "ssh-job".into(),
            uid: Some("svc-ssh-job".into()),
            why: DeleteReason::LostPort {
                port: 9000,
                holder: "other/rival".into()
            },
            unpublish: None,
        }]
    );
    // Once it is gone, the pod gets a port the rival does not hold.
    let actions = run(&[p], &services[1..], 9000..=9001);
    assert_eq!(created_ports(&actions), [9001]);
}

#[test]
fn an_older_service_of_ours_keeps_its_port_against_a_newer_rival() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:01Z", true),
        foreign("late", 9000, "2026-11-01T00:00:09Z"),
    ];
    assert_eq!(run(&[p], &services, 9000..=9100), []);
}

#[test]
fn a_second_service_for_one_pod_is_deleted_and_the_older_kept() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let mut extra =
        serde_json::to_value(ours(&p, 9001, "2026-11-01T00:00:09Z", true).as_ref()).unwrap();
    extra["metadata"]["name"] = json!("ssh-job-copy");
    extra["metadata"]["uid"] = json!("svc-copy");
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:01Z", true),
        Arc::new(serde_json::from_value(extra).unwrap()),
    ];
    assert_eq!(
        run(&[p], &services, 9000..=9100),
        [Action::Delete {
            namespace: "jobs".into(),
            name: "ssh-job-copy".into(),
            uid: Some("svc-copy".into()),
            why: DeleteReason::Duplicate,
            unpublish: None,
        }]
    );
}
