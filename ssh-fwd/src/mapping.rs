//! What the agent is asked to forward: a set of `frontend -> backend`
//! mappings. Every source (the mappings file, Kubernetes) produces a
//! [`MappingSet`]; the data path installs one. This is the vocabulary the
//! layers share, so it depends on nothing else in the crate.

use std::{collections::BTreeMap, net::SocketAddrV4};

/// One frontend -> backend mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Free-form label; may be empty.
    pub name: String,
    pub frontend: SocketAddrV4,
    pub backend: SocketAddrV4,
}

/// The desired mappings, keyed by frontend (a frontend appears once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MappingSet(BTreeMap<SocketAddrV4, Mapping>);

impl MappingSet {
    /// Builds a set; the caller guarantees frontends are unique (the file
    /// parser and the Kubernetes source both enforce it with their own rules).
    pub fn from_unique(mappings: impl IntoIterator<Item = Mapping>) -> Self {
        Self(mappings.into_iter().map(|m| (m.frontend, m)).collect())
    }

    /// Adds or replaces the mapping of `mapping.frontend`.
    pub fn insert(&mut self, mapping: Mapping) -> Option<Mapping> {
        self.0.insert(mapping.frontend, mapping)
    }

    pub fn remove(&mut self, frontend: &SocketAddrV4) -> Option<Mapping> {
        self.0.remove(frontend)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.0.values()
    }

    pub fn get(&self, frontend: &SocketAddrV4) -> Option<&Mapping> {
        self.0.get(frontend)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `text` with control characters escaped (`\u{1b}`), safe to print to a
/// terminal: names come from files and API objects others write.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
