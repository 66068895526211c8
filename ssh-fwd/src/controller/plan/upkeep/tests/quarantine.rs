//! The quarantine of a port whose job ended (`--port-reuse-after`): kept
//! on its reservation, released once over, and given way only when no
//! other port is free.

use rand::{SeedableRng as _, rngs::StdRng};

use super::*;
use crate::controller::{pod::PodRef, ports::Quarantine};

const TEN_MINUTES: Duration = Duration::from_secs(600);

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn bound(port: u16, pod: &str) -> Arc<LeaseView> {
    let holder = Holder::Pod {
        namespace: "jobs".into(),
        name: pod.into(),
        uid: format!("uid-{pod}"),
        token: None,
    };
    let mut lease = reservation::build(IP, port, &holder);
    lease.metadata.uid = Some(format!("lease-{port}"));
    lease.metadata.resource_version = Some("7".into());
    Arc::new(lease.into())
}

fn resting(port: u16, since: Timestamp) -> Arc<LeaseView> {
    let mut lease = reservation::build(IP, port, &Holder::Quarantined { since });
    lease.metadata.uid = Some(format!("lease-{port}"));
    lease.metadata.resource_version = Some("8".into());
    Arc::new(lease.into())
}

fn job(name: &str) -> Arc<PodView> {
    let pod = json!({"metadata": {"name": name, "namespace": "jobs", "uid": format!("uid-{name}"),
                                  "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED}},
                     "status": {"phase": "Running"}});
    Arc::new(serde_json::from_value(pod).unwrap())
}

/// A full pass of an upkeep quarantining for ten minutes, at `wall`.
fn quarantining(upkeep: &mut Upkeep, world: &World, now: Instant, wall: Timestamp) -> Vec<Action> {
    let expected = Expectations::default();
    upkeep.note(world, &Scope::All, &expected, now);
    upkeep.actions(world, &Scope::All, &expected, &RANGE, (now, wall))
}

#[test]
fn the_reservation_of_a_job_that_ended_is_quarantined_not_released() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None).quarantine_for(TEN_MINUTES);
    let leases = [bound(9001, "job-1")];
    assert!(quarantining(&mut upkeep, &world(&[job("job-1")], &leases), t0, at(0)).is_empty());
    let ended = quarantining(&mut upkeep, &world(&[], &leases), t0, at(5));
    let [Action::Quarantine { lease }] = ended.as_slice() else {
        panic!("{ended:?}")
    };
    // Only if it is still the one read; held by nobody since the end.
    assert_eq!(lease.metadata.uid.as_deref(), Some("lease-9001"));
    assert_eq!(lease.metadata.resource_version.as_deref(), Some("7"));
    let r = reservation::read(&reservation::kept(lease), IP).unwrap();
    assert_eq!((r.port, r.released_at), (9001, Some(at(5))));
    assert_eq!((r.token, r.pod_uid, r.namespace), (None, None, None));
}

#[test]
fn with_the_quarantine_off_the_reservation_of_a_job_that_ended_is_released() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None);
    let leases = [bound(9001, "job-1")];
    assert!(quarantining(&mut upkeep, &world(&[job("job-1")], &leases), t0, at(0)).is_empty());
    let ended = quarantining(&mut upkeep, &world(&[], &leases), t0, at(5));
    assert_eq!(kinds(&ended), ["release"]);
}

#[test]
fn a_provisional_reservation_no_pod_came_for_lapses_without_quarantine() {
    let t0 = Instant::now();
    let mut upkeep = Upkeep::new(GRACE, None).quarantine_for(TEN_MINUTES);
    let w = world(&[], &[provisional(9001, "t")]);
    assert!(quarantining(&mut upkeep, &w, t0, at(0)).is_empty());
    assert_eq!(
        kinds(&quarantining(&mut upkeep, &w, t0 + GRACE, at(10))),
        ["release"]
    );
}

