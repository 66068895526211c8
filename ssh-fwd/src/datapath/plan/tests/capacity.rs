//! Reloads at and beyond capacity: every write of every step is replayed on
//! a model of the maps that refuses what the kernel refuses (a full hash
//! map) and what a packet must never see (a live frontend without its
//! backend's reverse entry, after any write; a live slot zeroed; an
//! unchanged mapping touched).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4},
};

use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::super::{Installed, Plan, Planned, Target, plan_steps};
use crate::mapping::{Mapping, MappingSet};

const MAX: usize = MAX_MAPPINGS as usize;

/// Mapping number `i`, generation `g` of its backend.
fn nth(i: usize, g: u8) -> Mapping {
    let i16 = u16::try_from(i % 20_000).unwrap();
    let frontend = SocketAddrV4::new(
        Ipv4Addr::new(198, 18, 0, 10 + u8::try_from(i / 20_000).unwrap()),
        8000 + i16,
    );
    let backend = SocketAddrV4::new(
        Ipv4Addr::new(10, 200 + g, (i / 250) as u8, (i % 250 + 1) as u8),
        22,
    );
    Mapping {
        guard: Default::default(),
        name: format!("m{i}").into(),
        frontend: frontend.into(),
        backend: backend.into(),
    }
}

/// As [`nth`], IPv6.
fn nth6(i: usize, g: u8) -> Mapping {
    let i16 = u16::try_from(i % 20_000).unwrap();
    let frontend = (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10),
        8000 + i16,
    );
    let pod = Ipv6Addr::new(0xfd00, 200 + u16::from(g), 0, 0, 0, 0, 0, i as u16 + 1);
    Mapping {
        guard: Default::default(),
        name: format!("v6-{i}").into(),
        frontend: frontend.into(),
        backend: (pod, 22).into(),
    }
}

fn set(it: impl IntoIterator<Item = Mapping>) -> MappingSet {
    MappingSet::from_unique(it)
}

/// The maps as the kernel holds them, with the kernel's refusals.
struct Model {
    t: Installed,
    /// Frontends that must never be deleted or rewritten.
    unchanged: BTreeMap<SocketAddr, Target>,
    /// How many live frontends lead to each backend.
    uses: BTreeMap<SocketAddr, usize>,
}

impl Model {
    /// The slots entries use now.
    fn live_slots(&self) -> BTreeSet<u32> {
        (self.t.frontends.values())
            .chain(self.t.reverse.values())
            .map(|t| t.slot)
            .collect()
    }

    /// No half-made mapping is visible: a REVERSE entry is never removed
    /// while a live frontend leads to it, or that frontend's replies would
    /// leave untranslated, showing the pod's address.
    fn remove_reverse(&mut self, k: &SocketAddr, write: &str) {
        assert!(
            self.uses.get(k).is_none_or(|n| *n == 0),
            "after {write}: a live frontend leads to backend {} without its REVERSE entry",
            k
        );
        self.t.reverse.remove(k);
    }

    /// Writes a frontend, keeping count of the frontends that lead to each
    /// backend.
    fn set_frontend(&mut self, k: SocketAddr, v: Option<Target>) {
        let old = match v {
            Some(v) => {
                *self.uses.entry(v.endpoint).or_default() += 1;
                self.t.frontends.insert(k, v)
            }
            None => self.t.frontends.remove(&k),
        };
        if let Some(old) = old {
            let n = self.uses.entry(old.endpoint).or_default();
            *n = n.saturating_sub(1);
        }
    }

    fn step(&mut self, p: &Plan) {
        for k in &p.frontend_deletes_first {
            self.delete_frontend(k);
        }
        for k in &p.reverse_deletes_first {
            self.remove_reverse(k, "an early REVERSE delete");
        }
        // Writing names and counters changes no entry.
        let live = self.live_slots();
        for (slot, name) in &p.new_slots {
            assert!(
                !live.contains(slot),
                "slot {slot} zeroed while an entry still uses it"
            );
            self.t.names.insert(*slot, name.clone());
        }
        for (slot, name) in &p.renamed {
            self.t.names.insert(*slot, name.clone());
        }
        for (k, v) in &p.reverse_upserts {
            assert!(
                self.t.names.contains_key(&v.slot),
                "reverse to unnamed slot"
            );
            self.t.reverse.insert(*k, *v);
            assert!(self.t.reverse.len() <= MAX, "REVERSE over capacity");
        }
        for (k, v) in &p.frontend_upserts {
            if let Some(old) = self.unchanged.get(k) {
                assert_eq!(
                    old.endpoint, v.endpoint,
                    "an unchanged mapping was rewritten"
                );
                assert_eq!(old.slot, v.slot, "an unchanged mapping changed slot");
            }
            assert!(
                self.t.reverse.contains_key(&v.endpoint),
                "frontend live before its reverse entry"
            );
            self.set_frontend(*k, Some(*v));
            assert!(self.t.frontends.len() <= MAX, "FRONTENDS over capacity");
        }
        for k in &p.frontend_deletes {
            self.delete_frontend(k);
        }
        for k in &p.reverse_deletes {
            self.remove_reverse(k, "a REVERSE delete");
        }
        let used: BTreeSet<u32> = self.t.frontends.values().map(|t| t.slot).collect();
        self.t.names.retain(|s, _| used.contains(s));
    }

    fn delete_frontend(&mut self, k: &SocketAddr) {
        assert!(
            !self.unchanged.contains_key(k),
            "an unchanged mapping was removed"
        );
        self.set_frontend(*k, None);
    }
}

