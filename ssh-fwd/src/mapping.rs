//! What the agent is asked to forward: a set of `frontend -> backend`
//! mappings. Every source (the mappings file, Kubernetes) produces a
//! [`MappingSet`]; the data path installs one. This is the vocabulary the
//! layers share, so it depends on nothing else in the crate.

use std::{
    collections::BTreeMap,
    fmt,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

pub mod guard;

pub use guard::Guard;

/// One frontend -> backend mapping. The frontend and the backend are of
/// one family (the data path translates addresses, never families: no
/// NAT46 or NAT64); every source refuses a mapping that mixes them
/// (`source::validate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Free-form label; may be empty. Shared: a Service's mapping is
    /// named by the Service's own `namespace/name`, and the index, the
    /// reconciler and the connection log all keep it.
    pub name: Arc<str>,
    pub frontend: SocketAddr,
    pub backend: SocketAddr,
    /// Who may connect, and how fast.
    pub guard: Guard,
}

impl Mapping {
    /// The family of its frontend (and so of its backend).
    pub fn family(&self) -> Family {
        Family::of(self.frontend.ip())
    }
}

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        })
    }
}

/// The desired mappings, keyed by frontend (a frontend appears once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MappingSet(BTreeMap<SocketAddr, Mapping>);

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

    pub fn remove(&mut self, frontend: &SocketAddr) -> Option<Mapping> {
        self.0.remove(frontend)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.0.values()
    }

    pub fn get(&self, frontend: &SocketAddr) -> Option<&Mapping> {
        self.0.get(frontend)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds the tree again with full nodes. Inserting in ascending
    /// order, as a whole list is resolved, leaves each node just over half
    /// full: at 10,000 mappings about 1.5 MB more than the set needs, for
    /// as long as it is kept.
    pub fn pack(&mut self) {
        self.0 = std::mem::take(&mut self.0).into_iter().collect();
    }
}

/// `text` with control and format characters escaped (`\u{1b}`,
/// `\u{202e}`), safe to print to a terminal: names and errors quote text
/// from files and API objects others write.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if unprintable(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether `c` acts on a terminal instead of showing: a control character
/// (category Cc: escape sequences, bells, line ends), a format character
/// (category Cf: bidirectional overrides, which reorder what follows,
/// zero-width characters) or a line or paragraph separator.
pub fn unprintable(c: char) -> bool {
    /// Unicode 15.1, category Cf (DerivedGeneralCategory.txt).
    const FORMAT: [(char, char); 21] = [
        ('\u{ad}', '\u{ad}'),
        ('\u{600}', '\u{605}'),
        ('\u{61c}', '\u{61c}'),
        ('\u{6dd}', '\u{6dd}'),
        ('\u{70f}', '\u{70f}'),
        ('\u{890}', '\u{891}'),
        ('\u{8e2}', '\u{8e2}'),
        ('\u{180e}', '\u{180e}'),
        ('\u{200b}', '\u{200f}'),
        ('\u{202a}', '\u{202e}'),
        ('\u{2060}', '\u{2064}'),
        ('\u{2066}', '\u{206f}'),
        ('\u{feff}', '\u{feff}'),
        ('\u{fff9}', '\u{fffb}'),
        ('\u{110bd}', '\u{110bd}'),
        ('\u{110cd}', '\u{110cd}'),
        ('\u{13430}', '\u{1343f}'),
        ('\u{1bca0}', '\u{1bca3}'),
        ('\u{1d173}', '\u{1d17a}'),
        ('\u{e0001}', '\u{e0001}'),
        ('\u{e0020}', '\u{e007f}'),
    ];
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}')
        || FORMAT
            .iter()
            .any(|(first, last)| (*first..=*last).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_set_holds_what_it_held_in_order() {
        let set = MappingSet::from_unique((0..300u16).map(|n| Mapping {
            name: format!("m{n}").into(),
            frontend: SocketAddr::from(([198, 18, 0, 10], 20000 + n)),
            backend: SocketAddr::from(([10, 0, 0, 1], 22)),
            guard: Guard::default(),
        }));
        let mut packed = set.clone();
        packed.pack();
        assert_eq!(packed, set);
        assert!(packed.iter().map(|m| m.frontend).is_sorted());
    }
}
