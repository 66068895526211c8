//! The two attackers of the soak: spoofed SYNs toward the SSH IP from the
//! client's namespace (`flood.rs`; the replies go to the forged sources,
//! which the nodes have no route to), and a real client at its own address
//! ([`super::bed::HAMMER_IP`]) that opens connections to the jobs of one
//! node (the quota counts what a client holds on a node) up to the
//! per-source quota, checks that each below it is served (sshd's banner
//! arrives) and the ones above it are held back, closes them all, and
//! starts again.

use std::{
    collections::VecDeque,
    io::{ErrorKind, Read as _},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    time::Duration,
};

use super::{
    bed::{CONNS_PER_SOURCE, FIRST_PORT, HAMMER_IP},
    run::{Refusal, Refused, Run},
    tables::Client,
};
use crate::{
    cmd,
    flood::{self, Rng, Syn},
    topology::EXTERNAL_IP,
};

/// Spoofed SYNs at `per_second` to the controller's port range until the
/// soak stops.
pub fn flood(run: &Run<'_>, per_second: u32, limit: Duration) {
    let mut rng = Rng::new(run.seed ^ 0xf100d);
    let dst: Ipv4Addr = EXTERNAL_IP.parse().unwrap_or(Ipv4Addr::LOCALHOST);
    let ports = run.slots.len() as u64 + 4;
    let syns = std::iter::from_fn(move || {
        Some(Syn {
            src: rng.address(),
            sport: 1024 + (rng.draw() % 60_000) as u16,
            dst,
            dport: FIRST_PORT + (rng.draw() % ports) as u16,
            seq: rng.draw() as u32,
        })
    });
    match flood::send_paced(&run.bed.seg.client, syns, per_second, &run.stop, limit) {
        Ok(sent) => run.records().flood_sent += sent as u64,
        Err(e) => run
            .records()
            .fault_errors
            .push((run.now(), format!("the flood: {e:#}"))),
    }
}

/// Hammers the quota from the hammer's namespace until the soak stops.
/// Each cycle holds a few under the quota and churns at that edge (one
/// opened, the oldest closed, [`EDGE_CHURN`] times: the confirmations and
/// closes race the agent's recount of the client), closes everything,
/// fills up to the quota, and checks that one more is held back: a count
/// the race left wrong shows as a connection held back under the quota.
pub fn hammer(run: &Run<'_>) {
    let path = run.bed.hammer.path();
    let entered = std::fs::File::open(&path).map(|f| {
        use std::os::fd::AsRawFd as _;
        // SAFETY: a valid namespace fd; CLONE_NEWNET affects only this thread.
        unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) == 0 }
    });
    if !matches!(entered, Ok(true)) {
        run.records()
            .fault_errors
            .push((run.now(), format!("the hammer cannot enter {path}")));
        return;
    }
    let mut rng = Rng::new(run.seed ^ 0x4a33e);
    while run.pause(Duration::from_millis(100)) {
        let targets: Vec<_> = (0..run.slots.len())
            .filter_map(|n| run.target(n))
            .filter(|t| t.node == HAMMERED_NODE)
            .collect();
        if targets.is_empty() {
            continue;
        }
        let mut cycle = Cycle {
            run,
            targets,
            next: rng.draw() as usize,
            held: VecDeque::new(),
        };
        cycle.run();
    }
}

/// The node whose jobs the hammer connects to.
const HAMMERED_NODE: usize = 0;
/// How far under the quota the hammer churns: room for closes the kernel
/// has not seen yet.
const EDGE: usize = 4;
/// Connections opened (and as many closed) at the edge each cycle.
const EDGE_CHURN: usize = 40;

struct Cycle<'r, 'a> {
    run: &'r Run<'a>,
    targets: Vec<super::run::Target>,
    next: usize,
    held: VecDeque<TcpStream>,
}

impl Cycle<'_, '_> {
    fn run(&mut self) {
        let quota = CONNS_PER_SOURCE as usize;
        while self.held.len() < quota - EDGE && !self.run.stopped() {
            if !self.open_under_quota() {
                break;
            }
        }
        for _ in 0..EDGE_CHURN {
            if self.run.stopped() {
                break;
            }
            self.open_under_quota();
            if self.held.len() >= quota - EDGE {
                self.held.pop_front();
            }
        }
        // Close everything, wait until the kernel has seen the closes
        // (every node counts nothing for the hammer), and fill up to the
        // quota at once: a count the churn left wrong (above what the
        // client holds, or below zero) holds one of these back. A count
        // that never comes back to zero ends the wait at its limit, and the
        // fill finds it.
        self.held.clear();
        let hammer = HAMMER_IP.parse().unwrap_or(Ipv4Addr::UNSPECIFIED);
        let bpffs = &self.run.bed.bpffs;
        cmd::wait_until(Duration::from_secs(5), || {
            bpffs
                .iter()
                .all(|b| Client::read(b.path(), hammer).is_ok_and(|c| c.counted == 0))
        });
        while self.held.len() < quota && !self.run.stopped() {
            if !self.open_under_quota() {
                break;
            }
        }
        if self.held.len() == quota {
            let (_, over) = self.open(Duration::from_secs(1));
            let mut r = self.run.records();
            match over {
                Ok(s) => {
                    r.hammer.admitted_over_quota += 1;
                    self.held.push_back(s);
                }
                Err(_) => r.hammer.held_at_quota += 1,
            }
        }
        self.held.clear();
        self.run.records().hammer.cycles += 1;
    }

    /// One more connection while the hammer holds fewer than the quota:
    /// it must be served. False if it was not.
    fn open_under_quota(&mut self) -> bool {
        let at = self.run.now();
        let (target, got) = self.open(Duration::from_secs(2));
        match got {
            Ok(s) => {
                self.run.records().hammer.admitted += 1;
                self.held.push_back(s);
                true
            }
            Err(how) => {
                if !self.run.ended(&target) {
                    let root = self.run.bed.bpffs[target.node].path();
                    let kernel =
                        Client::read(root, HAMMER_IP.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)).ok();
                    let held = self.held.len();
                    self.run.records().hammer.refused_below_quota.push(Refusal {
                        at,
                        held,
                        kernel,
                        how,
                    });
                }
                false
            }
        }
    }

    /// A connection to the next job in turn, kept if sshd's banner arrives
    /// within `wait`.
    fn open(&mut self, wait: Duration) -> (super::run::Target, Result<TcpStream, Refused>) {
        self.next += 1;
        let target = self.targets[self.next % self.targets.len()].clone();
        let got = open(target.port, wait);
        (target, got)
    }
}

/// A connection that got sshd's banner, kept open, or how it failed.
fn open(port: u16, wait: Duration) -> Result<TcpStream, Refused> {
    let to = SocketAddr::from((
        EXTERNAL_IP
            .parse::<Ipv4Addr>()
            .unwrap_or(Ipv4Addr::LOCALHOST),
        port,
    ));
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2))
        .map_err(|e| Refused::Handshake(e.kind().to_string()))?;
    s.set_read_timeout(Some(wait))
        .map_err(|e| Refused::Handshake(e.to_string()))?;
    let mut first = [0u8; 4];
    match s.read_exact(&mut first) {
        Ok(()) if &first == b"SSH-" => Ok(s),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Err(Refused::Silent)
        }
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Err(Refused::ClosedBySshd),
        // A reset before the banner, or something else than one.
        _ => Err(Refused::Reset),
    }
}
