//! The pure heart of reconciliation: from what the maps hold and what is
//! desired, compute the smallest set of map writes, in an order that never
//! exposes a half-made mapping and never removes one that stays.
//!
//! The maps are as big as the number of mappings a node holds (their
//! capacity, `--max-mappings`), so a reload near capacity needs room made before it
//! can add anything. A reload is therefore two steps, each a complete,
//! consistent [`Plan`]: first the mappings that go away are removed (their
//! slots and entries freed, their connections purged), then everything else
//! is added or changed, reusing what the first step freed. Any desired state
//! within capacity is reachable from any installed state this way.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::Arc,
};

use ssh_fwd_common::maps::{
    FLAG_ALLOWLIST, FLAG_ALLOWLIST_ALL, FLAG_DRAINING, FLAG_SYN_LIMIT, Guard as Rate,
};

use crate::mapping::{
    Guard, Mapping, MappingSet,
    guard::{Allow, Cidr, Limit},
};

mod local;
mod tables;

pub use local::{Local, plan_local};

/// A FRONTENDS or REVERSE entry's value as the plan sees it, of its key's
/// family (the maps' [`NatTarget`](ssh_fwd_common::maps::NatTarget) of
/// either): the endpoint a packet is translated to (a frontend's backend,
/// a backend's primary frontend), the mapping's slot and `FLAG_*` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub endpoint: SocketAddr,
    pub slot: u32,
    pub flags: u32,
}

/// The maps' contents as userspace sees them. Both families in one table:
/// an IPv4 key is an entry of FRONTENDS, REVERSE or ALLOWLIST, an IPv6 one
/// of FRONTENDS6, REVERSE6 or ALLOWLIST6. Slots are one space across
/// families (they index the same counters and names), and so is the
/// capacity: `--max-mappings` counts the mappings of both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// FRONTENDS and FRONTENDS6: frontend -> backend.
    pub frontends: BTreeMap<SocketAddr, Target>,
    /// REVERSE and REVERSE6: backend -> primary frontend.
    pub reverse: BTreeMap<SocketAddr, Target>,
    /// MAPPING_NAMES for the slots in use: the mapping's own name when
    /// it fits a slot (shared, not copied: 10,000 of them are kept).
    pub names: BTreeMap<u32, Arc<str>>,
    /// ALLOWLIST and ALLOWLIST6: each slot's source ranges.
    pub allow: BTreeSet<(u32, Cidr)>,
    /// GUARDS for the slots whose frontend carries `FLAG_SYN_LIMIT`.
    pub rates: BTreeMap<u32, Rate>,
}

impl Installed {
    /// Builds the tables again with full nodes, for keeping: they are
    /// filled in ascending order, which leaves each node just over half
    /// full (at 10,000 mappings about 1.5 MB more than they need).
    pub fn pack(&mut self) {
        self.frontends = std::mem::take(&mut self.frontends).into_iter().collect();
        self.reverse = std::mem::take(&mut self.reverse).into_iter().collect();
        self.names = std::mem::take(&mut self.names).into_iter().collect();
        self.allow = std::mem::take(&mut self.allow).into_iter().collect();
        self.rates = std::mem::take(&mut self.rates).into_iter().collect();
    }
}

