//! Waiting for unpinned links to leave their hooks. Removing a link's pin
//! drops the pin's reference only after an RCU grace period, and the last
//! reference detaches the program from a work item after that: under load,
//! a program could still be forwarding when `teardown` said it was gone.

use std::{
    collections::BTreeSet,
    path::Path,
    time::{Duration, Instant},
};

use aya::programs::{
    links::{FdLink, PinnedLink},
    loaded_links,
};

/// The kernel ids of the links pinned anywhere under `dir`. The fds
/// opened to read them are closed again, so only the pins hold the links.
pub fn pinned_link_ids(dir: &Path) -> BTreeSet<u32> {
    let mut ids = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return ids;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            ids.extend(pinned_link_ids(&path));
        } else if let Some(id) = link_id(&path) {
            ids.insert(id);
        }
    }
    ids
}

/// `None` for a pin that is not a link (a map's).
fn link_id(pin: &Path) -> Option<u32> {
    let link = FdLink::from(PinnedLink::from_pin(pin).ok()?);
    link.info().ok().map(|info| info.id())
}

/// Waits until the kernel has none of `ids` any more, up to `limit`;
/// `Err` with the ones left then.
pub fn wait_gone(ids: &BTreeSet<u32>, limit: Duration) -> Result<(), BTreeSet<u32>> {
    let deadline = Instant::now() + limit;
    loop {
        let left = still_loaded(ids);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn still_loaded(ids: &BTreeSet<u32>) -> BTreeSet<u32> {
    loaded_links()
        .filter_map(Result::ok)
        .map(|info| info.id())
        .filter(|id| ids.contains(id))
        .collect()
}
