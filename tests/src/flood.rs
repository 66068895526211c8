//! An off-path attacker: TCP SYNs (or bare ACKs) with forged source
//! addresses and ports, sent from a raw socket inside one of the test's
//! namespaces, as fast as the kernel takes them, bounded in count and
//! time. What the attacker never gets is the replies: those go to the
//! forged sources.

use std::{
    net::Ipv4Addr,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::NetNs;

/// One forged SYN.
#[derive(Clone, Copy, Debug)]
pub struct Syn {
    pub src: Ipv4Addr,
    pub sport: u16,
    pub dst: Ipv4Addr,
    pub dport: u16,
    pub seq: u32,
}

impl Syn {
    /// The same segment with only ACK set, acknowledging `ack`: the last
    /// segment of a handshake that never happened.
    pub fn ack(self, ack: u32) -> Forged {
        Forged {
            syn: self,
            flags: 0x10,
            ack,
        }
    }
}

/// A forged segment: a SYN's fields with other flags.
#[derive(Clone, Copy, Debug)]
pub struct Forged {
    syn: Syn,
    flags: u8,
    ack: u32,
}

impl From<Syn> for Forged {
    fn from(syn: Syn) -> Self {
        Self {
            syn,
            flags: 0x02,
            ack: 0,
        }
    }
}

impl Forged {
    /// The IPv4 and TCP headers, checksums computed.
    fn bytes(&self) -> [u8; 40] {
        let Self { syn: s, flags, ack } = *self;
        let s = &s;
        let mut p = [0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&s.src.octets());
        p[16..20].copy_from_slice(&s.dst.octets());
        let ip_check = checksum(&p[..20], 0);
        p[10..12].copy_from_slice(&ip_check.to_be_bytes());
        let tcp = &mut p[20..];
        tcp[0..2].copy_from_slice(&s.sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&s.dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&s.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&ack.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&64_240u16.to_be_bytes());
        let pseudo: u32 = [s.src.octets(), s.dst.octets()]
            .iter()
            .flat_map(|a| {
                [
                    u16::from_be_bytes([a[0], a[1]]),
                    u16::from_be_bytes([a[2], a[3]]),
                ]
            })
            .map(u32::from)
            .sum::<u32>()
            + 6
            + 20;
        let tcp_check = checksum(tcp, pseudo);
        tcp[16..18].copy_from_slice(&tcp_check.to_be_bytes());
        p
    }
}

/// The Internet checksum of `data` (big-endian words) plus `sum`.
fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for pair in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends every SYN of `syns` from `ns`, stopping early after `limit`.
/// Returns how many were sent.
pub fn send(ns: &NetNs, syns: Vec<Syn>, limit: Duration) -> anyhow::Result<usize> {
    let never = AtomicBool::new(false);
    send_at(ns, syns.into_iter().map(Forged::from), None, &never, limit)
}

/// Sends the SYNs of `syns` from `ns` at about `per_second` a second,
/// until `stop` is set, `syns` ends or `limit` passes. Returns how many
/// were sent.
pub fn send_paced<T: Into<Forged>>(
    ns: &NetNs,
    syns: impl Iterator<Item = T> + Send,
    per_second: u32,
    stop: &AtomicBool,
    limit: Duration,
) -> anyhow::Result<usize> {
    send_at(ns, syns.map(Into::into), Some(per_second), stop, limit)
}

fn send_at(
    ns: &NetNs,
    syns: impl Iterator<Item = Forged> + Send,
    per_second: Option<u32>,
    stop: &AtomicBool,
    limit: Duration,
) -> anyhow::Result<usize> {
    let path = ns.path();
    std::thread::scope(|s| {
        s.spawn(move || -> anyhow::Result<usize> {
            enter(&path)?;
            // SAFETY: a plain socket call; the fd is closed below.
            let fd = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_RAW,
                )
            };
            if fd < 0 {
                bail!("raw socket: {}", std::io::Error::last_os_error());
            }
            let started = Instant::now();
            let deadline = started + limit;
            let mut sent = 0;
            for (i, syn) in syns.enumerate() {
                if i % 1024 == 0 && (Instant::now() > deadline || stop.load(Ordering::Relaxed)) {
                    break;
                }
                if let Some(rate) = per_second
                    && i % 64 == 0
                {
                    let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate));
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                let bytes = syn.bytes();
                let to = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: 0,
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(syn.syn.dst.octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: `bytes` and `to` outlive the call; sizes are theirs.
                let n = unsafe {
                    libc::sendto(
                        fd,
                        bytes.as_ptr().cast(),
                        bytes.len(),
                        0,
                        (&raw const to).cast(),
                        size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    )
                };
                if n > 0 {
                    sent += 1;
                } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    // The queue is full: give it a moment rather than spin.
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            // SAFETY: our own fd.
            unsafe { libc::close(fd) };
            Ok(sent)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the flood thread panicked"))?
    })
}

fn enter(path: &str) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
    // SAFETY: a valid namespace fd; CLONE_NEWNET affects only this thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("entering {path}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// A small xorshift generator, so a flood is the same every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn draw(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A unicast address outside the test's own networks.
    pub fn address(&mut self) -> Ipv4Addr {
        loop {
            let a = Ipv4Addr::from(self.draw() as u32);
            let first = a.octets()[0];
            if (1..224).contains(&first) && ![10, 127, 192, 198, 203].contains(&first) {
                return a;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_syns_and_acks_carry_valid_checksums() {
        let syn = Syn {
            src: Ipv4Addr::new(192, 0, 2, 2),
            sport: 40_000,
            dst: Ipv4Addr::new(198, 18, 0, 10),
            dport: 9022,
            seq: 7,
        };
        let pseudo: u32 = [192u32 << 8, 2 << 8 | 2, 198 << 8 | 18, 10, 6, 20]
            .iter()
            .sum();
        for (forged, flags) in [(Forged::from(syn), 0x02), (syn.ack(99), 0x10)] {
            let b = forged.bytes();
            assert_eq!(checksum(&b[..20], 0), 0, "IPv4 header");
            assert_eq!(checksum(&b[20..], pseudo), 0, "TCP");
            assert_eq!(b[33], flags);
        }
        assert_eq!(syn.ack(99).bytes()[28..32], 99u32.to_be_bytes());
    }
}
