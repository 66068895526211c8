//! Port reservations in the plan: honoured, made, mirrored and released,
//! with time given by the test.

use std::time::{Duration, Instant};

use super::*;
use crate::controller::{
    plan::upkeep::Upkeep,
    reservation::{self, Holder, LeaseView},
    warn::Admission,
};
use crate::vocabulary;

const GRACE: Duration = Duration::from_secs(60);

fn ip() -> std::net::IpAddr {
    settings().ssh_ips.published()
}

/// A reservation as the API returns it (uid and resourceVersion set).
fn lease(port: u16, holder: &Holder) -> Arc<LeaseView> {
    let mut lease = reservation::build(ip(), port, holder);
    lease.metadata.uid = Some(format!("lease-{port}"));
    lease.metadata.resource_version = Some("7".into());
    Arc::new(lease.into())
}

fn admitted(namespace: &str, token: &str) -> Holder {
    Holder::Admitted {
        namespace: namespace.into(),
        name: "job-".into(),
        token: token.into(),
    }
}

/// A pod admitted with `port` under `token`.
fn admitted_pod(name: &str, port: u16, token: &str) -> Arc<PodView> {
    pod(
        name,
        json!({"metadata": {"annotations": {vocabulary::RESERVATION: token,
            vocabulary::ENDPOINT: format!("{HOST}:{port}")}}}),
    )
}

struct Pass<'a> {
    pods: &'a [Arc<PodView>],
    services: &'a [Arc<Service>],
    leases: &'a [Arc<LeaseView>],
    variable: Option<&'a str>,
    range: std::ops::RangeInclusive<u16>,
}

impl Pass<'_> {
    /// The plan and the upkeep at `now`, the leader having first seen the
    /// reservations at `seen` (and no pass since).
    fn at(&self, seen: Instant, now: Instant) -> Vec<Action> {
        let mut upkeep = Upkeep::new(GRACE, None);
        let expected = Expectations::default();
        upkeep.note(&self.world(), &Scope::All, &expected, seen);
        self.with(&mut upkeep, now)
    }

    fn world(&self) -> World {
        World::of(
            crate::controller::world::policy_for(ip()),
            ip(),
            self.pods,
            self.services,
            self.leases,
        )
    }

    /// A pass at `now` after the passes `upkeep` noted.
    fn with(&self, upkeep: &mut Upkeep, now: Instant) -> Vec<Action> {
        let world = self.world();
        let expected = Expectations::default();
        upkeep.note(&world, &Scope::All, &expected, now);
        let pass = super::Pass {
            quarantine: crate::controller::ports::Quarantine::off(),
            world: &world,
            scope: &Scope::All,
            expected: &expected,
            variable: self.variable,
            gate: crate::controller::served::Gate::granted(),
        };
        let mut rng = StdRng::seed_from_u64(3);
        let mut actions = compute(&pass, &settings(), &self.range, HOST, &mut rng);
        actions.extend(upkeep.actions(
            &world,
            &Scope::All,
            &expected,
            &self.range,
            (now, k8s_openapi::jiff::Timestamp::now()),
        ));
        actions
    }
}

fn pass<'a>(
    pods: &'a [Arc<PodView>],
    services: &'a [Arc<Service>],
    leases: &'a [Arc<LeaseView>],
) -> Pass<'a> {
    Pass {
        pods,
        services,
        leases,
        variable: Some("SSH_FWD_PUBLIC_SSH"),
        range: 9000..=9099,
    }
}

fn releases(actions: &[Action]) -> Vec<u16> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { port, .. } => Some(*port),
            _ => None,
        })
        .collect()
}

fn warnings(actions: &[Action]) -> Vec<&Problem> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Warn { problem, .. } => Some(problem),
            _ => None,
        })
        .collect()
}

