//! Putting back pins deleted behind the agent's back (an `rm -rf` on
//! bpffs, a cleanup script, a `teardown --force` under a running agent).
//!
//! - First the lock ([`AgentLock::follow`](super::lock::AgentLock::follow)): a `--bpffs` directory removed
//!   whole is made again and locked before anything is pinned there, unless
//!   another agent holds it by then, and then this one stops.
//! - A map lives on while its programs use it, but without its pin `ssh-fwd
//!   list`, `status` and the next agent cannot find it (the next agent
//!   would start with empty tables). The agent holds a handle to each
//!   pinned map and pins it again.
//! - A link lives only as long as its pin (the agent keeps no link fd, see
//!   [`super::hooks`]), so a missing pin means a detached program: it is
//!   attached anew and pinned. The pods' links are restored by the pod
//!   scan ([`super::pod_links`]), the rest by [`Datapath::restore_pins`].

use std::path::PathBuf;

use anyhow::Context as _;
use aya::maps::MapData;
use ssh_fwd_common::maps::ALL_MAPS;

use super::{
    Datapath, hairpin, hooks,
    lock::{FollowError, Lost},
    pins::{self, PinLayout},
};

/// A handle to every pinned map, with its pin.
pub struct MapPins(Vec<(PathBuf, MapData)>);

impl MapPins {
    /// Opens every map pinned under `layout`: call it right after loading,
    /// when they are all there.
    pub fn open(layout: &PinLayout) -> anyhow::Result<Self> {
        ALL_MAPS
            .iter()
            .map(|name| {
                let pin = layout.map(name);
                let map = MapData::from_pin(&pin)
                    .with_context(|| format!("opening pinned map {}", pin.display()))?;
                Ok((pin, map))
            })
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }

    /// Pins again every map whose pin is gone.
    fn restore(&self, restored: &mut Restored) {
        for (pin, map) in &self.0 {
            if pin.exists() {
                continue;
            }
            let dir = pin.parent().unwrap_or(pin);
            let result = std::fs::create_dir_all(dir)
                .with_context(|| format!("creating {}", dir.display()))
                .and_then(|()| {
                    map.pin(pin)
                        .with_context(|| format!("pinning map {}", pin.display()))
                });
            restored.record(result.map(|()| vec![pin.clone()]));
        }
    }
}

/// What one [`Datapath::restore_pins`] put back, and what it could not.
#[derive(Debug, Default)]
pub struct Restored {
    pub pins: Vec<PathBuf>,
    pub errors: Vec<anyhow::Error>,
}

impl Restored {
    fn record(&mut self, result: anyhow::Result<Vec<PathBuf>>) {
        match result {
            Ok(pins) => self.pins.extend(pins),
            Err(e) => self.errors.push(e),
        }
    }
}

impl Datapath {
    /// Makes sure the agent's lock is on the `--bpffs` directory now at its
    /// path (see [`super::lock::AgentLock::follow`]), then pins again the maps whose pins
    /// are gone, then attaches and pins again the links of the external and
    /// cluster interfaces and of hairpin whose pins are gone. One failure
    /// does not stop the rest. Fails only when another process holds the
    /// directory now: this agent must stop.
    pub fn restore_pins(&mut self) -> Result<Restored, Lost> {
        let mut restored = Restored::default();
        let ready = self.lock.follow(&self.layout).and_then(|_| {
            pins::create_pin_dir(&self.layout, &self.layout.version_dir())
                .map_err(FollowError::Retry)
        });
        match ready {
            Ok(_) => {}
            Err(FollowError::Lost(lost)) => return Err(lost),
            Err(FollowError::Retry(e)) => {
                restored.errors.push(e);
                return Ok(restored);
            }
        }
        self.map_pins.restore(&mut restored);
        let links_dir = self.layout.links_dir();
        for (iface, hook) in &self.hooks {
            let result = hooks::restore_interface(
                &mut self.ebpf,
                &links_dir,
                iface,
                *hook,
                self.kernel.plan.tc,
            )
            .with_context(|| format!("restoring the links of interface {iface}"));
            restored.record(result);
        }
        if let Some(root) = &self.hairpin_root {
            let result = hairpin::restore(&mut self.ebpf, &self.layout, root)
                .with_context(|| format!("restoring the hairpin links of {}", root.display()));
            restored.record(result);
        }
        Ok(restored)
    }
}
