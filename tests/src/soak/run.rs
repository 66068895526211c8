//! The state the soak's threads share: the bed, the jobs in their slots,
//! the clock, the stop flag, and what each thread records.

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    bed::Bed,
    jobs::Job,
    tally::{SessionEnd, Window},
};
use crate::flood::Rng;

/// A place for one job at a time; churn ends its job and starts another.
#[derive(Default)]
pub struct Slot {
    pub job: Option<Job>,
    /// Set while the test ends the job: its sessions close, and new
    /// logins to it count as ended by the test.
    pub ending: Arc<AtomicBool>,
    /// Sessions open on the job now; the test ends it once they closed.
    pub talking: Arc<std::sync::atomic::AtomicUsize>,
}

/// A job as a load thread aims at it.
#[derive(Clone)]
pub struct Target {
    pub slot: usize,
    pub name: String,
    pub port: u16,
    pub hostname: String,
    /// The node its pod runs on.
    pub node: usize,
    pub ending: Arc<AtomicBool>,
    pub talking: Arc<std::sync::atomic::AtomicUsize>,
}

/// One login, scp or session open: when it started and how it went.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub at: Duration,
    pub result: Result<(), String>,
    /// The test ended the job before it finished.
    pub job_ended: bool,
}

/// What the threads record.
#[derive(Default)]
pub struct Records {
    pub sessions: Vec<SessionEnd>,
    pub session_opens: Vec<Attempt>,
    pub bytes_checked: u64,
    pub bytes_corrupted: u64,
    pub logins: Vec<Attempt>,
    pub scp: Vec<Attempt>,
    pub scp_bytes: u64,
    /// Copies whose checksum differed, with what was compared.
    pub scp_differed: Vec<(Duration, String)>,
    pub windows: Vec<Window>,
    /// What each fault did, in order (`t`, text).
    pub notes: Vec<(Duration, String)>,
    /// Faults that could not be carried out or undone.
    pub fault_errors: Vec<(Duration, String)>,
    pub flood_sent: u64,
    pub hammer: Hammer,
    pub jobs_started: u64,
    pub jobs_ended: u64,
    pub churn_errors: Vec<(Duration, String)>,
}

/// The per-source hammer's tally.
#[derive(Default, Debug)]
pub struct Hammer {
    pub cycles: u64,
    pub admitted: u64,
    /// Connections without a banner while the hammer held fewer than the
    /// quota.
    pub refused_below_quota: Vec<Refusal>,
    /// Connections over the quota that were held back, as they should.
    pub held_at_quota: u64,
    /// Connections over the quota that got a banner all the same.
    pub admitted_over_quota: u64,
}

/// A connection of the hammer's that got no banner under the quota.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub at: Duration,
    /// How many connections the hammer held then.
    pub held: usize,
    /// What the kernel of the pod's node counted for the hammer then and
    /// held open (`None`: not read).
    pub kernel: Option<super::tables::Client>,
    pub how: Refused,
}

/// How a connection of the hammer's failed: which side stopped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The handshake did not complete: the SYN was held back or lost on
    /// the way (the quota's doing, or a defect).
    Handshake(String),
    /// The handshake completed and sshd closed the connection before its
    /// banner (an end of file): sshd's own limit on unauthenticated
    /// connections (MaxStartups, 10:30:100 by default), which the
    /// hammer's round and the logins can reach on one job. Not the data
    /// path's doing: it drops, or the pod's kernel resets.
    ClosedBySshd,
    /// The handshake completed and the connection was reset before the
    /// banner.
    Reset,
    /// The handshake completed and no banner arrived in time: the data
    /// path lost what followed it, or sshd was slow.
    Silent,
}

pub struct Run<'a> {
    pub bed: &'a Bed,
    pub t0: Instant,
    pub stop: AtomicBool,
    pub slots: Vec<Mutex<Slot>>,
    pub records: Mutex<Records>,
    pub seed: u64,
    /// The directory for the soak's files (scp data, logs).
    pub dir: std::path::PathBuf,
}

impl<'a> Run<'a> {
    pub fn new(bed: &'a Bed, slots: usize, seed: u64, dir: &std::path::Path) -> Self {
        Self {
            bed,
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            slots: (0..slots).map(|_| Mutex::default()).collect(),
            records: Mutex::default(),
            seed,
            dir: dir.to_owned(),
        }
    }

    /// Time since the load started.
    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn slot(&self, n: usize) -> MutexGuard<'_, Slot> {
        self.slots[n].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slot `n`'s job, unless it is starting or ending.
    pub fn target(&self, n: usize) -> Option<Target> {
        let slot = self.slot(n);
        let job = slot.job.as_ref()?;
        if slot.ending.load(Ordering::Relaxed) {
            return None;
        }
        Some(Target {
            slot: n,
            name: job.name.clone(),
            port: job.port,
            hostname: job.hostname().to_owned(),
            node: job.pod.node,
            ending: slot.ending.clone(),
            talking: slot.talking.clone(),
        })
    }

    /// A running job drawn from `rng`.
    pub fn any_target(&self, rng: &mut Rng) -> Option<Target> {
        let n = self.slots.len();
        let first = (rng.draw() % n as u64) as usize;
        (0..n).find_map(|i| self.target((first + i) % n))
    }

    /// Whether the test ended (or is ending) `target`'s job.
    pub fn ended(&self, target: &Target) -> bool {
        target.ending.load(Ordering::Relaxed)
            || self.slot(target.slot).job.as_ref().map(|j| j.name.as_str()) != Some(&target.name)
    }

    /// Sleeps `d`, in steps, returning early (false) once the soak stops.
    pub fn pause(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.stopped() {
                return false;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        !self.stopped()
    }
}
