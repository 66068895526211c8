//! A change planned where it happens: the frontends that changed, and every
//! frontend sharing a backend with them (a backend's REVERSE entry and the
//! shared flag depend on all its frontends), planned with the very steps of
//! a whole reload ([`two_steps`]), beside the rest of the tables, whose
//! slots it does not take and whose REVERSE entries count against the
//! capacity. The rest cannot change: its mappings are the same, and so are
//! the groups of frontends behind each of its backends. So the plan is the
//! whole reload's plan, found at the cost of the change rather than of the
//! tables; a property test holds the two equal (`plan/tests/local.rs`).

use std::{collections::BTreeSet, net::SocketAddr};

use super::{Installed, Outside, Plan, two_steps};
use crate::mapping::MappingSet;

/// The plan of a change, and the part of the tables it rewrites.
#[derive(Debug)]
pub struct Local {
    /// As [`super::Planned::steps`].
    pub steps: Vec<Plan>,
    /// The part planned, as it was: its frontends and backends.
    frontends: Vec<SocketAddr>,
    backends: Vec<SocketAddr>,
    /// The part once the steps are applied.
    part: Installed,
}

/// Plans the change from `tables` (what the maps hold: the tables of the
/// previous desired set, which fitted) to `desired`, where only the
/// frontends in `touched` may differ. `None` when `desired` does not fit
/// the maps: the capacity cut is a whole reload's.
pub fn plan_local(
    tables: &Installed,
    desired: &MappingSet,
    touched: &BTreeSet<SocketAddr>,
    capacity: usize,
) -> Option<Local> {
    if desired.len() > capacity {
        return None;
    }
    // The backends the touched frontends leave or join.
    let backends: BTreeSet<SocketAddr> = touched
        .iter()
        .flat_map(|f| {
            let was = tables.frontends.get(f).map(|t| t.endpoint);
            let will = desired.get(f).map(|m| m.backend);
            was.into_iter().chain(will)
        })
        .collect();
    let mut part = Installed::default();
    let mut outside = Outside::empty(capacity);
    for (f, t) in &tables.frontends {
        if touched.contains(f) || backends.contains(&t.endpoint) {
            part.frontends.insert(*f, *t);
        } else {
            outside.slots.insert(t.slot);
        }
    }
    for (b, t) in &tables.reverse {
        if backends.contains(b) {
            part.reverse.insert(*b, *t);
        } else {
            outside.slots.insert(t.slot);
            outside.reverse += 1;
        }
    }
    for t in part.frontends.values().chain(part.reverse.values()) {
        if let Some(name) = tables.names.get(&t.slot) {
            part.names.insert(t.slot, name.clone());
        }
    }
    let slots: BTreeSet<u32> = part.names.keys().copied().collect();
    part.allow = (tables.allow.iter())
        .filter(|(slot, _)| slots.contains(slot))
        .copied()
        .collect();
    part.rates = (tables.rates.iter())
        .filter(|(slot, _)| slots.contains(slot))
        .map(|(slot, rate)| (*slot, *rate))
        .collect();
    // Frontends the change leaves alone keep their mapping: those of the
    // part are its installed ones that are not touched.
    let wanted = touched.iter().chain(part.frontends.keys());
    let part_desired = MappingSet::from_unique(wanted.filter_map(|f| desired.get(f)).cloned());
    let (steps, after) = two_steps(&part, &part_desired, &outside);
    Some(Local {
        steps,
        frontends: part.frontends.into_keys().collect(),
        backends: part.reverse.into_keys().collect(),
        part: after,
    })
}

impl Local {
    /// The tables once the steps are applied: the part replaced.
    /// The frontends the part planned holds, before or after: those whose
    /// entries the steps may write or remove.
    pub fn frontends(&self) -> BTreeSet<SocketAddr> {
        let after = self.part.frontends.keys();
        self.frontends.iter().chain(after).copied().collect()
    }

    pub fn commit(self, tables: &mut Installed) {
        let mut slots = BTreeSet::new();
        for f in &self.frontends {
            if let Some(t) = tables.frontends.remove(f) {
                slots.insert(t.slot);
            }
        }
        for b in &self.backends {
            if let Some(t) = tables.reverse.remove(b) {
                slots.insert(t.slot);
            }
        }
        for slot in &slots {
            tables.names.remove(slot);
            tables.rates.remove(slot);
        }
        tables.allow.retain(|(slot, _)| !slots.contains(slot));
        tables.frontends.extend(self.part.frontends);
        tables.reverse.extend(self.part.reverse);
        tables.names.extend(self.part.names);
        tables.allow.extend(self.part.allow);
        tables.rates.extend(self.part.rates);
    }
}