/// Replays the plan for `desired` on `installed`; returns what the maps hold.
fn reload(installed: &Installed, desired: &MappingSet) -> (Installed, Planned) {
    let planned = plan_steps(installed, desired, MAX);
    let unchanged = installed
        .frontends
        .iter()
        .filter(|(f, t)| {
            let want = desired.get(f);
            want.is_some_and(|m| m.backend == t.endpoint)
        })
        .map(|(f, t)| (*f, *t))
        .collect();
    let mut uses = BTreeMap::new();
    for t in installed.frontends.values() {
        *uses.entry(t.endpoint).or_default() += 1;
    }
    let mut model = Model {
        t: installed.clone(),
        unchanged,
        uses,
    };
    for step in &planned.steps {
        model.step(step);
    }
    assert_eq!(model.t.frontends, planned.tables.frontends);
    assert_eq!(model.t.reverse, planned.tables.reverse);
    let again = plan_steps(&model.t, desired, MAX);
    assert!(
        again.steps.iter().all(Plan::is_empty),
        "plan must reach a fixed point"
    );
    (model.t, planned)
}

fn holds(t: &Installed, desired: &MappingSet) {
    assert_eq!(t.frontends.len(), desired.len());
    for m in desired.iter() {
        assert_eq!(t.frontends[&m.frontend].endpoint, m.backend);
    }
}

fn full(g: u8) -> MappingSet {
    set((0..MAX).map(|i| nth(i, g)))
}

#[test]
fn at_capacity_half_the_mappings_move_to_new_backends_in_one_reload() {
    let (installed, _) = reload(&Installed::default(), &full(0));
    let desired = set((0..MAX).map(|i| nth(i, u8::from(i % 2 == 0))));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
}

#[test]
fn both_families_share_one_slot_space_and_together_fill_the_capacity() {
    // Half IPv4, half IPv6: every slot taken once, whatever the family.
    let mixed = |g: u8| set((0..MAX).map(|i| if i % 2 == 0 { nth(i, g) } else { nth6(i, g) }));
    let (installed, _) = reload(&Installed::default(), &mixed(0));
    let slots: BTreeSet<u32> = installed.frontends.values().map(|t| t.slot).collect();
    assert_eq!(slots.len(), MAX, "one slot per mapping, across families");
    assert!(slots.iter().all(|s| (*s as usize) < MAX));
    // At capacity, the IPv6 half moves to new pods and the IPv4 half is
    // replaced by IPv6 mappings: the slots the IPv4 ones free are reused.
    let desired = set((0..MAX).map(|i| nth6(i, u8::from(i % 2 == 1))));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
    // One more of either family does not fit.
    let over = set((0..=MAX).map(|i| if i == MAX { nth(i, 0) } else { nth6(i, 0) }));
    let planned = plan_steps(&after, &over, MAX);
    assert_eq!(planned.left_out.len(), 1);
}

#[test]
fn at_capacity_one_mapping_is_replaced_by_another_frontend() {
    let (installed, _) = reload(&Installed::default(), &full(0));
    let desired = set((1..=MAX).map(|i| nth(i, 0)));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
}

#[test]
fn at_capacity_every_mapping_is_replaced_in_one_reload() {
    let (installed, _) = reload(&Installed::default(), &full(0));
    let desired = set((MAX..2 * MAX).map(|i| nth(i, 1)));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
}

#[test]
fn replacing_8193_mappings_reuses_the_slots_being_freed() {
    let (installed, _) = reload(&Installed::default(), &full(0));
    let desired = set((8193..MAX + 8193).map(|i| nth(i, 0)));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
}

#[test]
fn at_capacity_a_shared_backend_moves_and_frontends_are_replaced_together() {
    // 100 frontends share one backend; the rest have their own.
    let shared = |i: usize, g: u8| {
        let mut m = nth(i, g);
        if i < 100 {
            m.backend = SocketAddrV4::new(Ipv4Addr::new(10, 99, g, 1), 22).into();
        }
        m
    };
    let (installed, _) = reload(&Installed::default(), &set((0..MAX).map(|i| shared(i, 0))));
    let desired = set((50..MAX + 50).map(|i| shared(i, u8::from(i % 3 == 0))));
    let (after, _) = reload(&installed, &desired);
    holds(&after, &desired);
}

#[test]
fn over_capacity_a_stale_mapping_is_still_removed_and_the_excess_is_named() {
    let stale = nth(3 * MAX, 0);
    let (installed, _) = reload(&Installed::default(), &set([stale.clone(), nth(0, 0)]));
    let desired = set((0..MAX + 3).map(|i| nth(i, 0)));
    let (after, planned) = reload(&installed, &desired);
    assert!(
        !after.frontends.contains_key(&stale.frontend),
        "the stale mapping must go even though the desired set is too big"
    );
    assert_eq!(after.frontends.len(), MAX);
    let left: Vec<_> = planned.left_out.iter().map(|m| m.frontend).collect();
    assert_eq!(
        left,
        vec![
            nth(MAX, 0).frontend,
            nth(MAX + 1, 0).frontend,
            nth(MAX + 2, 0).frontend
        ]
    );
}

#[test]
fn after_a_failed_write_only_mappings_whose_backend_changed_are_removed() {
    let (installed, _) = reload(&Installed::default(), &set([nth(0, 0), nth(1, 0)]));
    let desired = set([nth(0, 0), nth(1, 1), nth(2, 0)]);
    let p = super::super::stale_removal(&installed, &desired, MAX);
    assert_eq!(p.frontend_deletes, vec![nth(1, 0).frontend]);
    assert_eq!(p.reverse_deletes, vec![nth(1, 0).backend]);
    assert!(p.frontend_upserts.is_empty() && p.new_slots.is_empty());
    assert_eq!(p.retired, vec![nth(1, 0).frontend]);
}
