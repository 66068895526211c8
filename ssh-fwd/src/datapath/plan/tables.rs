//! The tables the maps should hold for a desired set.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use ssh_fwd_common::maps::{
    FLAG_ALLOWLIST, FLAG_ALLOWLIST_ALL, FLAG_DRAINING, FLAG_SHARED_BACKEND, FLAG_SYN_LIMIT,
    MappingName,
};

use super::{Installed, SlotSet, Target};
use crate::mapping::{Guard, MappingSet};

/// The tables the maps should hold for `desired`, reusing slots and primary
/// frontends from `installed` wherever they still apply, for a part of the
/// tables beside entries that use the slots `beside` (which are never
/// taken). New frontends take slots below `capacity` that no installed
/// entry uses, `late_slots` last; a mapping for which no slot is left is
/// not placed (the planner fits `desired` first, so none is).
pub(super) fn tables_beside(
    installed: &Installed,
    desired: &MappingSet,
    late_slots: &BTreeSet<u32>,
    beside: &SlotSet,
    capacity: usize,
) -> Installed {
    // A slot being freed in this same step is never zeroed while its old
    // entry is still live: only slots no installed entry uses are free.
    let taken: BTreeSet<u32> = installed
        .frontends
        .values()
        .chain(installed.reverse.values())
        .map(|t| t.slot)
        .collect();
    let is_free = |s: &u32| !taken.contains(s) && !beside.contains(*s);
    let slots = u32::try_from(capacity).unwrap_or(u32::MAX);
    let mut free = (0..slots)
        .filter(|s| is_free(s) && !late_slots.contains(s))
        .chain(late_slots.iter().copied().filter(is_free));
    let mut backends: BTreeMap<_, Vec<_>> = BTreeMap::new();
    let mut out = Installed::default();
    for m in desired.iter() {
        let (frontend, backend) = (m.frontend, m.backend);
        // A frontend that stays keeps its slot, so its counters carry on.
        let Some(slot) = installed
            .frontends
            .get(&frontend)
            .map(|t| t.slot)
            .or_else(|| free.next())
        else {
            continue;
        };
        backends.entry(backend).or_default().push((frontend, slot));
        out.names.insert(slot, stored_name(&m.name));
        out.frontends.insert(
            frontend,
            Target {
                endpoint: backend,
                slot,
                flags: guard_flags(&m.guard),
            },
        );
        if let Some(ranges) = m.guard.ranges() {
            out.allow.extend(ranges.iter().map(|r| (slot, *r)));
        }
        if let Some(rate) = m.guard.rate() {
            out.rates.insert(slot, rate);
        }
    }
    for (backend, frontends) in backends {
        let shared = frontends.len() > 1;
        let flags = if shared { FLAG_SHARED_BACKEND } else { 0 };
        // Keep the installed primary if it still applies: connections opened
        // before the backend became shared have no per-connection entry and
        // rely on it.
        let installed_primary = installed.reverse.get(&backend).map(|t| t.endpoint);
        // Every group holds the mapping that created it, so there is a primary.
        let Some(&(primary, slot)) = frontends
            .iter()
            .find(|(f, _)| Some(*f) == installed_primary)
            // Lowest as a person reads it (IP, then port).
            .or_else(|| frontends.iter().min_by_key(|(f, _)| *f))
        else {
            continue;
        };
        out.reverse.insert(
            backend,
            Target {
                endpoint: primary,
                slot,
                flags,
            },
        );
        for (frontend, _) in frontends {
            if let Some(t) = out.frontends.get_mut(&frontend) {
                t.flags |= flags;
            }
        }
    }
    out
}

/// A name as MAPPING_NAMES holds it: cut to its length on a character
/// boundary ([`MappingName::new`], which writes it). The tables hold it so,
/// or a long name would differ from what is read back and be rewritten at
/// every reload.
fn stored_name(name: &Arc<str>) -> Arc<str> {
    let stored = MappingName::new(name);
    if stored.as_str() == &**name {
        Arc::clone(name)
    } else {
        stored.as_str().into()
    }
}

/// The `FLAG_*` bits of a frontend entry that say which parts of its guard
/// the kernel checks.
fn guard_flags(guard: &Guard) -> u32 {
    let mut flags = 0;
    if guard.ranges().is_some() {
        flags |= FLAG_ALLOWLIST;
        if guard.enforce_established {
            flags |= FLAG_ALLOWLIST_ALL;
        }
    }
    if guard.rate().is_some() {
        flags |= FLAG_SYN_LIMIT;
    }
    if guard.draining {
        flags |= FLAG_DRAINING;
    }
    flags
}
