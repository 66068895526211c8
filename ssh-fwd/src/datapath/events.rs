//! The connection log as the agent reads it: `--conn-log`, baked into the
//! programs, and the kernel's records out of the pinned `CONN_EVENTS` ring
//! buffer, which holds both families' records ([`ConnEvent`], 80 bytes,
//! and [`ConnEvent6`], 128), told apart by their length; and the records
//! the programs did not write, by kind, from `CONN_EVENTS_DROPPED`.

use std::time::Duration;

use anyhow::Context as _;
use aya::maps::{MapData, PerCpuArray, RingBuf};
use ssh_fwd_common::maps::{CONN_EVENTS, CONN_EVENTS_DROPPED, ConnEvent, ConnEvent6, EventKind};
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

/// One record of the connection log, of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    V4(ConnEvent),
    V6(ConnEvent6),
}

/// The pinned ring buffer, polled through tokio, and the count of what
/// the programs dropped.
pub struct EventReader {
    ring: AsyncFd<RingBuf<MapData>>,
    dropped: PerCpuArray<MapData, u64>,
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
        let dropped = open_pin(layout, CONN_EVENTS_DROPPED)?;
        let dropped = PerCpuArray::try_from(dropped).context(CONN_EVENTS_DROPPED)?;
        Ok(Self { ring, dropped })
    }

    /// How many records of each kind the programs did not write since the
    /// map was created, summed over CPUs.
    pub fn dropped(&self) -> anyhow::Result<[(EventKind, u64); EventKind::ALL.len()]> {
        let mut out = EventKind::ALL.map(|kind| (kind, 0));
        for (kind, n) in &mut out {
            let per_cpu = (self.dropped.get(&(*kind as u32), 0))
                .with_context(|| format!("reading {CONN_EVENTS_DROPPED}"))?;
            *n = per_cpu.iter().sum();
        }
        Ok(out)
    }

    /// Waits until records are there, then appends up to `max` of them to
    /// `out`. The programs wake the agent only once the ring is a quarter
    /// full; below that, records are found by a look every [`POLL`].
    pub async fn read(&mut self, out: &mut Vec<Event>, max: usize) -> anyhow::Result<()> {
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
fn take(ring: &mut RingBuf<MapData>, out: &mut Vec<Event>, max: usize) -> usize {
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

/// One record, by its length: an IPv4 or an IPv6 one; `None` for any
/// other length (a truncated record, or a kind this build does not know).
fn decode(bytes: &[u8]) -> Option<Event> {
    match bytes.len() {
        n if n == size_of::<ConnEvent>() => read::<ConnEvent>(bytes).map(Event::V4),
        n if n == size_of::<ConnEvent6>() => read::<ConnEvent6>(bytes).map(Event::V6),
        _ => None,
    }
}

/// A `T` out of the first bytes of `bytes`, if they hold one.
fn read<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: `T: Pod` is plain integers (any bit pattern is valid), and
    // the slice holds at least one; it may be unaligned.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::Ipv6Addr;

    use ssh_fwd_common::maps::{ConnStats, Endpoint6};

    #[test]
    fn a_short_record_is_skipped() {
        assert_eq!(decode(&[0; 79]), None);
        let mut bytes = [0u8; 80];
        bytes[0] = 7;
        bytes[32] = 1; // slot
        let Some(Event::V4(event)) = decode(&bytes) else {
            panic!("a whole IPv4 record");
        };
        assert_eq!((event.time_ns, event.slot), (7, 1));
    }

    #[test]
    fn a_record_of_128_bytes_is_an_ipv6_one_and_any_other_length_is_skipped() {
        let ip = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let event = ConnEvent6 {
            time_ns: 9,
            created_ns: 3,
            client: Endpoint6::new6(ip("2001:db8:1::2"), 45_678),
            frontend: Endpoint6::new6(ip("2001:db8::10"), 8022),
            backend: Endpoint6::new6(ip("fd00::5"), 22),
            slot: 4,
            kind: 1,
            ended: 0,
            _pad: 0,
            stats: ConnStats::default(),
        };
        // SAFETY: `ConnEvent6` is 128 bytes of integers without implicit
        // padding (asserted in ssh-fwd-common): its bytes are initialised.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(event) };
        let Some(Event::V6(read)) = decode(&bytes) else {
            panic!("an IPv6 record");
        };
        assert_eq!(read, event);
        assert_eq!(read.frontend.ip6(), ip("2001:db8::10"));
        assert_eq!(read.client.port(), 45_678);
        assert_eq!(decode(&bytes[..127]), None);
        assert_eq!(decode(&[0; 96]), None);
    }
}
