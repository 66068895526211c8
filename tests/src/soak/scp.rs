//! Periodic copies with real scp: random bytes up to a job and back down,
//! each side's SHA-256 compared with the original's. The job's sshd writes
//! where the soak reads (a pod here shares the host's files), so the
//! upload is checked on arrival and the download on return.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use super::run::{Attempt, Run};
use crate::{cmd, flood::Rng, ssh::NON_INTERACTIVE, topology::EXTERNAL_IP};

/// Copies `mib` MiB each way every `every` until the soak stops.
pub fn keep(run: &Run<'_>, every: Duration, mib: u64) {
    let mut rng = Rng::new(run.seed ^ 0x5c9);
    let mut n = 0u64;
    while run.pause(every) {
        n += 1;
        let Some(target) = run.any_target(&mut rng) else {
            continue;
        };
        let at = run.now();
        let result = copy(run, n, target.port, mib);
        let job_ended = result.is_err() && run.ended(&target);
        let mut records = run.records();
        match &result {
            Ok(Some(differed)) => records.scp_differed.push((at, differed.clone())),
            Ok(None) => records.scp_bytes += 2 * (mib << 20),
            Err(_) => {}
        }
        records.scp.push(Attempt {
            at,
            result: result.map(drop),
            job_ended,
        });
    }
}

/// One copy each way: `Ok(None)` if all three checksums agree,
/// `Ok(Some(what))` if one differs, `Err` if a copy failed.
fn copy(run: &Run<'_>, n: u64, port: u16, mib: u64) -> Result<Option<String>, String> {
    let dir = &run.dir;
    let (data, remote, back) = (
        dir.join(format!("scp-{n}.bin")),
        dir.join(format!("scp-{n}.remote")),
        dir.join(format!("scp-{n}.back")),
    );
    let result = (|| {
        cmd::run(
            Command::new("head")
                .args(["-c", &format!("{mib}M"), "/dev/urandom"])
                .stdout(std::fs::File::create(&data).map_err(|e| e.to_string())?),
        )
        .map_err(|e| e.to_string())?;
        let sent = sha256(&data)?;
        scp(
            run,
            port,
            &data.display().to_string(),
            &format!("root@{EXTERNAL_IP}:{}", remote.display()),
        )?;
        let arrived = sha256(&remote)?;
        scp(
            run,
            port,
            &format!("root@{EXTERNAL_IP}:{}", remote.display()),
            &back.display().to_string(),
        )?;
        let returned = sha256(&back)?;
        Ok((sent != arrived || sent != returned)
            .then(|| format!("sent {sent}, arrived {arrived}, came back {returned}")))
    })();
    for f in [&data, &remote, &back] {
        let _ = std::fs::remove_file(f);
    }
    result
}

fn scp(run: &Run<'_>, port: u16, from: &str, to: &str) -> Result<(), String> {
    let ssh = run.bed.seg.ssh();
    let out = run
        .bed
        .seg
        .client
        .command("timeout")
        .args(["--kill-after=2", "120", "scp", "-O", "-q", "-i"])
        .arg(ssh.key())
        .args(NON_INTERACTIVE)
        .args(["-P", &port.to_string(), from, to])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("spawning scp: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "scp {from} {to} through port {port}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

fn sha256(path: &Path) -> Result<String, String> {
    let out = cmd::run(Command::new("sha256sum").arg(path)).map_err(|e| e.to_string())?;
    Ok(out.get(..64).unwrap_or_default().to_owned())
}
