//! The tables an upgrade from layout v3 leaves for the connections of the
//! older data path: [`LEGACY`], the backends it forwarded to and until
//! when, and [`LEGACY_CONNS`], the frontend each of its connections used
//! (for a backend behind several frontends). `datapath/upgrade.rs` seeds
//! them once; the sweep removes them when their time ends.

use std::collections::BTreeSet;

use anyhow::Context as _;
use aya::maps::{HashMap, MapData};
use ssh_fwd_common::maps::{
    ConnKey, Endpoint, LEGACY, LEGACY_CONN_CAPACITY, LEGACY_CONNS, NatTarget,
};

use super::table::Table;

/// [`LEGACY`] and [`LEGACY_CONNS`].
pub struct Legacy {
    pub(super) backends: HashMap<MapData, Endpoint, u64>,
    pub(super) conns: HashMap<MapData, ConnKey, NatTarget>,
}

impl Legacy {
    /// Marks `backends` as forwarded to by an older data path until `until`
    /// (kernel clock), and records the frontends it kept for `conns`
    /// (backends behind several frontends). Returns how many connections
    /// fit; the others fall back to their backend's primary frontend.
    pub fn seed(
        &mut self,
        backends: &[Endpoint],
        conns: &[(ConnKey, NatTarget)],
        until: u64,
    ) -> anyhow::Result<usize> {
        for backend in backends {
            self.backends.insert(backend, until, 0).with_context(|| {
                format!(
                    "writing {LEGACY} entry {}",
                    crate::datapath::maps::show(backend)
                )
            })?;
        }
        let fit = conns.len().min(LEGACY_CONN_CAPACITY as usize);
        for (key, target) in &conns[..fit] {
            self.conns
                .insert(key, target, 0)
                .with_context(|| format!("writing {LEGACY_CONNS}"))?;
        }
        Ok(fit)
    }

    /// Removes the entries whose time ended by `now`, and the recorded
    /// frontends of their connections; returns the backends left.
    pub fn sweep(&mut self, now: u64) -> u64 {
        let mut live = BTreeSet::new();
        let mut ended = Vec::new();
        for (backend, until) in Table::entries(&self.backends) {
            if until <= now {
                ended.push(backend);
            } else {
                live.insert(backend);
            }
        }
        for backend in &ended {
            let _ = self.backends.remove(backend);
        }
        let stale: Vec<ConnKey> = Table::entries(&self.conns)
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !live.contains(&k.backend()))
            .collect();
        for key in stale {
            let _ = self.conns.remove(&key);
        }
        live.len() as u64
    }
}
