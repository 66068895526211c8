use ssh_fwd_common::maps::FLAG_SHARED_BACKEND;

use super::*;
use crate::mapping::Mapping;

/// The tables' default capacity (`--max-mappings`).
const CAP: usize = ssh_fwd_common::maps::MAX_MAPPINGS as usize;

fn m(name: &str, frontend: &str, backend: &str) -> Mapping {
    Mapping {
        guard: Default::default(),
        name: name.into(),
        frontend: frontend.parse().unwrap(),
        backend: backend.parse().unwrap(),
    }
}

fn ep(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Applies a plan to an in-memory copy of the maps, as the dataplane would.
fn apply(installed: &Installed, plan: &Plan) -> Installed {
    let mut out = installed.clone();
    for k in &plan.frontend_deletes_first {
        out.frontends.remove(k);
    }
    for k in &plan.reverse_deletes_first {
        out.reverse.remove(k);
    }
    for (slot, name) in plan.new_slots.iter().chain(&plan.renamed) {
        // As MAPPING_NAMES holds it.
        let stored = ssh_fwd_common::maps::MappingName::new(name);
        out.names.insert(*slot, stored.as_str().into());
    }
    out.reverse.extend(plan.reverse_upserts.iter().copied());
    out.allow.extend(plan.allow_upserts.iter().copied());
    out.rates.extend(plan.rate_upserts.iter().copied());
    for (f, t) in &plan.frontend_upserts {
        // A frontend made live or changed reads its list as it is now.
        if t.flags & FLAG_ALLOWLIST != 0 {
            assert_eq!(
                installed_guard(&out, t).ranges(),
                installed_guard(&plan_target(plan, f), t).ranges(),
                "{f:?} flagged before its ranges are written"
            );
        }
        out.frontends.insert(*f, *t);
    }
    for k in &plan.frontend_deletes {
        out.frontends.remove(k);
    }
    for k in &plan.reverse_deletes {
        out.reverse.remove(k);
    }
    for k in &plan.allow_deletes {
        out.allow.remove(k);
    }
    out.rates
        .retain(|s, _| out.frontends.values().any(|t| t.slot == *s));
    let used: BTreeSet<u32> = out.frontends.values().map(|t| t.slot).collect();
    out.names.retain(|s, _| used.contains(s));
    out
}

/// The ranges `plan` writes, as tables (the upserts only).
fn plan_target(plan: &Plan, _frontend: &SocketAddr) -> Installed {
    Installed {
        allow: plan.allow_upserts.iter().copied().collect(),
        ..Installed::default()
    }
}

fn converge(installed: &Installed, desired: &MappingSet) -> Installed {
    let mut after = installed.clone();
    for step in plan_steps(installed, desired, CAP).steps {
        after = apply(&after, &step);
    }
    assert!(
        plan(&after, desired).is_empty(),
        "plan must reach a fixed point"
    );
    after
}

#[test]
fn first_plan_installs_every_mapping_with_distinct_slots() {
    let desired = MappingSet::from_unique([
        m("a", "198.18.0.10:8022", "10.244.1.5:22"),
        m("b", "198.18.0.10:8023", "10.244.1.6:22"),
    ]);
    let p = plan(&Installed::default(), &desired);
    assert_eq!(p.new_slots, vec![(0, "a".into()), (1, "b".into())]);
    assert_eq!(p.frontend_upserts.len(), 2);
    assert_eq!(p.reverse_upserts.len(), 2);
    assert!(p.frontend_deletes.is_empty() && p.reverse_deletes.is_empty());
    let t = p.frontend_upserts[0].1;
    assert_eq!(t.endpoint, ep("10.244.1.5:22"));
    assert_eq!(t.flags, 0);
}

#[test]
fn unchanged_mappings_are_never_rewritten_or_removed() {
    let one = m("a", "198.18.0.10:8022", "10.244.1.5:22");
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([one.clone()]),
    );
    let desired = MappingSet::from_unique([one, m("b", "198.18.0.10:8023", "10.244.1.6:22")]);
    let p = plan(&installed, &desired);
    assert_eq!(
        p.frontend_upserts.iter().map(|u| u.0).collect::<Vec<_>>(),
        vec![ep("198.18.0.10:8023")]
    );
    assert!(p.frontend_deletes.is_empty());
    assert!(!p.reverse_upserts.iter().any(|u| u.0 == ep("10.244.1.5:22")));
}