#[test]
fn an_admitted_pod_gets_its_service_on_the_port_it_was_told_without_a_new_reservation() {
    let t0 = Instant::now();
    let pods = [admitted_pod("job-x1", 9042, "tok")];
    let leases = [lease(9042, &admitted("jobs", "tok"))];
    let actions = pass(&pods, &[], &leases).at(t0, t0);
    let [
        Action::Create {
            port: 9042,
            reserve: None,
            ..
        },
        Action::Bind { lease, .. },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    // The reservation made at admission is bound to the pod it was for.
    let bound = reservation::read(&reservation::kept(lease), ip()).unwrap();
    assert_eq!(
        (bound.port, bound.pod_uid.as_deref()),
        (9042, Some("uid-job-x1"))
    );
}

#[test]
fn a_pod_created_without_the_webhook_gets_a_fresh_reserved_port_and_is_told_it_lacks_the_variable()
{
    let t0 = Instant::now();
    let pods = [pod("job-1", json!({}))];
    let actions = pass(&pods, &[], &[]).at(t0, t0);
    let [
        Action::Warn { problem, .. },
        Action::Create {
            port,
            reserve: Some(lease),
            ..
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert_eq!(
        problem,
        &Problem::EnvMissing {
            variable: "SSH_FWD_PUBLIC_SSH".into(),
            told: None,
            admission: Admission::Unseen { keys: None },
        }
    );
    assert_eq!(problem.reason(), vocabulary::reason::SSH_ENV_MISSING);
    assert_eq!(
        reservation::read(&reservation::kept(lease), ip())
            .unwrap()
            .port,
        *port
    );
    // Without a webhook nothing was promised, so nothing is missing.
    let quiet = Pass {
        variable: None,
        ..pass(&pods, &[], &[])
    };
    assert!(warnings(&quiet.at(t0, t0)).is_empty());
}

#[test]
fn a_reservation_whose_pod_never_came_is_released_once_its_grace_is_over() {
    let t0 = Instant::now();
    let leases = [lease(9001, &admitted("jobs", "never"))];
    let later = pass(&[], &[], &leases);
    assert!(releases(&later.at(t0, t0 + GRACE - Duration::from_secs(1))).is_empty());
    let actions = later.at(t0, t0 + GRACE);
    assert_eq!(
        actions,
        [Action::Release {
            name: reservation::name(ip(), 9001),
            port: 9001,
            uid: Some("lease-9001".into()),
            resource_version: Some("7".into()),
        }],
        "released only if it is still the one read"
    );
}

#[test]
fn a_restarted_leader_counts_the_grace_from_when_it_first_sees_a_reservation() {
    // With no creation time to go by (`FirstSeen` bounds the grace of an
    // old one by it), a reservation first seen now may have a pod on its
    // way: it waits the whole grace.
    let started = Instant::now();
    let leases = [lease(9001, &admitted("jobs", "slow"))];
    assert!(
        releases(&pass(&[], &[], &leases).at(started, started + Duration::from_secs(1))).is_empty()
    );
    let mut upkeep = Upkeep::new(GRACE, None);
    let world = World::of(
        crate::controller::world::policy_for(ip()),
        ip(),
        &[],
        &[],
        &leases,
    );
    upkeep.note(&world, &Scope::All, &Expectations::default(), started);
    assert_eq!(upkeep.next_due(started), Some(started + GRACE));
    assert_eq!(upkeep.next_due(started + GRACE), None);
}

#[test]
fn a_reservation_stays_while_its_pod_lives_and_goes_once_the_service_is_gone() {
    let t0 = Instant::now();
    let late = t0 + GRACE * 10;
    let p = admitted_pod("job-2", 9002, "tok2");
    let leases = [lease(9002, &admitted("jobs", "tok2"))];
    let svc = ours(&p, 9002, "2026-11-01T00:00:00Z", true);
    assert!(
        releases(
            &pass(
                std::slice::from_ref(&p),
                std::slice::from_ref(&svc),
                &leases
            )
            .at(t0, late)
        )
        .is_empty()
    );
    // The pod ended: its Service is deleted first, the reservation kept.
    let ended = pod("job-2", json!({"status": {"phase": "Succeeded"}}));
    let while_deleting = pass(
        std::slice::from_ref(&ended),
        std::slice::from_ref(&svc),
        &leases,
    )
    .at(t0, late);
    assert!(
        while_deleting
            .iter()
            .any(|a| matches!(a, Action::Delete { .. }))
    );
    assert!(releases(&while_deleting).is_empty());
    // The Service is gone: the port is free again.
    assert_eq!(releases(&pass(&[ended], &[], &leases).at(t0, late)), [9002]);
}

#[test]
fn a_reservation_seen_in_use_is_released_as_soon_as_it_is_not_without_waiting_for_the_grace() {
    let t0 = Instant::now();
    let p = admitted_pod("job-6", 9006, "tok6");
    let leases = [lease(9006, &admitted("jobs", "tok6"))];
    let mut upkeep = Upkeep::new(GRACE, None);
    // Seen with its pod (and no Service yet: the create is on its way).
    let first = pass(std::slice::from_ref(&p), &[], &leases).with(&mut upkeep, t0);
    assert!(releases(&first).is_empty());
    // The pod was deleted a second later, before it got a Service.
    let gone = pass(&[], &[], &leases).with(&mut upkeep, t0 + Duration::from_secs(1));
    assert_eq!(releases(&gone), [9006]);
    assert_eq!(upkeep.next_due(t0), None, "nothing left to wait for");
}

#[test]
fn a_port_a_service_holds_without_a_reservation_gets_one_and_loses_it_with_the_service() {
    let t0 = Instant::now();
    let legacy = foreign("legacy", 9005, "2026-10-01T00:00:00Z");
    let actions = pass(&[], std::slice::from_ref(&legacy), &[]).at(t0, t0);
    let [Action::Reserve { lease: made }] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(
        reservation::read(&reservation::kept(made), ip())
            .unwrap()
            .port,
        9005
    );
    assert_eq!(
        made.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("service other/legacy")
    );
    let mirrored = [lease(
        9005,
        &Holder::Service {
            key: "other/legacy".into(),
        },
    )];
    let late = t0 + GRACE * 2;
    assert_eq!(pass(&[], &[legacy], &mirrored).at(t0, late), []);
    assert_eq!(releases(&pass(&[], &[], &mirrored).at(t0, late)), [9005]);
    // Outside the range: none of our business.
    let far = foreign("far", 20000, "2026-10-01T00:00:00Z");
    assert_eq!(pass(&[], &[far], &[]).at(t0, t0), []);
}

#[test]
fn a_token_copied_into_another_namespace_or_a_second_pod_gets_no_reserved_port() {
    let t0 = Instant::now();
    let mut thief = serde_json::to_value(admitted_pod("thief", 9042, "tok").as_ref()).unwrap();
    thief["metadata"]["namespace"] = json!("elsewhere");
    let thief: Arc<PodView> = Arc::new(serde_json::from_value(thief).unwrap());
    let leases = [lease(9042, &admitted("jobs", "tok"))];
    let actions = pass(std::slice::from_ref(&thief), &[], &leases).at(t0, t0);
    assert!(!created(&actions).contains(&9042));
    // Two pods in one namespace carrying one token: one Service on the port.
    let pods = [
        admitted_pod("a", 9042, "tok"),
        admitted_pod("b", 9042, "tok"),
    ];
    let created = created(&pass(&pods, &[], &leases).at(t0, t0));
    assert_eq!(
        created.iter().filter(|p| **p == 9042).count(),
        1,
        "{created:?}"
    );
    assert_eq!(created.len(), 2);
}

#[test]
fn a_pod_whose_reservation_vanished_reserves_its_told_port_again_under_its_token() {
    let t0 = Instant::now();
    let pods = [admitted_pod("job-3", 9003, "tok3")];
    let actions = pass(&pods, &[], &[]).at(t0, t0);
    let [
        Action::Create {
            port: 9003,
            reserve: Some(lease),
            ..
        },
    ] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert_eq!(
        reservation::read(&reservation::kept(lease), ip())
            .unwrap()
            .token
            .as_deref(),
        Some("tok3")
    );
}

#[test]
fn a_pod_keeps_its_reserved_port_against_an_older_service_without_a_grant() {
    let t0 = Instant::now();
    let pods = [admitted_pod("job-4", 9004, "tok4")];
    let leases = [lease(9004, &admitted("jobs", "tok4"))];
    let rival = foreign("rival", 9004, "2026-10-01T00:00:00Z");
    let actions = pass(&pods, &[rival], &leases).at(t0, t0);
    assert_eq!(created(&actions), [9004]);
    assert!(warnings(&actions).is_empty(), "{actions:?}");
}

/// Another pod's Service granted the port without its reservation (a
/// Lease replaced by hand): the reservation decides, the pod keeps its
/// port and the other Service goes.
#[test]
fn a_pod_keeps_its_reserved_port_and_a_grant_without_the_reservation_goes() {
    let t0 = Instant::now();
    let pods = [admitted_pod("job-4", 9004, "tok4"), pod("job-x", json!({}))];
    let leases = [lease(9004, &admitted("jobs", "tok4"))];
    let rival = ours(&pods[1], 9004, "2026-10-01T00:00:00Z", true);
    let actions = pass(&pods, &[rival], &leases).at(t0, t0);
    assert_eq!(created(&actions), [9004]);
    assert!(
        actions.iter().any(|a| matches!(a, Action::Delete { name, why: DeleteReason::LostPort { port: 9004, .. }, .. } if name == "ssh-job-x")),
        "{actions:?}"
    );
    assert!(warnings(&actions).is_empty(), "{actions:?}");
}

#[test]
fn a_pod_whose_told_port_is_reserved_for_another_gets_another_and_a_warning_naming_the_lost_port() {
    let t0 = Instant::now();
    let pods = [admitted_pod("job-4", 9004, "tok4")];
    // Its reservation vanished, and the port was reserved for another.
    let leases = [lease(9004, &admitted("jobs", "someone-else"))];
    let actions = pass(&pods, &[], &leases).at(t0, t0);
    let ports = created(&actions);
    assert_eq!(ports.len(), 1);
    assert_ne!(ports[0], 9004);
    assert_eq!(
        warnings(&actions),
        [&Problem::EnvMissing {
            variable: "SSH_FWD_PUBLIC_SSH".into(),
            told: Some(9004),
            admission: Admission::WithPort,
        }]
    );
}

#[test]
fn fresh_ports_avoid_every_reserved_one() {
    let t0 = Instant::now();
    let leases: Vec<Arc<LeaseView>> = (9000..9003)
        .map(|p| lease(p, &admitted("jobs", &format!("t{p}"))))
        .collect();
    let pods = [pod("job-5", json!({}))];
    let actions = Pass {
        range: 9000..=9003,
        ..pass(&pods, &[], &leases)
    }
    .at(t0, t0);
    assert_eq!(created(&actions), [9003]);
}

fn created(actions: &[Action]) -> Vec<u16> {
    created_ports(actions)
}