#[test]
fn a_quarantined_reservation_is_released_once_its_quarantine_is_over() {
    let t0 = Instant::now();
    // Another replica quarantined it: this upkeep never saw it in use.
    let mut upkeep = Upkeep::new(GRACE, None).quarantine_for(TEN_MINUTES);
    let w = world(&[], &[resting(9001, at(0))]);
    let within = quarantining(&mut upkeep, &w, t0 + GRACE * 2, at(599));
    assert!(within.is_empty(), "{within:?}");
    let over = quarantining(&mut upkeep, &w, t0 + GRACE * 2, at(600));
    let [
        Action::Release {
            port: 9001,
            uid,
            resource_version,
            ..
        },
    ] = over.as_slice()
    else {
        panic!("{over:?}")
    };
    assert_eq!(
        (uid.as_deref(), resource_version.as_deref()),
        (Some("lease-9001"), Some("8"))
    );
}

/// The port `choose` gives a new pod, with ports 9000 and 9001 and the
/// reservations `leases`.
fn chosen(leases: &[Arc<LeaseView>], now: Timestamp) -> Choice {
    let pod = job("job-new");
    let world = world(std::slice::from_ref(&pod), leases);
    let expected = Expectations::default();
    let taken = PortSet {
        world: &world,
        expected: &expected,
    };
    let quarantine = Quarantine {
        after: TEN_MINUTES,
        now,
    };
    let mut free = Free {
        range: &(9000..=9001),
        taken: &taken,
        handed: &mut BTreeSet::new(),
        quarantine: &quarantine,
        rng: &mut StdRng::seed_from_u64(1),
    };
    choose(&pod, &PodRef::of(&pod), &world, &mut free)
}

#[test]
fn with_two_ports_free_a_new_job_does_not_get_the_one_just_freed() {
    let Choice::Fresh { port, reclaim, .. } = chosen(&[resting(9000, at(0))], at(1)) else {
        panic!("no port")
    };
    assert_eq!((port, reclaim), (9001, None));
}

#[test]
fn with_no_port_free_the_longest_quarantined_gives_way_and_says_so() {
    let leases = [resting(9000, at(30)), resting(9001, at(10))];
    let Choice::Fresh {
        port,
        lease,
        reclaim,
        ..
    } = chosen(&leases, at(60))
    else {
        panic!("no port")
    };
    assert_eq!(port, 9001);
    // Its quarantined reservation is deleted first, only if unchanged.
    let reclaim = reclaim.expect("the quarantined reservation to take");
    assert_eq!(
        (reclaim.name.as_str(), reclaim.resource_version.as_deref()),
        ("ssh-port-198.18.0.10-9001", Some("8"))
    );
    let made = reservation::read(&reservation::kept(&lease), IP).unwrap();
    assert_eq!(made.pod_uid.as_deref(), Some("uid-job-new"));
    assert_eq!(made.quarantine_cut, Some(at(10)));
    // Over: taken without a word.
    let Choice::Fresh { lease, .. } = chosen(&leases, at(610)) else {
        panic!("no port")
    };
    let made = reservation::read(&reservation::kept(&lease), IP).unwrap();
    assert_eq!(made.quarantine_cut, None);
}

#[test]
fn a_port_a_job_holds_is_never_taken_from_it() {
    let leases = [bound(9000, "job-1"), bound(9001, "job-2")];
    let pod = job("job-new");
    let pods = [job("job-1"), job("job-2"), pod.clone()];
    let world = world(&pods, &leases);
    let expected = Expectations::default();
    let taken = PortSet {
        world: &world,
        expected: &expected,
    };
    let quarantine = Quarantine {
        after: TEN_MINUTES,
        now: at(0),
    };
    let mut free = Free {
        range: &(9000..=9001),
        taken: &taken,
        handed: &mut BTreeSet::new(),
        quarantine: &quarantine,
        rng: &mut StdRng::seed_from_u64(1),
    };
    assert_eq!(
        choose(&pod, &PodRef::of(&pod), &world, &mut free),
        Choice::Full
    );
}

#[test]
fn a_quarantined_port_does_not_count_as_used() {
    // The range-full alert reads this: a quarantined port is there for a
    // job that needs it.
    let leases = [bound(9000, "job-1"), resting(9001, at(0))];
    let w = world(&[job("job-1")], &leases);
    assert_eq!(w.ports_used(&(9000..=9001)), 1);
}
