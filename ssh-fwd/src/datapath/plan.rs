//! The pure heart of reconciliation: from what the maps hold and what is
//! desired, compute the smallest set of map writes, in an order that never
//! exposes a half-made mapping and never removes one that stays.

use std::collections::{BTreeMap, BTreeSet};

use ssh_fwd_common::maps::{Endpoint, FLAG_SHARED_BACKEND, MAX_MAPPINGS, NatTarget};

use crate::mapping::MappingSet;

/// The maps' contents as userspace sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// FRONTENDS: frontend -> backend.
    pub frontends: BTreeMap<Endpoint, NatTarget>,
    /// REVERSE: backend -> primary frontend.
    pub reverse: BTreeMap<Endpoint, NatTarget>,
    /// MAPPING_NAMES for the slots in use.
    pub names: BTreeMap<u32, String>,
}

/// Map writes, to be applied in field order (see [`super::maps::Maps::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Slots taken by new mappings: counters zeroed and name written before
    /// the mapping becomes visible.
    pub new_slots: Vec<(u32, String)>,
    /// Slots whose mapping stays but whose name changed.
    pub renamed: Vec<(u32, String)>,
    /// Written before frontends, so replies are handled once requests flow.
    pub reverse_upserts: Vec<(Endpoint, NatTarget)>,
    /// Writing a frontend entry is what makes a mapping live.
    pub frontend_upserts: Vec<(Endpoint, NatTarget)>,
    pub frontend_deletes: Vec<Endpoint>,
    /// Deleted after the frontends that led to them.
    pub reverse_deletes: Vec<Endpoint>,
    /// Frontends removed or pointed at another backend: the connections
    /// tracked through them are stale (their backend address may be given
    /// to another pod next) and are purged.
    pub retired: Vec<Endpoint>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.new_slots.is_empty()
            && self.renamed.is_empty()
            && self.reverse_upserts.is_empty()
            && self.frontend_upserts.is_empty()
            && self.frontend_deletes.is_empty()
            && self.reverse_deletes.is_empty()
            && self.retired.is_empty()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error(
        "{wanted} mappings wanted but a node holds at most {MAX_MAPPINGS}; \
         remove mappings or narrow the port range"
    )]
    TooMany { wanted: usize },
}

/// The tables the maps should hold for `desired`, reusing slots and primary
/// frontends from `installed` wherever they still apply.
pub fn desired_tables(installed: &Installed, desired: &MappingSet) -> Result<Installed, PlanError> {
    if desired.len() > MAX_MAPPINGS as usize {
        return Err(PlanError::TooMany {
            wanted: desired.len(),
        });
    }
    // A frontend that stays keeps its slot, so its counters carry on.
    let mut slots: BTreeMap<Endpoint, u32> = BTreeMap::new();
    for m in desired.iter() {
        let frontend = Endpoint::new(*m.frontend.ip(), m.frontend.port());
        if let Some(t) = installed.frontends.get(&frontend) {
            slots.insert(frontend, t.slot);
        }
    }
    // New frontends take slots no installed entry uses, so a slot being freed
    // in this same plan is never zeroed while its old entry is still live.
    let taken: BTreeSet<u32> = installed
        .frontends
        .values()
        .map(|t| t.slot)
        .chain(installed.reverse.values().map(|t| t.slot))
        .collect();
    let mut free = (0..MAX_MAPPINGS).filter(|s| !taken.contains(s));
    let mut backends: BTreeMap<Endpoint, Vec<(Endpoint, u32)>> = BTreeMap::new();
    let mut out = Installed::default();
    for m in desired.iter() {
        let frontend = Endpoint::new(*m.frontend.ip(), m.frontend.port());
        let backend = Endpoint::new(*m.backend.ip(), m.backend.port());
        let slot = match slots.get(&frontend) {
            Some(slot) => *slot,
            None => free.next().ok_or(PlanError::TooMany {
                wanted: desired.len(),
            })?,
        };
        backends.entry(backend).or_default().push((frontend, slot));
        out.names.insert(slot, m.name.clone());
        out.frontends.insert(
            frontend,
            NatTarget {
                endpoint: backend,
                slot,
                flags: 0,
            },
        );
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
            // Lowest as a person reads it (IP, then port), not by raw wire bytes.
            .or_else(|| frontends.iter().min_by_key(|(f, _)| (f.ip(), f.port())))
        else {
            continue;
        };
        out.reverse.insert(
            backend,
            NatTarget {
                endpoint: primary,
                slot,
                flags,
            },
        );
        for (frontend, _) in frontends {
            if let Some(t) = out.frontends.get_mut(&frontend) {
                t.flags = flags;
            }
        }
    }
    Ok(out)
}

/// The writes that turn `installed` into the tables for `desired`.
#[cfg(test)]
pub fn plan(installed: &Installed, desired: &MappingSet) -> Result<Plan, PlanError> {
    plan_with_tables(installed, desired).map(|(plan, _)| plan)
}

/// Like [`plan`], also returning the tables the maps hold once it is applied.
pub fn plan_with_tables(
    installed: &Installed,
    desired: &MappingSet,
) -> Result<(Plan, Installed), PlanError> {
    let want = desired_tables(installed, desired)?;
    let mut plan = Plan::default();
    let installed_slots: BTreeSet<u32> = installed.frontends.values().map(|t| t.slot).collect();
    for (slot, name) in &want.names {
        if !installed_slots.contains(slot) {
            plan.new_slots.push((*slot, name.clone()));
        } else if installed.names.get(slot) != Some(name) {
            plan.renamed.push((*slot, name.clone()));
        }
    }
    plan.reverse_upserts = upserts(&installed.reverse, &want.reverse);
    plan.frontend_upserts = upserts(&installed.frontends, &want.frontends);
    plan.frontend_deletes = deletes(&installed.frontends, &want.frontends);
    plan.reverse_deletes = deletes(&installed.reverse, &want.reverse);
    plan.retired = installed
        .frontends
        .iter()
        .filter(|(f, t)| want.frontends.get(f).map(|w| w.endpoint) != Some(t.endpoint))
        .map(|(f, _)| *f)
        .collect();
    Ok((plan, want))
}

fn upserts(
    have: &BTreeMap<Endpoint, NatTarget>,
    want: &BTreeMap<Endpoint, NatTarget>,
) -> Vec<(Endpoint, NatTarget)> {
    want.iter()
        .filter(|(k, v)| have.get(k) != Some(v))
        .map(|(k, v)| (*k, *v))
        .collect()
}

fn deletes(
    have: &BTreeMap<Endpoint, NatTarget>,
    want: &BTreeMap<Endpoint, NatTarget>,
) -> Vec<Endpoint> {
    have.keys()
        .filter(|k| !want.contains_key(k))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests;