/// Map writes, to be applied in field order (see [`super::maps::Maps::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Frontends taken down before [`Plan::reverse_deletes_first`] removes
    /// their backend's REVERSE entry, so none is ever live without it (its
    /// replies would leave untranslated, showing the pod's address). Each
    /// is being changed (written again by `frontend_upserts`) or removed
    /// (also in `frontend_deletes`); its connections are retired either way.
    pub frontend_deletes_first: Vec<SocketAddr>,
    /// REVERSE entries removed first, to make room: entries no frontend
    /// uses, then, only as many as needed, entries of backends that
    /// frontends being changed in this step are about to leave.
    pub reverse_deletes_first: Vec<SocketAddr>,
    /// Slots taken by new mappings: counters zeroed and name written before
    /// the mapping becomes visible.
    pub new_slots: Vec<(u32, Arc<str>)>,
    /// Slots whose mapping stays but whose name changed.
    pub renamed: Vec<(u32, Arc<str>)>,
    /// Written before frontends, so replies are handled once requests flow.
    pub reverse_upserts: Vec<(SocketAddr, Target)>,
    /// Source ranges and rates written before the frontends whose flags
    /// make the kernel read them: a mapping with a list is never open to
    /// all for a moment. A list that changes holds the union of old and
    /// new until `allow_deletes`.
    pub allow_upserts: Vec<(u32, Cidr)>,
    pub rate_upserts: Vec<(u32, Rate)>,
    /// Writing a frontend entry is what makes a mapping live.
    pub frontend_upserts: Vec<(SocketAddr, Target)>,
    pub frontend_deletes: Vec<SocketAddr>,
    /// Deleted after the frontends that led to them.
    pub reverse_deletes: Vec<SocketAddr>,
    /// Ranges removed once no frontend with a list reads them: after the
    /// frontend's flag is cleared, or after the new list is written.
    pub allow_deletes: Vec<(u32, Cidr)>,
    /// Frontends removed or pointed at another backend: the connections
    /// tracked through them are stale (their backend address may be given
    /// to another pod next) and are purged once this step is applied.
    pub retired: Vec<SocketAddr>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.frontend_deletes_first.is_empty()
            && self.reverse_deletes_first.is_empty()
            && self.new_slots.is_empty()
            && self.renamed.is_empty()
            && self.reverse_upserts.is_empty()
            && self.allow_upserts.is_empty()
            && self.rate_upserts.is_empty()
            && self.frontend_upserts.is_empty()
            && self.frontend_deletes.is_empty()
            && self.reverse_deletes.is_empty()
            && self.allow_deletes.is_empty()
            && self.retired.is_empty()
    }
}

/// A reload: its steps, in order, and what the maps hold after them.
#[derive(Clone, Debug, Default)]
pub struct Planned {
    /// Applied one after the other, each in full, its retired connections
    /// purged before the next begins.
    pub steps: Vec<Plan>,
    /// The maps' contents once every step is applied.
    pub tables: Installed,
    /// Desired mappings that do not fit: installed ones are kept first,
    /// then the rest by frontend; the sources cap their sets so this is
    /// normally empty (Kubernetes leaves out the newest Services).
    pub left_out: Vec<Mapping>,
}

/// The steps that turn `installed` into the tables for `desired`. Never
/// fails: what does not fit is left out and named, and removals happen
/// whatever else is wrong.
pub fn plan_steps(installed: &Installed, desired: &MappingSet, capacity: usize) -> Planned {
    let (desired, left_out) = fit(installed, desired, capacity);
    let (steps, tables) = two_steps(installed, &desired, &Outside::empty(capacity));
    Planned {
        steps,
        tables,
        left_out,
    }
}

/// What the tables hold besides the part being planned (nothing for a
/// whole reload; the rest of the tables for [`plan_local`]): the slots its
/// entries use, which the part must not take, and how many REVERSE
/// entries it holds, which count against the tables' `capacity`.
#[derive(Debug)]
struct Outside {
    slots: SlotSet,
    reverse: usize,
    capacity: usize,
}

impl Outside {
    fn empty(capacity: usize) -> Self {
        Self {
            slots: SlotSet::default(),
            reverse: 0,
            capacity,
        }
    }
}

/// Slots as a bitmap (a `BTreeSet` of thousands of slots would cost an
/// allocation per slot on every change).
#[derive(Debug, Default)]
struct SlotSet(Vec<u64>);