#[test]
fn removed_mapping_deletes_frontend_and_reverse_and_frees_slot_later() {
    let a = m("a", "198.18.0.10:8022", "10.244.1.5:22");
    let b = m("b", "198.18.0.10:8023", "10.244.1.6:22");
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([a.clone(), b]),
    );
    let p = plan(&installed, &MappingSet::from_unique([a.clone()]));
    assert_eq!(p.frontend_deletes, vec![ep("198.18.0.10:8023")]);
    assert_eq!(p.reverse_deletes, vec![ep("10.244.1.6:22")]);
    // A mapping added in the same plan does not reuse the slot being freed.
    let c = m("c", "198.18.0.10:8024", "10.244.1.7:22");
    let p = plan(&installed, &MappingSet::from_unique([a, c]));
    assert_eq!(p.new_slots, vec![(2, "c".into())]);
}

#[test]
fn moved_backend_keeps_slot_and_replaces_reverse_entry() {
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.1.5:22")]),
    );
    let p = plan(
        &installed,
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.2.9:22")]),
    );
    assert!(p.new_slots.is_empty());
    assert_eq!(p.frontend_upserts[0].1.endpoint, ep("10.244.2.9:22"));
    assert_eq!(p.frontend_upserts[0].1.slot, 0);
    assert_eq!(p.reverse_deletes, vec![ep("10.244.1.5:22")]);
    assert!(
        p.frontend_deletes.is_empty(),
        "the frontend is updated in place, never removed"
    );
}

#[test]
fn backend_behind_two_frontends_is_flagged_shared_with_lowest_primary() {
    let desired = MappingSet::from_unique([
        m("b", "198.18.0.10:9000", "10.244.1.5:22"),
        m("a", "198.18.0.10:8022", "10.244.1.5:22"),
    ]);
    let t = converge(&Installed::default(), &desired);
    for f in t.frontends.values() {
        assert_eq!(f.flags, FLAG_SHARED_BACKEND);
    }
    let r = t.reverse[&ep("10.244.1.5:22")];
    assert_eq!(r.flags, FLAG_SHARED_BACKEND);
    assert_eq!(r.endpoint, ep("198.18.0.10:8022"));
}

#[test]
fn becoming_shared_keeps_the_installed_primary_for_open_sessions() {
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([m("late", "198.18.0.10:9000", "10.244.1.5:22")]),
    );
    let t = converge(
        &installed,
        &MappingSet::from_unique([
            m("late", "198.18.0.10:9000", "10.244.1.5:22"),
            m("early", "198.18.0.10:8000", "10.244.1.5:22"),
        ]),
    );
    assert_eq!(
        t.reverse[&ep("10.244.1.5:22")].endpoint,
        ep("198.18.0.10:9000")
    );
}

#[test]
fn no_longer_shared_clears_the_flag() {
    let both = MappingSet::from_unique([
        m("a", "198.18.0.10:8022", "10.244.1.5:22"),
        m("b", "198.18.0.10:8023", "10.244.1.5:22"),
    ]);
    let installed = converge(&Installed::default(), &both);
    let t = converge(
        &installed,
        &MappingSet::from_unique([m("b", "198.18.0.10:8023", "10.244.1.5:22")]),
    );
    assert_eq!(t.frontends[&ep("198.18.0.10:8023")].flags, 0);
    assert_eq!(t.reverse[&ep("10.244.1.5:22")].flags, 0);
    assert_eq!(
        t.reverse[&ep("10.244.1.5:22")].endpoint,
        ep("198.18.0.10:8023")
    );
}

