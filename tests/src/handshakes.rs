//! A client that attacks with its own, real address: it sends SYNs from a
//! raw socket, sees the SYN-ACKs come back, and answers each with an ACK it
//! crafts (a wrong checksum, a TTL that expires on the way, or a valid one
//! followed by nothing). Its kernel's RSTs for those SYN-ACKs are dropped
//! by a firewall rule in its namespace, as a real attacker's would be.
//! Bounded in count and time; the traffic stays in the test's namespaces.

use std::{
    net::{Ipv4Addr, SocketAddrV4},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{
    NetNs, cmd,
    forge::{ACK, RawReceiver, RawSender, SYN, Segment},
};

/// How the attacker's ACK completing each handshake is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalAck {
    /// A wrong TCP checksum: the pod's TCP drops it. (A wrong IPv4 header
    /// checksum cannot be sent this way: the kernel fills it in for raw
    /// sockets, and any router on the way drops a wrong one.)
    BadTcpChecksum,
    /// Sent with this TTL: with 2 it reaches the node behind one router
    /// with a TTL of 1, which the node would not forward.
    Ttl(u8),
    /// A valid ACK, and nothing after it.
    Valid,
}

/// What one run sent and saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub syns: usize,
    pub syn_acks: usize,
    pub acks: usize,
}

/// Drops the RSTs `ns`'s kernel would send from `from` (for SYN-ACKs no
/// socket of its own asked for). Removed with the namespace.
pub fn suppress_rsts(ns: &NetNs, from: Ipv4Addr) -> anyhow::Result<()> {
    let rules = format!(
        "table ip sshfwd_attacker {{\n  chain out {{\n    type filter hook output priority 0; \
         policy accept;\n    ip saddr {from} tcp flags & rst == rst drop\n  }}\n}}\n"
    );
    let path = std::env::temp_dir().join(format!(
        "ssh-fwd-attacker-{}-{}.nft",
        std::process::id(),
        ns.name()
    ));
    std::fs::write(&path, rules).with_context(|| format!("writing {}", path.display()))?;
    let result = cmd::run(ns.command("nft").arg("-f").arg(&path));
    let _ = std::fs::remove_file(&path);
    result.map(|_| ())
}

/// The attacker's initial sequence number for its source port.
fn isn(port: u16) -> u32 {
    u32::from(port).wrapping_mul(2_654_435_761)
}

/// One run of handshakes.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// The attacker's own address (one of its namespace's).
    pub from: Ipv4Addr,
    pub to: SocketAddrV4,
    /// One source port a handshake, from this one up.
    pub first_port: u16,
    pub count: u16,
    /// SYNs per second, about.
    pub per_second: u32,
    pub ack: FinalAck,
    /// The run stops here, done or not.
    pub limit: Duration,
}

/// Opens the handshakes of `run` from `ns` and answers each SYN-ACK with
/// the ACK `run.ack` says.
pub fn complete(ns: &NetNs, run: &Run) -> anyhow::Result<Report> {
    let Run {
        from,
        to,
        first_port,
        count,
        per_second,
        ack,
        limit,
    } = *run;
    let sender = RawSender::open_in(ns)?;
    let receiver = RawReceiver::open_in(ns)?;
    let deadline = Instant::now() + limit;
    let last_port = first_port.checked_add(count).context("port range")?;
    let done = AtomicBool::new(false);
    let syn_acks = AtomicUsize::new(0);
    let acks = AtomicUsize::new(0);
    let syns = std::thread::scope(|s| -> anyhow::Result<usize> {
        let answering = s.spawn(|| -> anyhow::Result<()> {
            let mut answered = vec![false; usize::from(count)];
            while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
                let Some(seen) = receiver.next() else {
                    continue;
                };
                let port = seen.dst.port();
                let ours = *seen.dst.ip() == from
                    && seen.src == to
                    && seen.flags & (SYN | ACK) == SYN | ACK
                    && (first_port..last_port).contains(&port)
                    && seen.ack == isn(port).wrapping_add(1);
                if !ours {
                    continue;
                }
                syn_acks.fetch_add(1, Ordering::Relaxed);
                let slot = &mut answered[usize::from(port - first_port)];
                if *slot {
                    continue;
                }
                let mut reply = Segment::new(
                    SocketAddrV4::new(from, port),
                    to,
                    ACK,
                    isn(port).wrapping_add(1),
                    seen.seq.wrapping_add(1),
                );
                match ack {
                    FinalAck::BadTcpChecksum => reply.tcp_checksum_error = 0x5a5a,
                    FinalAck::Ttl(ttl) => reply.ttl = ttl,
                    FinalAck::Valid => {}
                }
                if sender.send(&reply)? {
                    *slot = true;
                    acks.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        let started = Instant::now();
        let mut sent = 0usize;
        for port in first_port..last_port {
            if Instant::now() > deadline {
                break;
            }
            let syn = Segment::new(SocketAddrV4::new(from, port), to, SYN, isn(port), 0);
            while !sender.send(&syn)? {
                std::thread::sleep(Duration::from_micros(100));
            }
            sent += 1;
            let due = started + Duration::from_secs_f64(sent as f64 / f64::from(per_second));
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        // The last SYN-ACKs are a round trip away.
        let settle = Instant::now() + Duration::from_secs(2);
        while Instant::now() < settle.min(deadline) && acks.load(Ordering::Relaxed) < sent {
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::Relaxed);
        answering
            .join()
            .map_err(|_| anyhow::anyhow!("the answering thread panicked"))??;
        Ok(sent)
    })?;
    Ok(Report {
        syns,
        syn_acks: syn_acks.load(Ordering::Relaxed),
        acks: acks.load(Ordering::Relaxed),
    })
}