impl SlotSet {
    fn insert(&mut self, slot: u32) {
        let (word, bit) = (slot as usize / 64, slot % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    fn contains(&self, slot: u32) -> bool {
        let (word, bit) = (slot as usize / 64, slot % 64);
        self.0.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }
}

/// The two steps from `installed` to `desired` (which fits), and the
/// tables after them.
fn two_steps(
    installed: &Installed,
    desired: &MappingSet,
    outside: &Outside,
) -> (Vec<Plan>, Installed) {
    // Step 1: keep only the frontends that stay, as they are installed now.
    let staying = installed_subset(installed, |f, _| desired.get(f).is_some());
    let (mut shrink, middle) = step(installed, &staying, &BTreeSet::new(), outside);
    // Step 2: add and change. Slots never used before are taken first, so
    // the removed mappings' connections are purged separately only if
    // their slots are reused.
    let used_before: BTreeSet<u32> = installed
        .frontends
        .values()
        .chain(installed.reverse.values())
        .map(|t| t.slot)
        .collect();
    let (mut grow, tables) = step(&middle, desired, &used_before, outside);
    if !grow.new_slots.iter().any(|(s, _)| used_before.contains(s)) {
        grow.retired.append(&mut shrink.retired);
        grow.retired.sort();
        grow.retired.dedup();
    }
    (vec![shrink, grow], tables)
}

/// After a failed write: removes every installed mapping whose backend is
/// not the desired one, and changes nothing else.
pub fn stale_removal(installed: &Installed, desired: &MappingSet, capacity: usize) -> Plan {
    let current = installed_subset(installed, |f, t| {
        desired.get(f).is_some_and(|m| m.backend == t.endpoint)
    });
    step(
        installed,
        &current,
        &BTreeSet::new(),
        &Outside::empty(capacity),
    )
    .0
}

/// The installed mappings `keep` selects, as they are installed.
fn installed_subset(
    installed: &Installed,
    keep: impl Fn(&SocketAddr, &Target) -> bool,
) -> MappingSet {
    MappingSet::from_unique(
        installed
            .frontends
            .iter()
            .filter(|(f, t)| keep(f, t))
            .map(|(f, t)| Mapping {
                name: installed
                    .names
                    .get(&t.slot)
                    .map_or_else(Arc::default, Arc::clone),
                frontend: *f,
                backend: t.endpoint,
                guard: installed_guard(installed, t),
            }),
    )
}

/// The guard the tables give the frontend whose entry is `t`.
pub fn installed_guard(installed: &Installed, t: &Target) -> Guard {
    let allow = if t.flags & FLAG_ALLOWLIST != 0 {
        Allow::Only(
            installed
                .allow
                .range((t.slot, Cidr::ALL)..)
                .take_while(|(slot, _)| *slot == t.slot)
                .map(|(_, cidr)| *cidr)
                .collect(),
        )
    } else {
        Allow::Open
    };
    let limit = match installed.rates.get(&t.slot) {
        Some(rate) if t.flags & FLAG_SYN_LIMIT != 0 => Limit::Exact(*rate),
        _ => Limit::Off,
    };
    Guard {
        allow,
        limit,
        enforce_established: t.flags & FLAG_ALLOWLIST_ALL != 0,
        draining: t.flags & FLAG_DRAINING != 0,
    }
}

/// At most `max` of `desired`: installed frontends first (what runs keeps
/// running), then by frontend.
fn fit(installed: &Installed, desired: &MappingSet, max: usize) -> (MappingSet, Vec<Mapping>) {
    if desired.len() <= max {
        return (desired.clone(), Vec::new());
    }
    let (old, new): (Vec<&Mapping>, Vec<&Mapping>) = desired
        .iter()
        .partition(|m| installed.frontends.contains_key(&m.frontend));
    let mut ordered = old.into_iter().chain(new).cloned();
    let kept = MappingSet::from_unique(ordered.by_ref().take(max));
    let mut left_out: Vec<Mapping> = ordered.collect();
    left_out.sort_by_key(|m| m.frontend);
    (kept, left_out)
}

/// One consistent step from `installed` to `desired`, which must fit.
/// `late_slots` are taken for new mappings only when no other is free.
fn step(
    installed: &Installed,
    desired: &MappingSet,
    late_slots: &BTreeSet<u32>,
    outside: &Outside,
) -> (Plan, Installed) {
    let want = tables::tables_beside(
        installed,
        desired,
        late_slots,
        &outside.slots,
        outside.capacity,
    );
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
    plan.allow_upserts = want.allow.difference(&installed.allow).copied().collect();
    plan.allow_deletes = installed.allow.difference(&want.allow).copied().collect();
    plan.rate_upserts = upserts(&installed.rates, &want.rates);
    plan.frontend_upserts = upserts(&installed.frontends, &want.frontends);
    plan.frontend_deletes = deletes(&installed.frontends, &want.frontends);
    let reverse_deletes = deletes(&installed.reverse, &want.reverse);
    (plan.reverse_deletes_first, plan.reverse_deletes) =
        reverse_delete_order(installed, &want, reverse_deletes, outside);
    let early: BTreeSet<SocketAddr> = plan.reverse_deletes_first.iter().copied().collect();
    plan.frontend_deletes_first = installed
        .frontends
        .iter()
        .filter(|(_, t)| early.contains(&t.endpoint))
        .map(|(f, _)| *f)
        .collect();
    plan.retired = installed
        .frontends
        .iter()
        .filter(|(f, t)| want.frontends.get(f).map(|w| w.endpoint) != Some(t.endpoint))
        .map(|(f, _)| *f)
        .collect();
    (plan, want)
}

/// Splits REVERSE deletes into those done first and those done last. An
/// entry no installed frontend uses goes first (nothing depends on it). So
/// do as many entries of backends being left as the new entries need room
/// for: the frontends leaving them are being changed or removed, their
/// connections retired; they are taken down before (`step`), and the
/// changed ones written again right after. `outside`: the REVERSE entries
/// outside the part planned.
fn reverse_delete_order(
    installed: &Installed,
    want: &Installed,
    deletes: Vec<SocketAddr>,
    outside: &Outside,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let used: BTreeSet<SocketAddr> = installed.frontends.values().map(|t| t.endpoint).collect();
    let (mut first, mut late): (Vec<SocketAddr>, Vec<SocketAddr>) =
        deletes.into_iter().partition(|k| !used.contains(k));
    let added = want
        .reverse
        .keys()
        .filter(|k| !installed.reverse.contains_key(k))
        .count();
    let peak = outside.reverse + installed.reverse.len() - first.len() + added;
    let short = peak.saturating_sub(outside.capacity).min(late.len());
    first.extend(late.drain(..short));
    (first, late)
}

fn upserts<K: Ord + Copy, V: PartialEq + Copy>(
    have: &BTreeMap<K, V>,
    want: &BTreeMap<K, V>,
) -> Vec<(K, V)> {
    want.iter()
        .filter(|(k, v)| have.get(k) != Some(v))
        .map(|(k, v)| (*k, *v))
        .collect()
}

fn deletes(
    have: &BTreeMap<SocketAddr, Target>,
    want: &BTreeMap<SocketAddr, Target>,
) -> Vec<SocketAddr> {
    have.keys()
        .filter(|k| !want.contains_key(k))
        .copied()
        .collect()
}

/// The writes that turn `installed` into the tables for `desired`, every
/// step's fields concatenated (for assertions on what is written).
#[cfg(test)]
pub fn plan(installed: &Installed, desired: &MappingSet) -> Plan {
    let mut all = Plan::default();
    let capacity = ssh_fwd_common::maps::MAX_MAPPINGS as usize;
    for mut p in plan_steps(installed, desired, capacity).steps {
        all.frontend_deletes_first
            .append(&mut p.frontend_deletes_first);
        all.reverse_deletes_first
            .append(&mut p.reverse_deletes_first);
        all.new_slots.append(&mut p.new_slots);
        all.renamed.append(&mut p.renamed);
        all.reverse_upserts.append(&mut p.reverse_upserts);
        all.allow_upserts.append(&mut p.allow_upserts);
        all.rate_upserts.append(&mut p.rate_upserts);
        all.frontend_upserts.append(&mut p.frontend_upserts);
        all.frontend_deletes.append(&mut p.frontend_deletes);
        all.reverse_deletes.append(&mut p.reverse_deletes);
        all.allow_deletes.append(&mut p.allow_deletes);
        all.retired.append(&mut p.retired);
    }
    all
}

#[cfg(test)]
mod tests;
