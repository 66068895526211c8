use super::*;

const RENEW: Duration = Duration::from_millis(500);

fn held_by(holder: &str) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(2),
        ..LeaseSpec::default()
    }
}

#[test]
fn a_ready_node_creates_a_missing_lease_only_once_the_watch_has_listed() {
    let (mut a, now) = (Holding::new("a", RENEW), Instant::now());
    assert_eq!(
        a.next(
            &Seen {
                synced: false,
                ..Seen::ready(None)
            },
            now
        ),
        Action::Nothing
    );
    assert_eq!(a.next(&Seen::ready(None), now), Action::Create);
    assert_eq!(
        a.next(
            &Seen {
                ready: false,
                ..Seen::ready(None)
            },
            now
        ),
        Action::Nothing,
        "not ready"
    );
}

#[test]
fn a_holder_renews_each_period_and_a_standby_takes_over_after_the_duration() {
    let t0 = Instant::now();
    let (mut a, mut b) = (Holding::new("a", RENEW), Holding::new("b", RENEW));
    a.wrote(t0);
    let lease = held_by("a");
    assert_eq!(a.next(&Seen::ready(Some(&lease)), t0), Action::Nothing);
    assert_eq!(
        a.next(&Seen::ready(Some(&lease)), t0 + RENEW),
        Action::Renew
    );
    assert_eq!(
        b.next(&Seen::ready(Some(&lease)), t0),
        Action::Probe { unicast: false },
        "a standby watches the holder"
    );
    let expired = t0 + Duration::from_secs(2);
    assert_eq!(b.next(&Seen::ready(Some(&lease)), expired), Action::Take);
    // The Lease shows b now: a stops answering.
    assert_eq!(
        a.next(&Seen::ready(Some(&held_by("b"))), expired),
        Action::Withdraw
    );
}

#[test]
fn a_holder_that_cannot_renew_answers_until_it_hears_another_node() {
    let t0 = Instant::now();
    let mut a = Holding::new("a", RENEW);
    a.wrote(t0);
    let lease = held_by("a");
    let late = t0 + RENEW * 4;
    assert_eq!(a.next(&Seen::ready(Some(&lease)), late), Action::Renew);
    assert!(a.held, "no renewal, nobody heard: still answering");
    assert_eq!(
        a.next(
            &Seen {
                heard_other: true,
                ..Seen::ready(Some(&lease))
            },
            late
        ),
        Action::Withdraw
    );
    // Heard while renewing fine: a neighbour's mistake, not a takeover.
    a.wrote(late);
    assert_eq!(
        a.next(
            &Seen {
                heard_other: true,
                ..Seen::ready(Some(&lease))
            },
            late
        ),
        Action::Nothing
    );
}

#[test]
fn a_node_that_is_not_ready_gives_the_lease_up_and_takes_none() {
    let t0 = Instant::now();
    let mut a = Holding::new("a", RENEW);
    a.wrote(t0);
    assert_eq!(
        a.next(
            &Seen {
                ready: false,
                ..Seen::ready(Some(&held_by("a")))
            },
            t0
        ),
        Action::Release
    );
    a.withdrew();
    let free = held_by("");
    assert_eq!(
        a.next(
            &Seen {
                ready: false,
                ..Seen::ready(Some(&free))
            },
            t0
        ),
        Action::Nothing
    );
    assert_eq!(a.next(&Seen::ready(Some(&free)), t0), Action::Take);
}

#[test]
fn a_standby_whose_take_failed_reads_the_lease_before_it_takes_again() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let free = held_by("");
    assert_eq!(b.next(&Seen::ready(Some(&free)), t0), Action::Take);
    b.take_failed(t0);
    assert_eq!(
        b.next(&Seen::ready(Some(&free)), t0 + ms(100)),
        Action::Nothing,
        "one try a period"
    );
    assert_eq!(b.next(&Seen::ready(Some(&free)), t0 + RENEW), Action::Read);
    b.read(Some(&free), t0 + RENEW);
    assert_eq!(
        b.next(&Seen::ready(Some(&free)), t0 + RENEW),
        Action::Take,
        "a free Lease, read again: taken at once"
    );
}

