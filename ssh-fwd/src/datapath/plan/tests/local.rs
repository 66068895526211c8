//! The plan of a change against the whole reload's: random sequences of
//! changes over a small universe (few backends, so frontends share them and
//! groups split and merge), and changes at full capacity, where the order
//! of REVERSE deletes depends on the entries outside the part planned. The
//! steps must be the same writes, and the tables the same after them.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4},
};

use proptest::prelude::*;
use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::super::{Installed, plan_local, plan_steps};
use crate::mapping::{Mapping, MappingSet};

/// The tables' default capacity (`--max-mappings`).
const CAP: usize = MAX_MAPPINGS as usize;

/// Frontend `f` (two IPv4 SSH IPs and, from 16 on, an IPv6 one), backend
/// `b` (of the frontend's family), name `n` of a small universe.
fn mapping(f: u16, b: u8, n: u8) -> Mapping {
    let (frontend, backend): (SocketAddr, SocketAddr) = if f >= 16 {
        let ssh_ip = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let pod = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1 + u16::from(b));
        ((ssh_ip, 8000 + f).into(), (pod, 22).into())
    } else {
        let ssh_ip = Ipv4Addr::new(198, 18, 0, 10 + (f % 2) as u8);
        let pod = Ipv4Addr::new(10, 244, 0, 1 + b);
        ((ssh_ip, 8000 + f / 2).into(), (pod, 22).into())
    };
    Mapping {
        guard: Default::default(),
        name: format!("jobs/s{n}").into(),
        frontend,
        backend,
    }
}

/// A desired set: frontend -> (backend, name).
type Wanted = BTreeMap<u16, (u8, u8)>;

fn wanted() -> impl Strategy<Value = Wanted> {
    prop::collection::btree_map(0..24u16, (0..6u8, 0..3u8), 0..20)
}

fn set(w: &Wanted) -> MappingSet {
    MappingSet::from_unique(w.iter().map(|(f, (b, n))| mapping(*f, *b, *n)))
}

/// Frontends whose mapping differs, and a few that do not (an over-wide
/// touched set must plan the same).
fn touched(before: &MappingSet, after: &MappingSet, extra: &[u16]) -> BTreeSet<SocketAddr> {
    let mut out: BTreeSet<SocketAddr> = before
        .iter()
        .chain(after.iter())
        .filter(|m| before.get(&m.frontend) != after.get(&m.frontend))
        .map(|m| m.frontend)
        .collect();
    out.extend(extra.iter().map(|f| mapping(*f, 0, 0).frontend));
    out
}

/// Plans `before -> after` both ways from `tables`; checks they agree and
/// returns the tables after the change.
fn check_change(
    tables: &Installed,
    after: &MappingSet,
    touched: &BTreeSet<SocketAddr>,
) -> Installed {
    let whole = plan_steps(tables, after, CAP);
    let local = plan_local(tables, after, touched, CAP).expect("fits");
    assert_eq!(
        local.steps, whole.steps,
        "the same writes in the same order"
    );
    let mut committed = tables.clone();
    local.commit(&mut committed);
    assert_eq!(committed, whole.tables, "the same tables after the change");
    committed
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn a_change_planned_where_it_happens_equals_the_whole_reload(
        first in wanted(),
        changes in prop::collection::vec((wanted(), prop::collection::vec(0..24u16, 0..3)), 1..6),
    ) {
        let mut desired = set(&first);
        let mut tables = plan_steps(&Installed::default(), &desired, CAP).tables;
        for (next, extra) in changes {
            let next = set(&next);
            let touched = touched(&desired, &next, &extra);
            tables = check_change(&tables, &next, &touched);
            desired = next;
        }
    }

    #[test]
    fn small_edits_planned_where_they_happen_equal_the_whole_reload(
        first in wanted(),
        edits in prop::collection::vec((0..24u16, prop::option::of((0..6u8, 0..3u8))), 1..12),
    ) {
        // One frontend at a time, as watch events come: each plan starts
        // from the tables the previous one left.
        let mut current = first;
        let mut tables = plan_steps(&Installed::default(), &set(&current), CAP).tables;
        for (frontend, to) in edits {
            let before = set(&current);
            match to {
                Some(target) => current.insert(frontend, target),
                None => current.remove(&frontend),
            };
            let after = set(&current);
            tables = check_change(&tables, &after, &touched(&before, &after, &[]));
        }
    }
}

/// Mapping `i` of a full node: its own backend, generation `g`.
fn nth(i: usize, g: u8) -> Mapping {
    let port = 8000 + u16::try_from(i % 20_000).expect("port");
    Mapping {
        guard: Default::default(),
        name: format!("m{i}").into(),
        frontend: SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 10 + (i / 20_000) as u8), port)
            .into(),
        backend: SocketAddrV4::new(
            Ipv4Addr::new(10, 200 + g, (i / 250) as u8, (i % 250 + 1) as u8),
            22,
        )
        .into(),
    }
}

#[test]
fn at_capacity_changes_planned_where_they_happen_equal_the_whole_reload() {
    let max = MAX_MAPPINGS as usize;
    let full = MappingSet::from_unique((0..max).map(|i| nth(i, 0)));
    let tables = plan_steps(&Installed::default(), &full, CAP).tables;
    // Backends moved (new REVERSE entries before the old go: at capacity
    // some old ones must go first), frontends replaced by others, and two
    // frontends made to share one backend.
    let mut next: Vec<Mapping> = (0..max)
        .filter(|i| !(100..103).contains(i))
        .map(|i| nth(i, u8::from(i % 1000 == 7)))
        .chain((max..max + 3).map(|i| nth(i, 0)))
        .collect();
    next[0].backend = next[1].backend;
    let next = MappingSet::from_unique(next);
    let touched = touched(&full, &next, &[]);
    assert!(touched.len() > 20, "{}", touched.len());
    check_change(&tables, &next, &touched);
}

#[test]
fn a_desired_set_over_capacity_is_left_to_the_whole_reload() {
    let over = MappingSet::from_unique((0..=MAX_MAPPINGS as usize).map(|i| nth(i, 0)));
    let touched = [nth(0, 0).frontend].into();
    assert!(plan_local(&Installed::default(), &over, &touched, CAP).is_none());
}
