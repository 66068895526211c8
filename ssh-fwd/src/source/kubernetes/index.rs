//! The desired state kept up to date event by event. An update recomputes
//! the claims of the Services it touches (a Service, or the Service an
//! EndpointSlice belongs to) and resolves ownership again only for the
//! frontends those claims held or hold, with the same functions the full
//! recompute uses ([`desired::claims_of`], [`desired::resolve`]). So one
//! change costs what it touches, not the size of the cluster. The full
//! recompute ([`Index::full`]) stays as the periodic self-check, and a
//! property test holds the two equal over random event sequences.
//!
//! Past the maps' capacity the cut ([`desired::cap`]) is taken over the whole
//! set after each change: an overfull node is an error state, and it keeps
//! the index equal to the full recompute.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use smallvec::SmallVec;

use super::{
    desired::{self, Contender, Desired, Note, Owned, Policy, ServiceClaims},
    objects::{Id, ServiceView, SliceView},
};

use crate::{mapping::MappingSet, source::validate::Rules};

/// One change of the caches, as the watches report it.
#[derive(Clone, Debug)]
pub enum Update {
    /// A Service created or changed (`Some`) or deleted (`None`).
    Service(Id, Option<ServiceView>),
    /// An EndpointSlice, by its own `namespace/name`.
    Slice(Id, Option<SliceView>),
    /// A complete list of Services: it replaces them all (a relist after a
    /// watch expired may have missed deletions).
    Services(Vec<ServiceView>),
    Slices(Vec<(Id, SliceView)>),
}

/// Ids of a Service's slices, or of a frontend's claimants: most Services
/// have one slice and most frontends one claimant, held in place instead
/// of in an allocation of their own (20,000 fewer at 10,000 Services).
type Ids = SmallVec<[Id; 1]>;
const _: () = assert!(size_of::<Ids>() == size_of::<Vec<Id>>());

/// Frontends resolved at once past which the mappings' tree is built
/// again with full nodes ([`MappingSet::pack`]), if they are most of it.
const PACK_AFTER: usize = 1024;

#[derive(Debug)]
pub struct Index {
    policy: Policy,
    /// [`desired::rules`] of this node.
    rules: Rules,
    /// Boxed, as are the slices: a table has room for up to twice its
    /// entries, and a view is 120 to 200 bytes against a pointer's 8.
    services: HashMap<Id, Box<ServiceView>>,
    slices: HashMap<Id, Box<SliceView>>,
    /// Slice ids by the Service they name (known or not yet); a Service
    /// has one or a few, and the rules do not depend on their order.
    slices_of: HashMap<Id, Ids>,
    /// What each Service claims now.
    claims: HashMap<Id, ServiceClaims>,
    /// The Services claiming each frontend.
    contenders: HashMap<SocketAddr, Ids>,
    /// The conflict notes of each contested frontend.
    conflicts: HashMap<SocketAddr, Vec<Note>>,
    /// Every owned frontend's mapping, before the capacity cut.
    all: MappingSet,
    /// The Service owning each frontend in `all`.
    owners: HashMap<SocketAddr, Id>,
    /// Past the capacity: what fits, and the note naming what does not.
    capped: Option<(MappingSet, Note)>,
    /// How many Services are skipped as dangerous ([`Note::Invalid`]).
    invalid: usize,
    /// Counts changes of [`Index::mappings`].
    generation: u64,
    /// The frontends whose mapping changed since [`Index::take_touched`]
    /// last ran; `None` when any may have (a change of the capacity cut, a
    /// rebuild, a new index).
    touched: Option<BTreeSet<SocketAddr>>,
}

/// The incremental state differed from the full recompute (a bug): how
/// many mappings differed. The index was rebuilt from the full recompute.
#[derive(Debug, PartialEq, Eq)]
pub struct Drift {
    pub differing: usize,
}

impl Index {
    /// An index off any node: [`Index::on_node`] with no addresses.
    pub fn new(policy: Policy) -> Self {
        Self::on_node(policy, BTreeMap::new())
    }

    /// An index for the node with `node_addrs` (every address, with its
    /// interface), where no backend may be.
    pub fn on_node(policy: Policy, node_addrs: BTreeMap<IpAddr, String>) -> Self {
        Self {
            rules: desired::rules(&policy, node_addrs),
            policy,
            services: HashMap::new(),
            slices: HashMap::new(),
            slices_of: HashMap::new(),
            claims: HashMap::new(),
            contenders: HashMap::new(),
            conflicts: HashMap::new(),
            all: MappingSet::default(),
            owners: HashMap::new(),
            capped: None,
            invalid: 0,
            generation: 0,
            touched: None,
        }
    }

