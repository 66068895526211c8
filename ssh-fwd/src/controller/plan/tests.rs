use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rand::{SeedableRng as _, rngs::StdRng};
use serde_json::{Value, json};

use super::*;
use crate::args::ServiceStyle;
use crate::controller::{
    expect::{Done, Expectations},
    pod::PodView,
    reservation::{self, Holder, LeaseView},
    service,
    ssh_ips::SshIps,
};
use crate::k8s::grant::Grant;
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

/// The Service the controller made for `pod`, as the API returns it;
/// `granted`: with the grant of `port` written to its status.
fn ours(pod: &PodView, port: u16, created: &str, granted: bool) -> Arc<Service> {
    let mut svc = service::build(pod, port, IntOrString::Int(22), &settings());
    let mut value = serde_json::to_value(&svc).unwrap();
    value["metadata"]["creationTimestamp"] = json!(created);
    value["metadata"]["uid"] = json!(format!("svc-{}", svc.metadata.name.as_deref().unwrap()));
    if granted {
        let grant = Grant {
            port,
            pod_uid: pod.metadata.uid.as_deref().unwrap().into(),
        };
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        value["status"] = service::grant::status(true, &settings().ssh_ips, &grant, "jobs/x", now)
            ["status"]
            .clone();
    }
    svc = serde_json::from_value(value).unwrap();
    Arc::new(svc)
}

/// The reservation of the port of each of our Services for its pod, as
/// the controller made it before the Service.
fn reservations_of(services: &[Arc<Service>]) -> Vec<Arc<LeaseView>> {
    reservations_on(settings().ssh_ips.published(), services)
}

/// [`reservations_of`] on the SSH IP `ip`.
fn reservations_on(ip: std::net::IpAddr, services: &[Arc<Service>]) -> Vec<Arc<LeaseView>> {
    (services.iter())
        .filter_map(|svc| {
            let uid = service::served_pod(svc)?;
            let port = u16::try_from(svc.spec.as_ref()?.ports.as_ref()?.first()?.port).ok()?;
            let holder = Holder::Pod {
                namespace: svc.metadata.namespace.clone()?,
                name: "x".into(),
                uid: uid.to_owned(),
                token: None,
            };
            let mut lease = reservation::build(ip, port, &holder);
            lease.metadata.uid = Some(format!("lease-{port}"));
            Some(Arc::new(LeaseView::from(lease)))
        })
        .collect()
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
        &reservations_of(services),
    );
    let pass = Pass {
        quarantine: crate::controller::ports::Quarantine::off(),
        world: &world,
        scope: &Scope::All,
        expected,
        variable: None,
        gate: crate::controller::served::Gate::granted(),
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
            ..
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert!((8000..=16000).contains(port));
    assert_eq!(pod.name, "job-1");
    assert_eq!(service.metadata.name.as_deref(), Some("ssh-job-1"));
    // The port is reserved for it first, under its uid.
    let reserved =
        reservation::read(&reservation::kept(lease), settings().ssh_ips.published()).unwrap();
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

/// A tenant may write any Service older than a job's and list the job's
/// port in it: a port the controller granted stays with its grant, and
/// its Service is neither deleted nor moved.
#[test]
fn a_granted_port_stays_with_its_service_against_an_older_service_without_a_grant() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:05Z", true),
        foreign("rival", 9000, "2026-11-01T00:00:01Z"),
    ];
    assert_eq!(run(std::slice::from_ref(&p), &services, 9000..=9100), []);
}

