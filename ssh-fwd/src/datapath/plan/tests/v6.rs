//! IPv6 mappings in the plan: written to their own tables with the same
//! order as IPv4 ones, in one slot space shared with IPv4.

use super::*;

fn both() -> MappingSet {
    MappingSet::from_unique([
        m("v4", "198.18.0.10:8022", "10.244.1.5:22"),
        m("v6", "[2001:db8::10]:8022", "[fd00:10:244::5]:22"),
    ])
}

#[test]
fn an_ipv6_mapping_is_written_as_an_ipv4_one_in_the_slot_space_they_share() {
    let p = plan(&Installed::default(), &both());
    let slots: BTreeSet<u32> = p.new_slots.iter().map(|(s, _)| *s).collect();
    assert_eq!(slots.len(), 2, "one slot each, from one space");
    let v6 = ep("[2001:db8::10]:8022");
    let (_, target) = p.frontend_upserts.iter().find(|(f, _)| *f == v6).unwrap();
    assert_eq!(target.endpoint, ep("[fd00:10:244::5]:22"));
    assert!(slots.contains(&target.slot));
    // Its backend's REVERSE6 entry leads back to it.
    let (_, back) = (p.reverse_upserts.iter())
        .find(|(b, _)| *b == ep("[fd00:10:244::5]:22"))
        .unwrap();
    assert_eq!((back.endpoint, back.slot), (v6, target.slot));
    let t = converge(&Installed::default(), &both());
    assert_eq!(t.frontends.len(), 2);
    assert_eq!(&*t.names[&target.slot], "v6");
}

#[test]
fn an_ipv6_backend_behind_two_frontends_is_shared_with_the_lowest_primary() {
    let desired = MappingSet::from_unique([
        m("a", "[2001:db8::10]:8023", "[fd00::5]:22"),
        m("b", "[2001:db8::10]:8022", "[fd00::5]:22"),
    ]);
    let t = converge(&Installed::default(), &desired);
    let r = t.reverse[&ep("[fd00::5]:22")];
    assert_eq!(r.endpoint, ep("[2001:db8::10]:8022"));
    assert_eq!(r.flags, FLAG_SHARED_BACKEND);
    assert!(
        t.frontends
            .values()
            .all(|f| f.flags & FLAG_SHARED_BACKEND != 0)
    );
}

#[test]
fn a_moved_ipv6_backend_keeps_its_slot_retires_its_frontend_and_goes_after_it() {
    let installed = converge(&Installed::default(), &both());
    let slot = installed.frontends[&ep("[2001:db8::10]:8022")].slot;
    let moved = MappingSet::from_unique([
        m("v4", "198.18.0.10:8022", "10.244.1.5:22"),
        m("v6", "[2001:db8::10]:8022", "[fd00:10:244::9]:22"),
    ]);
    let p = plan(&installed, &moved);
    assert_eq!(p.retired, vec![ep("[2001:db8::10]:8022")]);
    assert_eq!(p.frontend_upserts.len(), 1);
    assert_eq!(p.frontend_upserts[0].1.slot, slot);
    assert_eq!(p.reverse_upserts[0].0, ep("[fd00:10:244::9]:22"));
    assert_eq!(p.reverse_deletes, vec![ep("[fd00:10:244::5]:22")]);
    assert!(p.new_slots.is_empty());
}

#[test]
fn an_ipv6_list_is_written_before_its_frontend_is_flagged_and_removed_after() {
    let listed = MappingSet::from_unique([guarded(
        "v6",
        "[2001:db8::10]:8022",
        "[fd00::5]:22",
        &["2001:db8:1::/48"],
    )]);
    // `apply` checks every flagged frontend against the ranges written.
    let installed = converge(&Installed::default(), &listed);
    let slot = installed.frontends[&ep("[2001:db8::10]:8022")].slot;
    assert_eq!(
        installed.allow,
        [(slot, "2001:db8:1::/48".parse().unwrap())].into()
    );
    let open = MappingSet::from_unique([m("v6", "[2001:db8::10]:8022", "[fd00::5]:22")]);
    let p = plan(&installed, &open);
    assert_eq!(p.frontend_upserts[0].1.flags & FLAG_ALLOWLIST, 0);
    assert_eq!(
        p.allow_deletes,
        vec![(slot, "2001:db8:1::/48".parse().unwrap())]
    );
    assert!(converge(&installed, &open).allow.is_empty());
}

#[test]
fn a_slot_an_ipv6_mapping_frees_is_reused_by_an_ipv4_one_at_capacity() {
    let v6 = MappingSet::from_unique([m("v6", "[2001:db8::10]:8022", "[fd00::5]:22")]);
    let planned = plan_steps(&Installed::default(), &v6, 1);
    let installed = planned.tables;
    assert_eq!(installed.frontends[&ep("[2001:db8::10]:8022")].slot, 0);
    let v4 = MappingSet::from_unique([m("v4", "198.18.0.10:8022", "10.244.1.5:22")]);
    let planned = plan_steps(&installed, &v4, 1);
    assert!(planned.left_out.is_empty(), "one mapping fits one slot");
    let [shrink, grow] = &planned.steps[..] else {
        panic!("two steps");
    };
    // The IPv6 mapping goes in the first step, before the slot is zeroed
    // and named for the IPv4 one in the second.
    assert_eq!(shrink.frontend_deletes, vec![ep("[2001:db8::10]:8022")]);
    assert_eq!(shrink.reverse_deletes, vec![ep("[fd00::5]:22")]);
    assert_eq!(grow.new_slots, vec![(0, "v4".into())]);
    assert_eq!(planned.tables.frontends[&ep("198.18.0.10:8022")].slot, 0);
    assert!(
        grow.retired.is_empty() && shrink.retired == vec![ep("[2001:db8::10]:8022")],
        "the slot is reused: the IPv6 connections are purged after the first step"
    );
}