    /// The frontends whose mapping changed since the last call (`None`:
    /// any may have), so that a change is planned only where it happens.
    pub fn take_touched(&mut self) -> Option<BTreeSet<SocketAddr>> {
        self.touched.replace(BTreeSet::new())
    }

    /// Changes whenever the mappings change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The mappings for everything applied so far, within the capacity.
    pub fn mappings(&self) -> &MappingSet {
        self.capped.as_ref().map_or(&self.all, |(fits, _)| fits)
    }

    /// The Service owning `frontend`, and the pod at `backend` among its
    /// EndpointSlices', if they name one: what the connection log names a
    /// connection by.
    pub fn owner_of(
        &self,
        frontend: SocketAddr,
        backend: IpAddr,
    ) -> (Option<&Id>, Option<&Arc<str>>) {
        let Some(service) = self.owners.get(&frontend) else {
            return (None, None);
        };
        let pod = (self.slices_of.get(service).into_iter().flatten())
            .filter_map(|id| self.slices.get(id))
            .flat_map(|s| &s.pods)
            .find(|p| p.ip == backend)
            .map(|p| &p.name);
        (Some(service), pod)
    }

    /// How many Services are skipped as dangerous.
    pub fn invalid_services(&self) -> usize {
        self.invalid
    }

    /// How many mappings the capacity leaves out.
    pub fn left_out(&self) -> usize {
        match &self.capped {
            Some((_, Note::OverCapacity { excess, .. })) => *excess,
            _ => 0,
        }
    }

    /// Every note that holds now.
    pub fn notes(&self) -> Vec<Note> {
        let mut notes: Vec<Note> = (self.claims.values())
            .flat_map(|c| c.notes.iter().cloned())
            .chain(self.conflicts.values().flatten().cloned())
            .chain(self.capped.iter().map(|(_, note)| note.clone()))
            .collect();
        notes.sort();
        notes
    }

    /// Applies updates; returns the notes they raised (those that did not
    /// hold before), for logging each once while it holds.
    pub fn apply(&mut self, updates: impl IntoIterator<Item = Update>) -> Vec<Note> {
        let mut dirty = BTreeSet::new();
        for update in updates {
            match update {
                Update::Service(id, view) => self.set_service(id, view, &mut dirty),
                Update::Slice(id, view) => self.set_slice(id, view, &mut dirty),
                Update::Services(all) => {
                    let listed: BTreeSet<Id> = all.iter().map(|s| s.id.clone()).collect();
                    let gone: Vec<Id> = (self.services.keys())
                        .filter(|id| !listed.contains(*id))
                        .cloned()
                        .collect();
                    for id in gone {
                        self.set_service(id, None, &mut dirty);
                    }
                    for view in all {
                        self.set_service(view.id.clone(), Some(view), &mut dirty);
                    }
                }
                Update::Slices(all) => {
                    let listed: BTreeSet<&Id> = all.iter().map(|(id, _)| id).collect();
                    let gone: Vec<Id> = (self.slices.keys())
                        .filter(|id| !listed.contains(id))
                        .cloned()
                        .collect();
                    for id in gone {
                        self.set_slice(id, None, &mut dirty);
                    }
                    for (id, view) in all {
                        self.set_slice(id, Some(view), &mut dirty);
                    }
                }
            }
        }
        self.settle(&dirty)
    }

    /// Checks backends against the node's addresses as they are now
    /// (`node_addrs`, each with its interface): one the node gained since (a
    /// CNI bridge's gateway, a tunnel's, a new node IP) is refused from now
    /// on, one it lost is allowed again. When they changed, every Service
    /// is recomputed; returns the notes raised.
    pub fn set_node_addrs(&mut self, node_addrs: BTreeMap<IpAddr, String>) -> Vec<Note> {
        if self.rules.all_node_addrs == node_addrs {
            return Vec::new();
        }
        self.rules = desired::rules(&self.policy, node_addrs);
        let dirty: BTreeSet<Id> = self.services.keys().cloned().collect();
        self.settle(&dirty)
    }

