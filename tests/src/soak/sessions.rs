//! Long sessions: `ssh ... cat` to a job, a numbered line a second, every
//! echo checked in order, byte for byte. A session that exits, or whose
//! oldest line is not back within [`ECHO_DEADLINE`], broke; one whose echo
//! differs broke too, and its differing bytes count as corrupted.

use std::{
    collections::VecDeque,
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use super::{
    run::{Attempt, Run, Target},
    tally::SessionEnd,
};
use crate::{flood::Rng, topology::EXTERNAL_IP};

/// How long a line may take to come back: past any failover the soak
/// makes and the TCP retransmissions after it.
pub const ECHO_DEADLINE: Duration = Duration::from_secs(20);
/// How long an ended session's last lines may take to come back.
const DRAIN: Duration = Duration::from_secs(10);

/// Keeps session number `id` open on slot `slot`'s job until the soak
/// stops: a session that ends with its job, or breaks, is replaced by a
/// new one.
pub fn keep(run: &Run<'_>, id: usize, slot: usize) {
    let mut rng = Rng::new(run.seed ^ ((id as u64 + 1) * 0x9e37_79b9));
    // Bounded: at most one session opened a second.
    while !run.stopped() {
        let Some(target) = run.target(slot) else {
            run.pause(Duration::from_millis(200));
            continue;
        };
        let at = run.now();
        match open(run, &target) {
            Ok(session) => {
                let end = session.talk(run, &target, id, &mut rng);
                run.records().sessions.push(end);
                target
                    .talking
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(why) => {
                let job_ended = run.ended(&target);
                run.records().session_opens.push(Attempt {
                    at,
                    result: Err(why),
                    job_ended,
                });
            }
        }
        run.pause(Duration::from_secs(1));
    }
}

struct Session {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
}

/// Opens a session to `target`, counted in its `talking` once open.
fn open(run: &Run<'_>, target: &Target) -> Result<Session, String> {
    let session = open_checked(run, target)?;
    target
        .talking
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(session)
}

fn open_checked(run: &Run<'_>, target: &Target) -> Result<Session, String> {
    let ssh = run.bed.seg.ssh();
    let mut child = ssh
        .command(
            &run.bed.seg.client,
            EXTERNAL_IP,
            target.port,
            "cat",
            Duration::from_secs(24 * 3600),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning ssh: {e}"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("ssh without pipes".into());
    };
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut session = Session {
        child,
        stdin,
        lines,
    };
    // The first echo proves the login.
    session.send("hello").map_err(|e| format!("writing: {e}"))?;
    match session.lines.recv_timeout(Duration::from_secs(15)) {
        Ok(l) if l == "hello" => Ok(session),
        Ok(l) => Err(format!("first echo {l:?}")),
        Err(_) => Err("no first echo within 15 s".into()),
    }
}

impl Session {
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()
    }

    /// Sends a line a second and checks every echo until the soak stops,
    /// the job ends or the session breaks.
    fn talk(mut self, run: &Run<'_>, target: &Target, id: usize, rng: &mut Rng) -> SessionEnd {
        let mut pending: VecDeque<(Instant, Duration, String)> = VecDeque::new();
        let mut seq = 0u64;
        let mut next = Instant::now();
        let ending = loop {
            if run.stopped() {
                break SessionEnd::AtStop;
            }
            if target.ending.load(std::sync::atomic::Ordering::Relaxed) {
                break SessionEnd::JobEnded;
            }
            if Instant::now() >= next {
                seq += 1;
                let line = numbered(id, seq, rng);
                if let Err(e) = self.send(&line) {
                    return self.broke(
                        pending.front().map_or(run.now(), |p| p.1),
                        format!("writing line {seq}: {e}"),
                    );
                }
                pending.push_back((Instant::now(), run.now(), line));
                next += Duration::from_secs(1);
            }
            if let Some(end) = self.check(run, &mut pending, next) {
                return end;
            }
        };
        // Let the lines in flight come back, then close.
        let drained = Instant::now() + DRAIN;
        while !pending.is_empty() && Instant::now() < drained {
            if let Some(end) = self.check(
                run,
                &mut pending,
                Instant::now() + Duration::from_millis(200),
            ) {
                return end;
            }
        }
        if let Some((_, at, line)) = pending.front() {
            let why = format!(
                "line {:?} not echoed within {DRAIN:?} of the end",
                &line[..12]
            );
            return self.broke(*at, why);
        }
        self.close();
        ending
    }

    /// Takes the echoes that arrive until `until`; a session end if one
    /// differs, the session exited, or the oldest line is overdue.
    fn check(
        &mut self,
        run: &Run<'_>,
        pending: &mut VecDeque<(Instant, Duration, String)>,
        until: Instant,
    ) -> Option<SessionEnd> {
        let wait = until.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait) {
            Ok(got) => {
                let Some((_, at, want)) = pending.pop_front() else {
                    return Some(self.broke(run.now(), format!("an echo nobody sent: {got:?}")));
                };
                if got == want {
                    run.records().bytes_checked += want.len() as u64 + 1;
                    None
                } else {
                    let differing = corrupted(&want, &got);
                    let mut r = run.records();
                    r.bytes_checked += want.len() as u64 + 1;
                    r.bytes_corrupted += differing;
                    drop(r);
                    Some(self.broke(
                        at,
                        format!("echo differs in {differing} bytes: sent {want:?}, got {got:?}"),
                    ))
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let at = pending.front().map_or(run.now(), |p| p.1);
                Some(self.broke(at, "ssh exited".into()))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let (sent, at, line) = pending.front()?;
                (sent.elapsed() > ECHO_DEADLINE).then(|| {
                    let why = format!("line {:?} not echoed within {ECHO_DEADLINE:?}", &line[..12]);
                    let at = *at;
                    self.broke(at, why)
                })
            }
        }
    }

    fn broke(&mut self, at: Duration, why: String) -> SessionEnd {
        self.close();
        SessionEnd::Broke { at, why }
    }

    fn close(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Line `seq` of session `id`: its numbers, then 64 characters drawn from
/// `rng`, so a byte moved or changed anywhere shows.
fn numbered(id: usize, seq: u64, rng: &mut Rng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let payload: String = (0..64)
        .map(|_| char::from(ALPHABET[(rng.draw() % 64) as usize]))
        .collect();
    format!("s{id:03}-{seq:06} {payload}")
}

/// Bytes that differ between what was sent and what came back, a length
/// difference counted whole.
pub fn corrupted(sent: &str, got: &str) -> u64 {
    let (a, b) = (sent.as_bytes(), got.as_bytes());
    let differing = a.iter().zip(b).filter(|(x, y)| x != y).count();
    (differing + a.len().abs_diff(b.len())) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_bytes_count_changes_and_missing_or_extra_bytes() {
        assert_eq!(corrupted("abcdef", "abcdef"), 0);
        assert_eq!(corrupted("abcdef", "abXdeY"), 2);
        assert_eq!(corrupted("abcdef", "abc"), 3);
        assert_eq!(corrupted("abc", "abcde"), 2);
    }

    #[test]
    fn numbered_lines_carry_their_session_and_number_and_differ() {
        let mut rng = Rng::new(3);
        let a = numbered(7, 1, &mut rng);
        let b = numbered(7, 2, &mut rng);
        assert!(a.starts_with("s007-000001 ") && b.starts_with("s007-000002 "));
        assert_eq!(a.len(), 12 + 64);
        assert_ne!(a[12..], b[12..]);
    }
}
