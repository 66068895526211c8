//! The cluster's cross-node key in its pinned map
//! ([`CROSS_NODE_KEY`]), which the programs read at each translated SYN.

use anyhow::Context as _;
use aya::maps::{Array, MapData};
use ssh_fwd_common::{maps::CROSS_NODE_KEY, siphash::Key};

use super::{pins::PinLayout, status::open};

/// Handle to [`CROSS_NODE_KEY`].
pub struct KeyMap(Array<MapData, Key>);

impl KeyMap {
    /// Opens the map an agent pinned.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        open(layout, CROSS_NODE_KEY).map(Self)
    }

    /// The key in force, if any.
    pub fn read(&self) -> anyhow::Result<Option<Key>> {
        let key = self.0.get(&0, 0).context("reading CROSS_NODE_KEY")?;
        Ok((key != [0, 0]).then_some(key))
    }

    /// Puts `key` in force (`None`: no key, plain options).
    pub fn write(&mut self, key: Option<Key>) -> anyhow::Result<()> {
        self.0
            .set(0, key.unwrap_or([0, 0]), 0)
            .context("writing CROSS_NODE_KEY")
    }
}
