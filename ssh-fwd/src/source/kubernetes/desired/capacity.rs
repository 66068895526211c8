//! At most `--max-mappings` mappings on a node: past that, the newest
//! Services' mappings are left out, so a new Service never takes a running
//! one's place. Shared by the full recompute and the incremental index, so
//! both leave out the same ones.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Id, Note};
use crate::{
    k8s::ownership::{Claimant, seniority},
    mapping::{Mapping, MappingSet},
};

/// A mapping and the Service that owns its frontend.
#[derive(Debug)]
pub struct Owned<'a> {
    pub mapping: Mapping,
    pub id: &'a Id,
    pub created: Option<&'a Time>,
    pub granted: bool,
}

impl Claimant for Owned<'_> {
    fn granted(&self) -> bool {
        self.granted
    }
    fn created(&self) -> Option<&Time> {
        self.created
    }
    fn service(&self) -> &str {
        self.id
    }
}

/// The mappings a node can hold: the granted first, then the oldest
/// Services' (then by
/// frontend, so the cut never depends on iteration order), and a note
/// naming those left out.
pub fn cap(mut owned: Vec<Owned<'_>>, max: usize) -> (MappingSet, Option<Note>) {
    if owned.len() <= max {
        return (
            MappingSet::from_unique(owned.into_iter().map(|o| o.mapping)),
            None,
        );
    }
    owned.sort_by(|a, b| seniority(a, b).then_with(|| a.mapping.frontend.cmp(&b.mapping.frontend)));
    let newest = owned.split_off(max);
    let note = Note::OverCapacity {
        excess: newest.len(),
        left_out: newest
            .into_iter()
            .map(|o| o.mapping.name.to_string())
            .collect(),
    };
    (
        MappingSet::from_unique(owned.into_iter().map(|o| o.mapping)),
        Some(note),
    )
}
