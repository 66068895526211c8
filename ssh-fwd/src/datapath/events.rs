//! The connection log as the agent reads it: `--conn-log`, baked into the
//! programs, and the kernel's records out of the pinned `CONN_EVENTS` ring
//! buffer.

use std::time::Duration;

use anyhow::Context as _;
use aya::maps::{MapData, RingBuf};
use ssh_fwd_common::maps::{CONN_EVENTS, ConnEvent};
use tokio::io::unix::AsyncFd;

use super::{maps::open_pin, pins::PinLayout};

/// `--conn-log`: which connections the agent logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum ConnLog {
    /// None; the programs write no record.
    Off,
    /// Each connection the pod's server accepted.
    #[default]
    Accepted,
    /// Accepted ones, SYNs refused by an allowlist or `--syn-rate`, and
    /// each connection that ended, with its duration and traffic (counted
    /// per packet: a little cost on every packet).
    All,
}

impl ConnLog {
    /// The `CONN_LOG` constant of the programs.
    pub fn kernel_level(self) -> u8 {
        match self {
            Self::Off => 0,
            Self::Accepted => 1,
            Self::All => 2,
        }
    }
}

/// The pinned ring buffer, polled through tokio.
pub struct EventReader {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl EventReader {
    /// Opens the pinned `CONN_EVENTS` of `layout`; must run in a tokio
    /// runtime.
    pub fn open_pinned(layout: &PinLayout) -> anyhow::Result<Self> {
        let map = open_pin(layout, CONN_EVENTS)?;
        let ring = RingBuf::try_from(map).context(CONN_EVENTS)?;
        // SAFETY: the ring owns its fd and the AsyncFd owns the ring, so the
        // fd stays open exactly as long as it is registered.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("polling the connection log's ring buffer")?;
        Ok(Self { ring })
    }

    /// Waits until records are there, then appends up to `max` of them to
    /// `out`. The programs wake the agent only once the ring is a quarter
    /// full; below that, records are found by a look every [`POLL`].
    pub async fn read(&mut self, out: &mut Vec<ConnEvent>, max: usize) -> anyhow::Result<()> {
        loop {
            let before = out.len();
            match tokio::time::timeout(POLL, self.ring.readable_mut()).await {
                Ok(ready) => {
                    let mut guard = ready.context("waiting on the connection log's ring buffer")?;
                    if take(guard.get_inner_mut(), out, max) < max {
                        // Drained: wait for the next wake-up.
                        guard.clear_ready();
                    }
                }
                Err(_) => {
                    take(self.ring.get_mut(), out, max);
                }
            }
            if out.len() > before {
                return Ok(());
            }
        }
    }
}

/// How often the agent looks into the ring without a wake-up: how late a
/// record may reach the log when few arrive.
pub const POLL: Duration = Duration::from_millis(100);

/// Appends up to `max` records of `ring` to `out`; returns how many.
fn take(ring: &mut RingBuf<MapData>, out: &mut Vec<ConnEvent>, max: usize) -> usize {
    let mut taken = 0;
    while taken < max {
        let Some(item) = ring.next() else { break };
        taken += 1;
        if let Some(event) = decode(&item) {
            out.push(event);
        }
    }
    taken
}

/// One record, if it has the layout's size.
fn decode(bytes: &[u8]) -> Option<ConnEvent> {
    if bytes.len() < size_of::<ConnEvent>() {
        return None;
    }
    // SAFETY: `ConnEvent` is plain integers (any bit pattern is valid), and
    // the slice holds at least one; it may be unaligned.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<ConnEvent>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_record_is_skipped() {
        assert_eq!(decode(&[0; 79]), None);
        let mut bytes = [0u8; 80];
        bytes[0] = 7;
        bytes[32] = 1; // slot
        let event = decode(&bytes).expect("a whole record");
        assert_eq!((event.time_ns, event.slot), (7, 1));
    }
}