    /// Recomputes the `dirty` Services, then the owners of the frontends
    /// they claimed or claim, then the capacity cut; returns the notes
    /// raised.
    fn settle(&mut self, dirty: &BTreeSet<Id>) -> Vec<Note> {
        let mut raised = Vec::new();
        let mut frontends = BTreeSet::new();
        for service in dirty {
            self.recompute(service, &mut frontends, &mut raised);
        }
        // A whole list (or most of one) fills the mappings in ascending
        // order, which leaves their tree's nodes half empty.
        let most = frontends.len() >= PACK_AFTER && frontends.len() * 2 >= self.all.len();
        for frontend in frontends {
            self.resolve(frontend, &mut raised);
        }
        if most {
            self.all.pack();
        }
        if !dirty.is_empty() {
            self.cut(&mut raised);
        }
        raised
    }

    /// The desired state recomputed from scratch from what the index holds.
    pub fn full(&self) -> Desired {
        desired::compute_on(
            self.services.values().map(|s| &**s),
            self.slices.values().map(|s| &**s),
            &self.policy,
            &self.rules,
        )
    }

    /// The periodic self-check: compares the incremental mappings with the
    /// full recompute, and rebuilds the index if they differ.
    pub fn check(&mut self) -> Result<(), Drift> {
        let full = self.full().mappings;
        let mine = self.mappings();
        if &full == mine {
            return Ok(());
        }
        let differing = full
            .iter()
            .filter(|m| mine.get(&m.frontend) != Some(*m))
            .count()
            + (mine.iter())
                .filter(|m| full.get(&m.frontend).is_none())
                .count();
        let services: Vec<ServiceView> = self.services.values().map(|s| (**s).clone()).collect();
        let slices: Vec<(Id, SliceView)> = (self.slices.iter())
            .map(|(id, s)| (id.clone(), (**s).clone()))
            .collect();
        let generation = self.generation + 1;
        *self = Self::on_node(self.policy.clone(), self.rules.all_node_addrs.clone());
        self.apply([Update::Services(services), Update::Slices(slices)]);
        self.generation += generation;
        Err(Drift { differing })
    }

    fn set_service(&mut self, id: Id, view: Option<ServiceView>, dirty: &mut BTreeSet<Id>) {
        match view {
            Some(view) if self.services.get(&id).is_some_and(|now| **now == view) => {}
            Some(mut view) => {
                let id = self.shared(id);
                view.id = id.clone();
                self.services.insert(id.clone(), Box::new(view));
                dirty.insert(id);
            }
            None => {
                if self.services.remove(&id).is_some() {
                    dirty.insert(id);
                }
            }
        }
    }

    fn set_slice(&mut self, id: Id, mut view: Option<SliceView>, dirty: &mut BTreeSet<Id>) {
        if self.slices.get(&id).map(|now| &**now) == view.as_ref() {
            return;
        }
        if let Some(old) = self.slices.remove(&id)
            && let Some(service) = old.service
        {
            if let Some(ids) = self.slices_of.get_mut(&service) {
                ids.retain(|known| *known != id);
                if ids.is_empty() {
                    self.slices_of.remove(&service);
                }
            }
            dirty.insert(service);
        }
        if let Some(view) = &mut view {
            // The Service's name once in memory, not once per slice too.
            view.service = view.service.take().map(|s| self.shared(s));
        }
        if let Some(view) = view {
            if let Some(service) = &view.service {
                let ids = self.slices_of.entry(service.clone()).or_default();
                if !ids.contains(&id) {
                    ids.push(id.clone());
                }
                dirty.insert(service.clone());
            }
            self.slices.insert(id, Box::new(view));
        }
    }

    /// `id` as the index holds it already, if it does: a Service's name
    /// is kept once, not once by the Service and again by each slice.
    fn shared(&self, id: Id) -> Id {
        (self.services.get_key_value(&id).map(|(known, _)| known))
            .or_else(|| self.slices_of.get_key_value(&id).map(|(known, _)| known))
            .map_or(id, Clone::clone)
    }