#[test]
fn rename_only_touches_the_name() {
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.1.5:22")]),
    );
    let p = plan(
        &installed,
        &MappingSet::from_unique([m("renamed", "198.18.0.10:8022", "10.244.1.5:22")]),
    );
    assert_eq!(p.renamed, vec![(0, "renamed".into())]);
    assert!(p.frontend_upserts.is_empty() && p.reverse_upserts.is_empty());
}

#[test]
fn empty_desired_set_removes_everything() {
    let installed = converge(
        &Installed::default(),
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.1.5:22")]),
    );
    let t = converge(&installed, &MappingSet::default());
    assert!(t.frontends.is_empty() && t.reverse.is_empty());
}

#[test]
fn drifted_entry_is_restored() {
    let desired = MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.1.5:22")]);
    let mut installed = converge(&Installed::default(), &desired);
    installed.frontends.clear(); // someone ran `bpftool map delete`
    let p = plan(&installed, &desired);
    assert_eq!(p.frontend_upserts.len(), 1);
}

#[test]
fn frontends_that_go_away_or_move_retire_their_connections() {
    let shared = MappingSet::from_unique([
        m("a", "198.18.0.10:8022", "10.244.1.5:22"),
        m("b", "198.18.0.10:8023", "10.244.1.5:22"),
        m("c", "198.18.0.10:8024", "10.244.1.6:22"),
    ]);
    let installed = converge(&Installed::default(), &shared);
    // b and c removed, a stays: b and c retire.
    let p = plan(
        &installed,
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.1.5:22")]),
    );
    assert_eq!(
        p.retired,
        vec![ep("198.18.0.10:8023"), ep("198.18.0.10:8024")]
    );
    // a moves to another pod: a retires too.
    let p = plan(
        &installed,
        &MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.244.2.5:22")]),
    );
    assert_eq!(
        p.retired,
        vec![
            ep("198.18.0.10:8022"),
            ep("198.18.0.10:8023"),
            ep("198.18.0.10:8024")
        ]
    );
    // Adding an unrelated mapping retires nothing.
    let mut more: Vec<Mapping> = shared.iter().cloned().collect();
    more.push(m("d", "198.18.0.10:8025", "10.244.1.7:22"));
    assert!(
        plan(&installed, &MappingSet::from_unique(more))
            .retired
            .is_empty()
    );
}

#[test]
fn a_name_longer_than_the_map_holds_is_cut_once_and_not_rewritten_at_every_resync() {
    // 126 bytes, then a two-byte character across the 127-byte limit.
    let long = format!("{}é{}", "a".repeat(126), "b".repeat(80));
    let desired = MappingSet::from_unique([m(&long, "198.18.0.10:8022", "10.244.1.5:22")]);
    let after = converge(&Installed::default(), &desired);
    assert_eq!(
        after.names.values().map(|n| &**n).collect::<Vec<_>>(),
        ["a".repeat(126)]
    );
    let again = plan(&after, &desired);
    assert!(again.is_empty(), "rewritten at every resync: {again:?}");
}

fn guarded(name: &str, frontend: &str, backend: &str, ranges: &[&str]) -> Mapping {
    let mut m = m(name, frontend, backend);
    m.guard.allow = Allow::Only(ranges.iter().map(|r| r.parse().unwrap()).collect());
    m
}

#[test]
fn a_new_mapping_with_a_list_is_flagged_and_its_ranges_written_in_the_same_step() {
    let desired = MappingSet::from_unique([guarded(
        "a",
        "198.18.0.10:8022",
        "10.0.0.5:22",
        &["192.0.2.0/24", "10.0.0.0/8"],
    )]);
    let p = plan(&Installed::default(), &desired);
    assert_eq!(p.allow_upserts.len(), 2);
    let (_, t) = p.frontend_upserts[0];
    assert_eq!(t.flags & FLAG_ALLOWLIST, FLAG_ALLOWLIST);
    let after = converge(&Installed::default(), &desired);
    assert_eq!(after.allow.len(), 2);
}