#[test]
fn a_standby_whose_take_failed_sends_no_take_that_could_land_when_the_api_comes_back() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    // The API stalls for everyone at t0: a's renewals stop reaching it,
    // b's watch shows nothing new, and b's take is not answered.
    let lease = held_by("a");
    b.next(&Seen::ready(Some(&lease)), t0);
    let expired = t0 + ms(2_000);
    assert_eq!(b.next(&Seen::ready(Some(&lease)), expired), Action::Take);
    b.take_failed(expired);
    let mut reads = 0;
    for n in 1..=120 {
        let now = expired + ms(250 * n);
        match b.next(&Seen::ready(Some(&lease)), now) {
            Action::Read => {
                reads += 1;
                b.read_failed(now);
            }
            Action::Nothing => {}
            action => panic!("{action:?} {} ms into the outage", 2_000 + 250 * n),
        }
    }
    assert!((50..=65).contains(&reads), "a read a period: {reads}");
    // The API is back and shows the Lease as it was: the holder gets a
    // full duration, from now, to renew before it is taken.
    let back = expired + ms(30_500);
    assert_eq!(b.next(&Seen::ready(Some(&lease)), back), Action::Read);
    b.read(Some(&lease), back);
    assert!(matches!(
        b.next(&Seen::ready(Some(&lease)), back + ms(1_900)),
        Action::Probe { .. } | Action::Nothing
    ));
    assert_eq!(
        b.next(&Seen::ready(Some(&lease)), back + ms(2_000)),
        Action::Take,
        "a holder that did not renew with the API back is gone"
    );
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const BROADCAST: Action = Action::Probe { unicast: false };
const UNICAST: Action = Action::Probe { unicast: true };

#[test]
fn a_standby_takes_over_a_holder_whose_data_path_went_silent_once_it_missed_a_renewal() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let lease = held_by("a");
    let mut at = |t: u64, answered: u64| {
        let answered = (answered > 0).then(|| t0 + ms(answered));
        b.next(
            &Seen {
                answered,
                ..Seen::ready(Some(&lease))
            },
            t0 + ms(t),
        )
    };
    assert_eq!(at(0, 0), BROADCAST, "whoever holds it");
    assert_eq!(at(50, 1), Action::Nothing, "a fifth of a period apart");
    assert_eq!(at(100, 1), UNICAST, "to the MAC that answered");
    assert_eq!(at(150, 101), Action::Nothing);
    // The holder's node dies here.
    assert_eq!(at(200, 101), UNICAST);
    assert_eq!(at(300, 101), BROADCAST, "after a miss, to everyone");
    assert_eq!(at(400, 101), BROADCAST);
    assert_eq!(at(500, 101), BROADCAST, "a renewal may still be on its way");
    assert_eq!(
        at(600, 101),
        Action::TakeFromSilent {
            holder: "a".into(),
            quiet: ms(600)
        },
        "silent, and a renewal missed: 1.4 s before the Lease expires"
    );
}

#[test]
fn a_silent_data_path_of_a_holder_that_renews_is_not_taken_over() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let first = held_by("a");
    let renewed = LeaseSpec {
        lease_transitions: Some(1),
        ..held_by("a")
    };
    assert_eq!(b.next(&Seen::ready(Some(&first)), t0), BROADCAST);
    let heard = Some(t0 + ms(1));
    for t in [100, 200, 300, 400] {
        assert!(matches!(
            b.next(
                &Seen {
                    answered: heard,
                    ..Seen::ready(Some(&first))
                },
                t0 + ms(t)
            ),
            Action::Probe { .. }
        ));
    }
    // Three unanswered, but the renewal seen 500 ms in: alive by the
    // API.
    let t1 = t0 + ms(500);
    assert_eq!(
        b.next(
            &Seen {
                answered: heard,
                ..Seen::ready(Some(&renewed))
            },
            t1
        ),
        BROADCAST
    );
    assert_eq!(
        b.next(
            &Seen {
                answered: heard,
                ..Seen::ready(Some(&renewed))
            },
            t1 + ms(500)
        ),
        BROADCAST,
        "quiet for 500 ms only"
    );
    assert_eq!(
        b.next(
            &Seen {
                answered: heard,
                ..Seen::ready(Some(&renewed))
            },
            t1 + ms(600)
        ),
        Action::TakeFromSilent {
            holder: "a".into(),
            quiet: ms(600)
        }
    );
}

#[test]
fn a_holder_never_heard_answering_is_taken_over_only_when_its_lease_expires() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let lease = held_by("a");
    // An answer from before the watch began is about an earlier holder.
    let stale = Some(t0 - ms(10));
    for t in (0_u64..2_000).step_by(50) {
        let action = b.next(
            &Seen {
                answered: stale,
                ..Seen::ready(Some(&lease))
            },
            t0 + ms(t),
        );
        assert!(
            matches!(action, Action::Nothing | Action::Probe { unicast: false }),
            "{action:?} at {t} ms"
        );
    }
    assert_eq!(
        b.next(
            &Seen {
                answered: stale,
                ..Seen::ready(Some(&lease))
            },
            t0 + ms(2_000)
        ),
        Action::Take,
        "expired"
    );
}

