//! New logins at a steady rate, each running a command whose output is
//! checked: a number only this login knows, and the job's host name.

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use super::run::{Attempt, Run};
use crate::{flood::Rng, topology::EXTERNAL_IP};

/// Logs in `per_second` times a second (spread over `workers` threads
/// calling this, worker `worker` of them) until the soak stops.
pub fn keep(run: &Run<'_>, worker: u64, workers: u64, per_second: f64) {
    let mut rng = Rng::new(run.seed ^ 0x1091_0000 ^ worker);
    let every = Duration::from_secs_f64(workers as f64 / per_second.max(0.01));
    let mut next = Instant::now() + every.mul_f64(worker as f64 / workers as f64);
    let mut n = 0u64;
    while !run.stopped() {
        run.pause(next.saturating_duration_since(Instant::now()));
        if run.stopped() {
            break;
        }
        next = (next + every).max(Instant::now());
        n += 1;
        let Some(target) = run.any_target(&mut rng) else {
            continue;
        };
        let at = run.now();
        let token = format!("L{worker}-{n}-{}", rng.draw() % 1_000_000);
        let result = login(run, target.port, &token, &target.hostname);
        let job_ended = result.is_err() && run.ended(&target);
        run.records().logins.push(Attempt {
            at,
            result,
            job_ended,
        });
    }
}

/// `ssh -p PORT root@SSH_IP 'echo TOKEN; hostname'`, checked.
fn login(run: &Run<'_>, port: u16, token: &str, hostname: &str) -> Result<(), String> {
    let out = run
        .bed
        .seg
        .ssh()
        .command(
            &run.bed.seg.client,
            EXTERNAL_IP,
            port,
            &format!("echo {token}; hostname"),
            Duration::from_secs(15),
        )
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("spawning ssh: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("{token}\n{hostname}\n");
    if out.status.success() && stdout == want {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "port {port}: {} stdout {stdout:?} (want {want:?}) stderr {:?}",
        out.status,
        stderr.trim()
    ))
}