#[test]
fn a_changed_list_adds_before_the_frontend_and_removes_after() {
    let before = MappingSet::from_unique([guarded(
        "a",
        "198.18.0.10:8022",
        "10.0.0.5:22",
        &["192.0.2.0/24"],
    )]);
    let installed = converge(&Installed::default(), &before);
    let after = MappingSet::from_unique([guarded(
        "a",
        "198.18.0.10:8022",
        "10.0.0.5:22",
        &["198.51.100.0/24"],
    )]);
    let p = plan(&installed, &after);
    assert_eq!(p.allow_upserts.len(), 1);
    assert_eq!(p.allow_deletes.len(), 1);
    assert!(p.frontend_upserts.is_empty(), "the flag stays: never open");
    let tables = converge(&installed, &after);
    let slot = tables.frontends[&ep("198.18.0.10:8022")].slot;
    assert_eq!(
        tables.allow.iter().collect::<Vec<_>>(),
        [&(slot, "198.51.100.0/24".parse().unwrap())]
    );
}

#[test]
fn a_list_removed_unflags_the_frontend_before_its_ranges_go() {
    let before = MappingSet::from_unique([guarded(
        "a",
        "198.18.0.10:8022",
        "10.0.0.5:22",
        &["192.0.2.0/24"],
    )]);
    let installed = converge(&Installed::default(), &before);
    let open = MappingSet::from_unique([m("a", "198.18.0.10:8022", "10.0.0.5:22")]);
    let p = plan(&installed, &open);
    let (_, t) = p.frontend_upserts[0];
    assert_eq!(t.flags & FLAG_ALLOWLIST, 0);
    assert_eq!(p.allow_deletes.len(), 1, "deleted after the frontend");
    assert!(converge(&installed, &open).allow.is_empty());
}

#[test]
fn a_removed_mappings_ranges_go_with_it_and_a_reused_slot_starts_clean() {
    let one = MappingSet::from_unique([guarded(
        "a",
        "198.18.0.10:8022",
        "10.0.0.5:22",
        &["192.0.2.0/24"],
    )]);
    let installed = converge(&Installed::default(), &one);
    let other = MappingSet::from_unique([guarded(
        "b",
        "198.18.0.10:8023",
        "10.0.0.6:22",
        &["198.51.100.0/24"],
    )]);
    let tables = converge(&installed, &other);
    let slot = tables.frontends[&ep("198.18.0.10:8023")].slot;
    assert!(tables.allow.iter().all(|(s, _)| *s == slot));
    assert_eq!(tables.allow.len(), 1);
}

#[test]
fn a_rate_is_written_with_its_flag_and_read_back_unchanged() {
    let mut limited = m("a", "198.18.0.10:8022", "10.0.0.5:22");
    limited.guard.limit = Limit::Exact(Rate::new(7, 3));
    let desired = MappingSet::from_unique([limited]);
    let p = plan(&Installed::default(), &desired);
    assert_eq!(p.rate_upserts.len(), 1);
    assert_eq!(
        p.frontend_upserts[0].1.flags & FLAG_SYN_LIMIT,
        FLAG_SYN_LIMIT
    );
    converge(&Installed::default(), &desired);
}

mod capacity;
mod local;
mod v6;

#[test]
fn packed_tables_hold_what_they_held() {
    let desired = MappingSet::from_unique((0..500u16).map(|n| {
        let frontend = format!("198.18.0.10:{}", 20000 + n);
        let backend = format!("10.0.{}.{}:22", n / 200, n % 200);
        m(&format!("job-{n}"), &frontend, &backend)
    }));
    let tables = plan_steps(&Installed::default(), &desired, CAP).tables;
    let mut packed = tables.clone();
    packed.pack();
    assert_eq!(packed, tables);
    assert_eq!(packed.frontends.len(), 500);
}

#[test]
fn the_kept_tables_share_a_name_that_fits_instead_of_copying_it() {
    let desired = MappingSet::from_unique([m("ns/job", "198.18.0.10:8022", "10.244.1.5:22")]);
    let planned = plan_steps(&Installed::default(), &desired, CAP);
    let name = &desired.iter().next().unwrap().name;
    assert!(Arc::ptr_eq(&planned.tables.names[&0], name));
}