#[test]
fn a_holder_that_answers_keeps_the_ssh_ip_until_its_lease_expires() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let lease = held_by("a");
    // Its data path answers every probe; its API is away (a partition).
    for t in (0_u64..2_000).step_by(50) {
        let answered = t0 + ms(t.saturating_sub(49));
        let action = b.next(
            &Seen {
                answered: Some(answered),
                ..Seen::ready(Some(&lease))
            },
            t0 + ms(t),
        );
        assert!(
            matches!(action, Action::Nothing | Action::Probe { .. }),
            "{action:?} at {t} ms"
        );
    }
    assert_eq!(
        b.next(&Seen::ready(Some(&lease)), t0 + ms(2_000)),
        Action::Take,
        "expired"
    );
}

#[test]
fn another_holder_starts_the_count_again_and_a_standby_not_ready_probes_nobody() {
    let t0 = Instant::now();
    let mut b = Holding::new("b", RENEW);
    let (by_a, by_c) = (held_by("a"), held_by("c"));
    for t in [0, 100, 200] {
        b.next(&Seen::ready(Some(&by_a)), t0 + ms(t));
    }
    assert_eq!(
        b.next(&Seen::ready(Some(&by_c)), t0 + ms(600)),
        BROADCAST,
        "c holds it now: its count starts at zero"
    );
    let mut d = Holding::new("d", RENEW);
    for t in (0..1_000).step_by(100) {
        assert_eq!(
            d.next(
                &Seen {
                    ready: false,
                    ..Seen::ready(Some(&by_a))
                },
                t0 + ms(t)
            ),
            Action::Nothing
        );
    }
}

#[test]
fn a_holder_that_gave_way_answers_again_only_once_a_renewal_goes_through() {
    let t0 = Instant::now();
    let mut a = Holding::new("a", RENEW);
    a.wrote(t0);
    // The Lease as its stalled watch last showed it, for as long as the
    // partition lasts.
    let cached = held_by("a");
    let late = t0 + RENEW * 4;
    assert_eq!(
        a.next(
            &Seen {
                heard_other: true,
                ..Seen::ready(Some(&cached))
            },
            late
        ),
        Action::Withdraw
    );
    a.withdrew();
    let mut tries = 0;
    for n in 1..=40 {
        let action = a.next(
            &Seen {
                heard_other: true,
                ..Seen::ready(Some(&cached))
            },
            late + ms(50 * n),
        );
        assert!(
            matches!(action, Action::Nothing | Action::Renew),
            "{n}: {action:?}"
        );
        tries += u32::from(action == Action::Renew);
        assert!(!a.held, "{n}: answering again from a Lease it cannot renew");
    }
    assert!((4..=5).contains(&tries), "one try a period: {tries}");
    // A renewal goes through: the Lease was ours after all.
    a.wrote(late + ms(2_000));
    assert!(a.held);
    assert_eq!(
        a.next(&Seen::ready(Some(&cached)), late + ms(2_100)),
        Action::Nothing
    );
}

#[test]
fn a_holder_that_gave_way_takes_a_lease_given_up_and_waits_for_another_holder() {
    let t0 = Instant::now();
    let late = t0 + RENEW * 4;
    let gave_way = |lease: &LeaseSpec| {
        let mut a = Holding::new("a", RENEW);
        a.wrote(t0);
        assert_eq!(
            a.next(
                &Seen {
                    heard_other: true,
                    ..Seen::ready(Some(&held_by("a")))
                },
                late
            ),
            Action::Withdraw
        );
        a.withdrew();
        a.next(
            &Seen {
                heard_other: true,
                ..Seen::ready(Some(lease))
            },
            late + ms(50),
        )
    };
    assert_eq!(gave_way(&held_by("")), Action::Take, "given up");
    assert_eq!(
        gave_way(&held_by("b")),
        BROADCAST,
        "b holds it: a watches b"
    );
}

#[test]
fn a_lease_still_ours_after_a_restart_is_answered_for_again() {
    let mut a = Holding::new("a", RENEW);
    assert_eq!(
        a.next(&Seen::ready(Some(&held_by("a"))), Instant::now()),
        Action::Renew
    );
    assert!(a.held);
}