    /// Recomputes what `service` claims; notes the frontends whose owner
    /// may have changed.
    fn recompute(
        &mut self,
        service: &Id,
        frontends: &mut BTreeSet<SocketAddr>,
        raised: &mut Vec<Note>,
    ) {
        let new = match self.services.get(service) {
            Some(svc) => {
                let slices: Vec<&SliceView> = (self.slices_of.get(service).into_iter())
                    .flatten()
                    .filter_map(|id| self.slices.get(id).map(|s| &**s))
                    .collect();
                desired::claims_of(svc, &slices, &self.policy, &self.rules)
            }
            None => ServiceClaims::default(),
        };
        let old = self.claims.remove(service).unwrap_or_default();
        for claim in &old.claims {
            frontends.insert(claim.frontend);
            if let Some(ids) = self.contenders.get_mut(&claim.frontend) {
                ids.retain(|id| id != service);
                if ids.is_empty() {
                    self.contenders.remove(&claim.frontend);
                }
            }
        }
        for claim in &new.claims {
            frontends.insert(claim.frontend);
            self.contenders
                .entry(claim.frontend)
                .or_default()
                .push(service.clone());
        }
        raised.extend(new.notes.iter().filter(|n| !old.notes.contains(n)).cloned());
        let invalid = |c: &ServiceClaims| c.notes.iter().any(|n| matches!(n, Note::Invalid { .. }));
        self.invalid = self.invalid + usize::from(invalid(&new)) - usize::from(invalid(&old));
        if !(new.claims.is_empty() && new.notes.is_empty()) {
            let mut new = new;
            new.claims.shrink_to_fit();
            new.notes.shrink_to_fit();
            self.claims.insert(service.clone(), new);
        }
    }

    /// Decides the owner of `frontend` again from its contenders.
    fn resolve(&mut self, frontend: SocketAddr, raised: &mut Vec<Note>) {
        let contenders = (self.contenders.get(&frontend).into_iter())
            .flatten()
            .filter_map(|id| {
                let svc = self.services.get(id)?;
                let claim =
                    (self.claims.get(id)?.claims.iter()).find(|c| c.frontend == frontend)?;
                Some(Contender {
                    id,
                    created: svc.created.as_ref(),
                    claim,
                })
            });
        let (owned, notes) = desired::resolve(frontend, contenders);
        match owned {
            Some(Owned { mapping, id, .. }) => {
                if self.owners.get(&frontend) != Some(id) {
                    self.owners.insert(frontend, id.clone());
                }
                if self.all.get(&frontend) != Some(&mapping) {
                    self.all.insert(mapping);
                    self.touch(frontend);
                }
            }
            None => {
                self.owners.remove(&frontend);
                if self.all.remove(&frontend).is_some() {
                    self.touch(frontend);
                }
            }
        }
        let old = self.conflicts.remove(&frontend).unwrap_or_default();
        raised.extend(notes.iter().filter(|n| !old.contains(n)).cloned());
        if !notes.is_empty() {
            self.conflicts.insert(frontend, notes);
        }
    }

    /// Records a change of `frontend`'s mapping.
    fn touch(&mut self, frontend: SocketAddr) {
        self.generation += 1;
        if let Some(touched) = &mut self.touched {
            touched.insert(frontend);
        }
    }

    /// Records a change of the capacity cut: any mapping may have changed.
    fn touch_all(&mut self) {
        self.generation += 1;
        self.touched = None;
    }

    /// Takes the capacity cut again over the whole set, when it is over
    /// (or was): what fits, the oldest Services' first.
    fn cut(&mut self, raised: &mut Vec<Note>) {
        if self.all.len() <= self.policy.capacity {
            if self.capped.take().is_some() {
                self.touch_all();
            }
            return;
        }
        let owned: Vec<Owned<'_>> = (self.all.iter())
            .filter_map(|m| {
                let id = self.owners.get(&m.frontend)?;
                let claims = &self.claims.get(id)?.claims;
                Some(Owned {
                    mapping: m.clone(),
                    id,
                    created: self.services.get(id)?.created.as_ref(),
                    granted: claims.iter().any(|c| c.frontend == m.frontend && c.granted),
                })
            })
            .collect();
        let (fits, note) = desired::cap(owned, self.policy.capacity);
        let Some(note) = note else {
            // Unreachable while every mapping has its owner recorded.
            if self.capped.take().is_some() {
                self.touch_all();
            }
            return;
        };
        let old = self.capped.take();
        if old.as_ref().map(|(m, _)| m) != Some(&fits) {
            self.touch_all();
        }
        if old.as_ref().map(|(_, n)| n) != Some(&note) {
            raised.push(note.clone());
        }
        self.capped = Some((fits, note));
    }
}

#[cfg(test)]
mod tests;
