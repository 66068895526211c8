//! A real OpenSSH server in a pod namespace and a real client to reach it.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::{NetNs, cmd};

/// Keys shared by the server and the client of one test.
pub struct SshKeys {
    dir: tempfile::TempDir,
}

impl SshKeys {
    pub fn generate() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ssh-fwd-keys").tempdir()?;
        for name in ["client", "host"] {
            cmd::run(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", ""])
                    .arg("-f")
                    .arg(dir.path().join(name)),
            )?;
        }
        std::fs::copy(
            dir.path().join("client.pub"),
            dir.path().join("authorized_keys"),
        )?;
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn client(&self) -> SshClient {
        SshClient {
            key: self.dir.path().join("client"),
        }
    }
}

/// sshd running in a pod namespace with its own host name, so `ssh ...
/// hostname` tells which pod answered.
pub struct Sshd {
    child: Child,
}

impl Sshd {
    pub fn start(ns: &NetNs, hostname: &str, keys: &SshKeys) -> anyhow::Result<Self> {
        Self::start_with(
            ns,
            hostname,
            keys,
            &keys.dir().join("authorized_keys"),
            false,
        )
    }

    /// sshd reading `authorized` for root logins; with `strict`, it also
    /// checks the file's and its directories' modes and owners (StrictModes),
    /// as a production sshd does.
    pub fn start_with(
        ns: &NetNs,
        hostname: &str,
        keys: &SshKeys,
        authorized: &Path,
        strict: bool,
    ) -> anyhow::Result<Self> {
        Self::start_with_binds(ns, hostname, keys, authorized, strict, &[])
    }

    /// [`Sshd::start_with`] in a mount namespace of its own where each
    /// `(from, onto)` of `binds` is bind-mounted first, as the kubelet
    /// mounts volumes (a `subPath` is a bind mount) into a container.
    pub fn start_with_binds(
        ns: &NetNs,
        hostname: &str,
        keys: &SshKeys,
        authorized: &Path,
        strict: bool,
        binds: &[(&Path, &Path)],
    ) -> anyhow::Result<Self> {
        let dir = keys.dir();
        let config = dir.join(format!("sshd_config.{hostname}"));
        let home = login_home(dir)?;
        std::fs::write(
            &config,
            format!(
                "Port 22\nListenAddress 0.0.0.0\nListenAddress ::\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes {strict}\nPidFile none\n\
                 LogLevel ERROR\nClientAliveInterval 0\nSetEnv HOME={home}\n",
                host = dir.join("host").display(),
                auth = authorized.display(),
                strict = if strict { "yes" } else { "no" },
                home = home.display(),
            ),
        )?;
        // sshd refuses to start without its privilege-separation directory.
        std::fs::create_dir_all("/run/sshd")?;
        let sshd = crate::privilege::which("sshd").context("sshd not installed")?;
        let mounts: String = binds
            .iter()
            .map(|(from, onto)| {
                format!("mount --bind '{}' '{}' && ", from.display(), onto.display())
            })
            .collect();
        let script = format!(
            "{mounts}hostname {hostname} && exec {} -D -e -f {}",
            sshd.display(),
            config.display()
        );
        // A mount namespace of its own (private: nothing leaks out) only
        // when there is something to mount.
        let namespaces: &[&str] = if binds.is_empty() {
            &["--uts"]
        } else {
            &["--uts", "--mount"]
        };
        let child = ns
            .command("unshare")
            .args(namespaces)
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting sshd")?;
        let sshd = Self { child };
        let listening = cmd::wait_until(Duration::from_secs(10), || {
            cmd::run(ns.command("ss").args(["-Hltn", "sport = :22"]))
                .is_ok_and(|o| !o.trim().is_empty())
        });
        if !listening {
            bail!(
                "sshd in {} did not start listening on port 22 within 10 s",
                ns.name()
            );
        }
        Ok(sshd)
    }
}

