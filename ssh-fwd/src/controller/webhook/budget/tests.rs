use super::*;
use crate::controller::reservation::{self, Holder};

const IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));
const WAIT: Duration = Duration::from_secs(10);

/// [`Budget::take`] with the watch showing `shown`.
fn take<'b>(
    budget: &'b Budget,
    shown: &[Reservation],
    namespace: &str,
    token: &str,
    now: Instant,
) -> Result<Slot<'b>, Capped> {
    let (watched, slot) = budget.take(|| shown.to_vec(), namespace, token, now);
    assert_eq!(watched, shown);
    slot
}

/// A reservation as the watch shows it, made at admission for `token` in
/// `namespace`, bound to a pod when `bound`.
fn watched(port: u16, namespace: &str, token: &str, bound: bool) -> Reservation {
    let holder = if bound {
        Holder::Pod {
            namespace: namespace.into(),
            name: "job-1".into(),
            uid: format!("uid-{port}"),
            token: Some(token.into()),
        }
    } else {
        Holder::Admitted {
            namespace: namespace.into(),
            name: "job-".into(),
            token: token.into(),
        }
    };
    let lease = reservation::build(IP, port, &holder);
    reservation::read(&reservation::kept(&lease), IP).unwrap()
}

#[test]
fn a_namespace_gets_its_cap_and_the_others_keep_theirs() {
    let budget = Budget::new(2, 10, WAIT);
    let now = Instant::now();
    let shown = [watched(9000, "jobs", "a", false)];
    let slot = take(&budget, &shown, "jobs", "b", now).unwrap();
    slot.made("ssh-port-198.18.0.10-9001".into());
    assert_eq!(
        take(&budget, &shown, "jobs", "c", now).err(),
        Some(Capped::Namespace {
            namespace: "jobs".into(),
            cap: 2
        })
    );
    assert!(take(&budget, &shown, "other", "d", now).is_ok());
    // Bound reservations wait for nothing: they do not count.
    let bound = [
        watched(9000, "jobs", "a", true),
        watched(9001, "jobs", "b", true),
    ];
    assert!(take(&budget, &bound, "jobs", "e", now).is_ok());
}

#[test]
fn the_total_holds_however_many_namespaces_a_forger_names() {
    let budget = Budget::new(2, 5, WAIT);
    let now = Instant::now();
    for i in 0..5 {
        let slot = take(&budget, &[], &format!("ns-{i}"), &format!("t{i}"), now).unwrap();
        slot.made(format!("lease-{i}"));
    }
    assert_eq!(
        take(&budget, &[], "ns-new", "x", now).err(),
        Some(Capped::Total { cap: 5 })
    );
    let message = Capped::Total { cap: 5 }.to_string();
    assert!(message.contains("--provisional-cap-total 5"), "{message}");
    assert!(
        message.contains("gives this pod a port once it exists"),
        "{message}"
    );
}

#[test]
fn a_reservation_counts_while_being_made_and_once_made_until_the_watch_shows_it() {
    let budget = Budget::new(1, 10, WAIT);
    let t0 = Instant::now();
    // In flight: counts; given back when the reservation failed.
    let slot = take(&budget, &[], "jobs", "a", t0).unwrap();
    assert!(take(&budget, &[], "jobs", "b", t0).is_err());
    drop(slot);
    let slot = take(&budget, &[], "jobs", "b", t0).unwrap();
    slot.made("ssh-port-198.18.0.10-9001".into());
    assert!(
        take(&budget, &[], "jobs", "c", t0).is_err(),
        "made, not yet watched"
    );
    // The watch shows another reservation of that name (an old one not yet
    // gone from it): still ours to count.
    let stale = [watched(9001, "other", "old", true)];
    assert!(take(&budget, &stale, "jobs", "c", t0).is_err());
    // It shows ours, already bound to its pod: nothing waits.
    let shown = [watched(9001, "jobs", "b", true)];
    assert!(take(&budget, &shown, "jobs", "c", t0).is_ok());
}

#[test]
fn a_made_reservation_the_watch_never_shows_stops_counting_after_the_grace() {
    let budget = Budget::new(1, 10, WAIT);
    let t0 = Instant::now();
    take(&budget, &[], "jobs", "a", t0)
        .unwrap()
        .made("lease-a".into());
    assert!(take(&budget, &[], "jobs", "b", t0 + WAIT / 2).is_err());
    assert!(take(&budget, &[], "jobs", "b", t0 + WAIT).is_ok());
}

#[test]
fn the_total_is_held_to_half_the_range() {
    assert_eq!(total_for(256, &(8000..=16000)), 256);
    assert_eq!(total_for(256, &(9000..=9199)), 100);
    assert_eq!(total_for(256, &(9000..=9000)), 1);
}
