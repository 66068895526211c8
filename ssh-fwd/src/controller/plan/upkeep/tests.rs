//! The upkeep's own rules, with time given by the test: binding, lapsing
//! (counted once), and how soon a lapse wakes the leader.

mod quarantine;

use serde_json::json;

use super::*;
use crate::controller::{
    reservation::{self, LeaseView},
    world::policy_for,
};

const IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));
const GRACE: Duration = Duration::from_secs(10);
const RANGE: std::ops::RangeInclusive<u16> = 9000..=9099;

fn provisional(port: u16, token: &str) -> Arc<LeaseView> {
    let holder = Holder::Admitted {
        namespace: "jobs".into(),
        name: "job-".into(),
        token: token.into(),
    };
    let mut lease = reservation::build(IP, port, &holder);
    lease.metadata.uid = Some(format!("lease-{port}"));
    lease.metadata.resource_version = Some("7".into());
    Arc::new(lease.into())
}

fn carrier(name: &str, token: &str) -> Arc<PodView> {
    let pod = json!({"metadata": {"name": name, "namespace": "jobs", "uid": format!("uid-{name}"),
                                  "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED},
                                  "annotations": {vocabulary::RESERVATION: token}},
                     "status": {"phase": "Running"}});
    Arc::new(serde_json::from_value(pod).unwrap())
}

fn world(pods: &[Arc<PodView>], leases: &[Arc<LeaseView>]) -> World {
    World::of(policy_for(IP), IP, pods, &[], leases)
}

/// A full pass of the upkeep at `now`.
fn pass(upkeep: &mut Upkeep, world: &World, now: Instant) -> Vec<Action> {
    let expected = Expectations::default();
    upkeep.note(world, &Scope::All, &expected, now);
    upkeep.actions(
        world,
        &Scope::All,
        &expected,
        &RANGE,
        (now, Timestamp::now()),
    )
}

fn kinds(actions: &[Action]) -> Vec<&'static str> {
    (actions.iter())
        .map(|a| match a {
            Action::Bind { .. } => "bind",
            Action::Release { .. } => "release",
            Action::Reserve { .. } => "reserve",
            _ => "other",
        })
        .collect()
}

#[test]
fn a_provisional_reservation_whose_pod_exists_is_bound_not_released() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None);
    let w = world(&[carrier("job-1", "t")], &[provisional(9001, "t")]);
    // Long after the grace: its pod exists, so it is bound, never lapsed.
    assert_eq!(kinds(&pass(&mut upkeep, &w, t0 + GRACE * 3)), ["bind"]);
    assert_eq!(upkeep.lapsed.get(), 0);
}

#[test]
fn a_provisional_reservation_lapses_after_the_grace_and_is_counted_once() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None);
    let lapsed = Counter::default();
    upkeep.count_lapses_in(lapsed.clone());
    let w = world(&[], &[provisional(9001, "t")]);
    assert!(pass(&mut upkeep, &w, t0).is_empty());
    assert!(pass(&mut upkeep, &w, t0 + GRACE - Duration::from_millis(1)).is_empty());
    assert_eq!(kinds(&pass(&mut upkeep, &w, t0 + GRACE)), ["release"]);
    // The release failed and is planned again: one lapse all the same.
    assert_eq!(kinds(&pass(&mut upkeep, &w, t0 + GRACE * 2)), ["release"]);
    assert_eq!(lapsed.get(), 1);
}

#[test]
fn a_reservation_released_after_its_pod_ended_is_no_lapse() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None);
    let leases = [provisional(9001, "t")];
    // Seen with its pod (not yet bound), which then ended.
    pass(&mut upkeep, &world(&[carrier("job-1", "t")], &leases), t0);
    let gone = pass(
        &mut upkeep,
        &world(&[], &leases),
        t0 + Duration::from_secs(1),
    );
    assert_eq!(kinds(&gone), ["release"]);
    assert_eq!(upkeep.lapsed.get(), 0);
}

#[test]
fn lapses_wake_the_leader_at_most_once_a_second() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None);
    // A flood: a reservation every 10 ms, each with its own grace.
    let leases: Vec<_> = (0..50)
        .map(|i| provisional(9000 + i, &format!("t{i}")))
        .collect();
    for (i, lease) in leases.iter().enumerate() {
        let at = t0 + Duration::from_millis(10 * i as u64);
        let w = world(&[], std::slice::from_ref(lease));
        let expected = Expectations::default();
        // A pass around it, as its watch event wakes.
        let names = [lease.name.clone().unwrap()].into();
        let scope = Scope::Around(super::super::scope::Around {
            reservations: names,
            ..Default::default()
        });
        upkeep.note(&w, &scope, &expected, at);
    }
    let w = world(&[], &leases);
    // The first lapse is due at t0 + GRACE; a full pass then releases
    // every reservation due by then.
    let first = t0 + GRACE;
    assert_eq!(upkeep.until_due(t0), Some(GRACE));
    assert_eq!(kinds(&pass(&mut upkeep, &w, first)), ["release"]);
    // The next is due 10 ms later, but the leader waits out the batch.
    assert_eq!(upkeep.until_due(first), Some(LAPSE_BATCH));
    let next = first + LAPSE_BATCH;
    let w = world(&[], &leases[1..]);
    assert_eq!(pass(&mut upkeep, &w, next).len(), 49);
    assert_eq!(upkeep.until_due(next), None);
}