/// Two grants of one port (never by design: a reservation removed by hand
/// can cause it): the reservation decides. The Service whose pod holds
/// none is replaced, however old; the pod that holds it keeps its port.
#[test]
fn of_two_grants_of_one_port_the_one_without_the_reservation_is_replaced() {
    let (a, b) = (pod("job-a", json!({})), pod("job-b", json!({})));
    let services = [
        ours(&a, 9000, "2026-11-01T00:00:01Z", true),
        ours(&b, 9000, "2026-11-01T00:00:05Z", true),
    ];
    let leases = reservations_of(&services[1..]);
    let world = World::of(
        crate::controller::world::policy_for(settings().ssh_ips.published()),
        settings().ssh_ips.published(),
        &[a, b],
        &services,
        &leases,
    );
    let pass = Pass {
        quarantine: crate::controller::ports::Quarantine::off(),
        world: &world,
        scope: &Scope::All,
        expected: &Expectations::default(),
        variable: None,
        gate: crate::controller::served::Gate::granted(),
    };
    let actions = compute(
        &pass,
        &settings(),
        &(9000..=9100),
        HOST,
        &mut StdRng::seed_from_u64(7),
    );
    let deleted: Vec<&str> = (actions.iter())
        .filter_map(|a| match a {
            Action::Delete {
                name,
                why: DeleteReason::LostPort { port: 9000, .. },
                ..
            } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["ssh-job-a"], "{actions:?}");
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

/// A Service named otherwise than the pod's, which names the pod as its
/// owner and carries our label (anyone may write both), is not ours: the
/// controller neither deletes it nor takes it for the pod's.
#[test]
fn a_service_not_named_for_its_pod_is_not_ours_whatever_it_carries() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let mut extra =
        serde_json::to_value(ours(&p, 9001, "2026-11-01T00:00:09Z", false).as_ref()).unwrap();
    extra["metadata"]["name"] = json!("ssh-job-copy");
    extra["metadata"]["uid"] = json!("svc-copy");
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:01Z", true),
        Arc::new(serde_json::from_value(extra).unwrap()),
    ];
    assert_eq!(run(&[p], &services, 9000..=9100), []);
}

/// A Service in another namespace naming a pod as its owner is not that
/// pod's: an owner reference names a pod of the Service's own namespace.
#[test]
fn a_service_in_another_namespace_naming_a_pod_is_left_alone() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let mut elsewhere =
        serde_json::to_value(ours(&p, 9001, "2026-11-01T00:00:00Z", false).as_ref()).unwrap();
    elsewhere["metadata"]["namespace"] = json!("tenant");
    elsewhere["metadata"]["uid"] = json!("svc-elsewhere");
    let services = [
        ours(&p, 9000, "2026-11-01T00:00:01Z", true),
        Arc::new(serde_json::from_value(elsewhere).unwrap()),
    ];
    assert_eq!(run(&[p], &services, 9000..=9100), []);
}

/// A tenant's change to its job's Service (a port added, the selector
/// widened) is put back, and the pod told; the grant stays as it was.
#[test]
fn a_changed_service_of_ours_is_put_back_and_its_pod_told() {
    let p = pod(
        "job",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:9000")}}}),
    );
    let mut changed =
        serde_json::to_value(ours(&p, 9000, "2026-11-01T00:00:01Z", true).as_ref()).unwrap();
    changed["spec"]["ports"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "stolen", "protocol": "TCP", "port": 9001, "targetPort": 22}));
    changed["spec"]["selector"]["app"] = json!("other");
    let services = [Arc::new(serde_json::from_value(changed).unwrap())];
    let actions = run(&[p], &services, 9000..=9100);
    let [
        Action::Restore {
            pod,
            name,
            fields,
            patch,
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert_eq!((pod.name.as_str(), name.as_str()), ("job", "ssh-job"));
    assert_eq!(fields, &["ports", "selector"]);
    assert_eq!(patch["spec"]["ports"].as_array().unwrap().len(), 1);
    assert_eq!(patch["spec"]["selector"]["app"], Value::Null);
    assert_eq!(patch["metadata"]["uid"], "svc-ssh-job");
}

/// A Service whose grant names a port its pod holds no reservation for
/// (a tenant cannot write a grant, but a spec may list any port): the
/// port of the pod's reservation is the one granted and published.
#[test]
fn the_port_granted_is_the_pods_reservation_never_what_the_spec_lists() {
    let p = pod("job", json!({}));
    let made = ours(&p, 9000, "2026-11-01T00:00:01Z", false);
    let leases = reservations_of(std::slice::from_ref(&made));
    let mut changed = serde_json::to_value(made.as_ref()).unwrap();
    changed["spec"]["ports"][0]["port"] = json!(9050);
    let services = [Arc::new(
        serde_json::from_value::<Service>(changed).unwrap(),
    )];
    let world = World::of(
        crate::controller::world::policy_for(settings().ssh_ips.published()),
        settings().ssh_ips.published(),
        &[p],
        &services,
        &leases,
    );
    let pass = Pass {
        quarantine: crate::controller::ports::Quarantine::off(),
        world: &world,
        scope: &Scope::All,
        expected: &Expectations::default(),
        variable: None,
        gate: crate::controller::served::Gate::granted(),
    };
    let actions = compute(
        &pass,
        &settings(),
        &(9000..=9100),
        HOST,
        &mut StdRng::seed_from_u64(7),
    );
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Restore { .. }, Action::SetGrant { port: 9000, .. }]
        ),
        "{actions:?}"
    );
}
