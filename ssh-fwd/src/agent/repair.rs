//! The resync's repair of pins deleted behind the agent's back (see
//! `datapath::repair`): each pin put back is logged once, at warn, naming
//! it, and counted (`ssh_fwd_pins_restored_total`).

use std::path::PathBuf;

use prometheus_client::metrics::counter::Counter;

use crate::datapath::{Datapath, lock::Lost};

pub struct PinRepair {
    restored: Counter,
    /// A failure is logged once until a repair works again.
    failing: bool,
}

impl PinRepair {
    pub fn new(restored: Counter) -> Self {
        Self {
            restored,
            failing: false,
        }
    }

    /// Restores the pins of the maps, the interfaces' links and hairpin.
    /// Fails only when another agent holds the `--bpffs` directory now:
    /// this one must stop.
    pub fn run(&mut self, datapath: &mut Datapath) -> Result<(), Lost> {
        let result = datapath.restore_pins()?;
        self.record(&result.pins);
        match result.errors.first() {
            None if self.failing => {
                tracing::info!("deleted pins restored again");
                self.failing = false;
            }
            None => {}
            Some(_) if self.failing => {}
            Some(_) => {
                for e in &result.errors {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "cannot restore a deleted pin; retried at every resync"
                    );
                }
                self.failing = true;
            }
        }
        Ok(())
    }

    /// Logs and counts pins put back (also by the pod scan).
    pub fn record(&self, pins: &[PathBuf]) {
        for pin in pins {
            tracing::warn!(
                pin = %pin.display(),
                "pin deleted behind the agent's back restored (a map is pinned again, a link \
                 attached and pinned again)"
            );
        }
        self.restored.inc_by(pins.len() as u64);
    }
}
