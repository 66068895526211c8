use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::{
    controller::{
        reservation::{self, LeaseView},
        world::policy_for,
    },
    vocabulary,
};

const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));

/// A labelled pod of `namespace` carrying `token`, made at `created`.
fn carrier(name: &str, namespace: &str, created: Option<&str>, token: &str) -> Arc<PodView> {
    let mut pod = json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                                      "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED},
                                      "annotations": {vocabulary::RESERVATION: token}},
                         "status": {"phase": "Running"}});
    if let Some(created) = created {
        pod["metadata"]["creationTimestamp"] = json!(created);
    }
    Arc::new(serde_json::from_value(pod).unwrap())
}

fn with(pod: &PodView, edit: impl FnOnce(&mut Value)) -> Arc<PodView> {
    let mut value = serde_json::to_value(pod).unwrap();
    edit(&mut value);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn lease(port: u16, holder: &Holder) -> Arc<LeaseView> {
    let mut lease = reservation::build(IP, port, holder);
    lease.metadata.uid = Some(format!("lease-{port}"));
    lease.metadata.resource_version = Some("7".into());
    Arc::new(lease.into())
}

fn provisional(port: u16, token: &str) -> Arc<LeaseView> {
    lease(
        port,
        &Holder::Admitted {
            namespace: "jobs".into(),
            name: "job-".into(),
            token: token.into(),
        },
    )
}

fn world(pods: &[Arc<PodView>], leases: &[Arc<LeaseView>]) -> World {
    World::of(policy_for(IP), IP, pods, &[], leases)
}

fn uid_of(pod: Option<&PodView>) -> Option<&str> {
    pod?.metadata.uid.as_deref()
}

#[test]
fn of_the_pods_carrying_a_token_the_oldest_then_the_first_by_name_is_the_one() {
    let older = carrier("zeta", "jobs", Some("2026-01-01T00:00:00Z"), "t");
    let younger = carrier("alpha", "jobs", Some("2026-01-01T00:00:01Z"), "t");
    let same_second = carrier("beta", "jobs", Some("2026-01-01T00:00:00Z"), "t");
    let undated = carrier("aaa", "jobs", None, "t");
    let pods = [&*younger, &*older, &*undated];
    assert_eq!(uid_of(first_carrier(pods)), Some("uid-zeta"));
    let pods = [&*older, &*same_second, &*younger];
    assert_eq!(uid_of(first_carrier(pods)), Some("uid-beta"));
    assert_eq!(uid_of(first_carrier([&*undated])), Some("uid-aaa"));
    assert!(first_carrier([]).is_none());
}

#[test]
fn a_provisional_reservation_is_its_first_carriers_and_a_younger_copy_gets_nothing() {
    let victim = carrier("victim", "jobs", Some("2026-01-01T00:00:00Z"), "t");
    // Its uid sorts first, and its name too: neither counts.
    let copier = carrier("a-copier", "jobs", Some("2026-01-01T00:00:05Z"), "t");
    let leases = [provisional(9042, "t")];
    let w = world(&[victim.clone(), copier.clone()], &leases);
    let r = w.book().on_port(9042).unwrap();
    assert_eq!(r.stage(), Stage::Provisional { token: "t" });
    assert_eq!(uid_of(pod_of(&w, r)), Some("uid-victim"));
    assert_eq!(reservation_of(&w, &victim).map(|r| r.port), Some(9042));
    assert_eq!(reservation_of(&w, &copier), None);
    // The first carrier finished: the copy does not inherit it.
    let finished = with(&victim, |v| v["status"]["phase"] = json!("Succeeded"));
    let w = world(&[finished, copier.clone()], &leases);
    let r = w.book().on_port(9042).unwrap();
    assert!(pod_of(&w, r).is_none());
    assert_eq!(reservation_of(&w, &copier), None);
    // A token of another namespace is another token.
    let elsewhere = carrier("victim", "other", Some("2026-01-01T00:00:00Z"), "t");
    let w = world(std::slice::from_ref(&elsewhere), &leases);
    assert!(pod_of(&w, w.book().on_port(9042).unwrap()).is_none());
    assert_eq!(reservation_of(&w, &elsewhere), None);
}

#[test]
fn a_bound_reservation_is_its_pods_only_whatever_carries_its_token() {
    let victim = carrier("victim", "jobs", Some("2026-01-01T00:00:00Z"), "t");
    let copier = carrier("copier", "jobs", Some("2026-01-01T00:00:05Z"), "t");
    let provisional = provisional(9042, "t");
    let w = world(
        std::slice::from_ref(&victim),
        std::slice::from_ref(&provisional),
    );
    let r = w.book().on_port(9042).unwrap();
    let bound = Arc::new(LeaseView::from(bound(IP, r, &victim).unwrap()));
    let w = world(
        &[victim.clone(), copier.clone()],
        std::slice::from_ref(&bound),
    );
    let r = w.book().on_port(9042).unwrap();
    assert_eq!(r.stage(), Stage::Bound { uid: "uid-victim" });
    assert_eq!(
        r.token.as_deref(),
        Some("t"),
        "the token stays, for the record"
    );
    assert_eq!(uid_of(pod_of(&w, r)), Some("uid-victim"));
    assert_eq!(reservation_of(&w, &copier), None);
    // The victim is gone: nothing holds it, the copy least of all.
    let w = world(std::slice::from_ref(&copier), &[bound]);
    assert!(pod_of(&w, w.book().on_port(9042).unwrap()).is_none());
    assert_eq!(reservation_of(&w, &copier), None);
}

#[test]
fn binding_updates_the_reservation_read_keeping_its_port_and_token() {
    let victim = carrier("victim", "jobs", None, "t");
    let w = world(std::slice::from_ref(&victim), &[provisional(9042, "t")]);
    let r = w.book().on_port(9042).unwrap();
    let lease = bound(IP, r, &victim).unwrap();
    assert_eq!(lease.metadata.name.as_deref(), Some(r.name.as_str()));
    assert_eq!(lease.metadata.uid.as_deref(), Some("lease-9042"));
    assert_eq!(lease.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(
        lease.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("pod jobs/victim")
    );
    let read = reservation::read(&LeaseView::from(lease), IP).unwrap();
    assert_eq!(
        (read.port, read.token.as_deref(), read.pod_uid.as_deref()),
        (9042, Some("t"), Some("uid-victim"))
    );
    assert_eq!(read.namespace.as_deref(), Some("jobs"));
    // Only a provisional reservation is bound.
    let service = lease_of_service();
    let w = world(&[], &[service]);
    assert!(bound(IP, w.book().on_port(9050).unwrap(), &victim).is_none());
}

fn lease_of_service() -> Arc<LeaseView> {
    lease(
        9050,
        &Holder::Service {
            key: "other/svc".into(),
        },
    )
}