impl Sshd {
    /// SIGTERM to the listener alone: it stops accepting, and the
    /// sessions it forked (each in a session of its own) go on.
    pub fn stop_listening(&self) {
        // SAFETY: signalling our own child (sshd, which `sh` exec'd).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// Kills a child's whole process group (sshd forks per session) and reaps it.
pub fn kill_group(child: &mut Child) {
    // SAFETY: signalling a process group we created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// The home a login's shell starts in, empty, so that the host's own
/// start-up files stay out of every login: Debian's bash reads `~/.bashrc`
/// for a command sshd runs, and a root `.bashrc` that runs `pyenv init`
/// takes pyenv's rehash lock. A session killed with its sshd (see
/// [`kill_group`]) while holding it left the lock behind, and every later
/// login on the machine waited 60 s for it.
fn login_home(dir: &Path) -> anyhow::Result<PathBuf> {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
    Ok(home)
}

/// No prompts, no host-key checks, errors only, bounded connect.
/// How long one ssh command may take, login included.
const LOGIN_LIMIT: Duration = Duration::from_secs(20);

/// `timeout`'s limit: `limit` stretched for a slow machine
/// ([`cmd::scaled`]). Under emulation a login alone (key exchange, then the
/// remote shell's start-up files) takes longer than 20 s.
fn seconds(limit: Duration) -> String {
    cmd::scaled(limit).as_secs().max(1).to_string()
}

pub const NON_INTERACTIVE: [&str; 10] = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=5",
];

/// The OpenSSH client with the test key and no host-key prompts.
#[derive(Clone)]
pub struct SshClient {
    key: PathBuf,
}

impl SshClient {
    /// A client using the private key at `key`.
    pub fn with_key(key: PathBuf) -> Self {
        Self { key }
    }

    /// The private key it logs in with.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// `ssh -p PORT root@HOST REMOTE` from inside `ns`, bounded by `limit`.
    pub fn command(
        &self,
        ns: &NetNs,
        host: &str,
        port: u16,
        remote: &str,
        limit: Duration,
    ) -> Command {
        let mut c = ns.command("timeout");
        c.args(["--kill-after=2", &seconds(limit), "ssh"])
            .arg("-i")
            .arg(&self.key)
            .args(NON_INTERACTIVE)
            .args(["-p", &port.to_string(), &format!("root@{host}"), remote]);
        c
    }

    /// Runs an ssh command line as a user would paste it (`ssh USER@HOST -p
    /// PORT`), with only the test key and non-interactive options added, and
    /// returns the trimmed stdout of `remote`.
    pub fn run_pasted(&self, ns: &NetNs, pasted: &str, remote: &str) -> anyhow::Result<String> {
        let words: Vec<&str> = pasted.split_whitespace().collect();
        let Some((&"ssh", destination)) = words.split_first() else {
            anyhow::bail!("`{pasted}` is not an ssh command line");
        };
        let mut c = ns.command("timeout");
        c.args(["--kill-after=2", &seconds(LOGIN_LIMIT), "ssh", "-i"])
            .arg(&self.key)
            .args(NON_INTERACTIVE)
            .args(destination)
            .arg(remote)
            .stdin(Stdio::null());
        let out = cmd::run(&mut c).with_context(|| format!("{pasted} {remote}"))?;
        Ok(out.trim().to_owned())
    }

    /// Runs `remote` from inside `ns` as a member of `cgroup` (where the
    /// hairpin programs are), with the client's verbose log, and returns
    /// the trimmed stdout and the stderr (which names the address the
    /// client believes it is connected to: `Authenticated to HOST
    /// ([IP]:PORT)`, from getpeername).
    pub fn run_in_cgroup(
        &self,
        cgroup: &crate::TestCgroup,
        ns: &NetNs,
        host: &str,
        port: u16,
        remote: &str,
    ) -> anyhow::Result<(String, String)> {
        let mut c = cgroup.command(Some(ns), "timeout");
        // The first LogLevel given wins over NON_INTERACTIVE's.
        c.args([
            "--kill-after=2",
            &seconds(LOGIN_LIMIT),
            "ssh",
            "-o",
            "LogLevel=VERBOSE",
            "-i",
        ])
        .arg(&self.key)
        .args(NON_INTERACTIVE)
        .args(["-p", &port.to_string(), &format!("root@{host}"), remote])
        .stdin(Stdio::null());
        let out = c.output().context("spawning ssh")?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            bail!(
                "ssh -p {port} root@{host} from {} failed ({}): {stderr}",
                ns.name(),
                out.status
            );
        }
        Ok((
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            stderr,
        ))
    }

    /// Runs `remote` and returns its trimmed stdout.
    pub fn run(&self, ns: &NetNs, host: &str, port: u16, remote: &str) -> anyhow::Result<String> {
        let out = cmd::run(
            self.command(ns, host, port, remote, LOGIN_LIMIT)
                .stdin(Stdio::null()),
        )
        .with_context(|| format!("ssh -p {port} root@{host} {remote}"))?;
        Ok(out.trim().to_owned())
    }
}
