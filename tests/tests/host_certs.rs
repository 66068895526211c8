//! Jobs' host certificates against real OpenSSH, in network namespaces:
//! a client whose known_hosts holds only the published
//! `@cert-authority [HOST]:*` line, with `StrictHostKeyChecking=yes`,
//! logs in to each job whose sshd loads what `ssh-fwd install-keys` (the
//! real binary) wrote from its host key Secret, with no prompt and no
//! change to known_hosts, job after job on one port; and refuses every
//! impostor with "Host key verification failed" before any
//! authentication reaches its sshd. Rotation: both CAs' certificates are
//! accepted while both lines are published, only the new one's after.
//!
//! Each job is an sshd in the pod namespace on the one address and port a
//! job holds (`POD:PORT`); the forwarder in front of it is the other
//! tests' subject: the trust here is between the client and sshd.

use std::{
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, SystemTime},
};

use ssh_fwd::{
    commands::install_keys::host_key::{CERT_FILE, KEY_FILE, SNIPPET_FILE},
    host_certs::{
        Ca, Subject, Validity,
        issue::issue,
        trust::{self, Previous},
    },
};
use ssh_fwd_tests::{NetNs, agent::binary, cmd, privilege, ssh::SshKeys, ssh::kill_group};

const HOST: &str = "ssh.example.org";
const POD: &str = "10.213.0.2";
const PORT: u16 = 20001;
const DAY: Duration = Duration::from_secs(86_400);

/// The client and the pod namespaces, a veth between them.
struct Net {
    client: NetNs,
    pod: NetNs,
}

impl Net {
    fn new() -> Self {
        let client = NetNs::new("hc-client").unwrap();
        let pod = NetNs::new("hc-pod").unwrap();
        client.veth("eth0", &pod, "eth0").unwrap();
        client
            .ip(&["addr", "add", "10.213.0.1/24", "dev", "eth0"])
            .unwrap();
        pod.ip(&["addr", "add", &format!("{POD}/24"), "dev", "eth0"])
            .unwrap();
        Self { client, pod }
    }
}

/// A job's host key and certificate as the controller issues them.
fn subject(pod: &str, principals: &[&str]) -> Subject {
    Subject {
        principals: principals.iter().map(|p| (*p).to_owned()).collect(),
        namespace: "jobs".into(),
        pod: pod.into(),
        uid: format!("uid-{pod}"),
        port: PORT,
    }
}

/// The per-pod Secret volume as the kubelet mounts it, written from an
/// issued pair.
fn secret_volume(root: &Path, name: &str, key: &str, cert: &str) -> PathBuf {
    let dir = root.join(format!("secret-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(KEY_FILE), key).unwrap();
    std::fs::write(dir.join(CERT_FILE), cert).unwrap();
    dir
}

/// Runs the real `install-keys` as the webhook's init container does, into
/// `keys_dir` (seen by the job at the same path here).
fn install(secret: &Path, keys_dir: &Path, authorized: &Path) {
    let out = Command::new(binary().unwrap())
        .args(["install-keys", "--source"])
        .arg(authorized)
        .arg("--host-key-source")
        .arg(secret)
        .arg("--mounted-at")
        .arg(keys_dir)
        .arg("--dir")
        .arg(keys_dir)
        .args(["--uid", "0", "--gid", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "install-keys failed: {stderr}");
}

/// How a job's sshd is told about its host key.
enum Load<'a> {
    /// `Include` of the installed snippet.
    Include(&'a Path),
    /// The snippet's two lines as `-o` options.
    Options(&'a Path),
    /// An impostor's own files: `HostKey` and, if any, `HostCertificate`.
    Files(&'a Path, Option<&'a Path>),
}

/// sshd in the pod namespace on `POD:PORT`, logging (VERBOSE) to a file.
struct JobSshd {
    child: Child,
    log: PathBuf,
}

impl JobSshd {
    fn start(net: &Net, root: &Path, name: &str, keys_dir: &Path, load: Load<'_>) -> Self {
        let config = root.join(format!("sshd_config.{name}"));
        let log = root.join(format!("sshd.{name}.log"));
        let mut text = format!(
            "Port {PORT}\nListenAddress {POD}\nAuthorizedKeysFile {}\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes yes\n\
             PidFile none\nLogLevel VERBOSE\n",
            keys_dir.join("authorized_keys").display()
        );
        let mut options = Vec::new();
        match load {
            Load::Include(snippet) => text = format!("Include {}\n{text}", snippet.display()),
            Load::Options(dir) => {
                options.push(format!("HostKey={}", dir.join(KEY_FILE).display()));
                options.push(format!("HostCertificate={}", dir.join(CERT_FILE).display()));
            }
            Load::Files(key, cert) => {
                text = format!("HostKey {}\n{text}", key.display());
                if let Some(cert) = cert {
                    text = format!("HostCertificate {}\n{text}", cert.display());
                }
            }
        }
        std::fs::write(&config, text).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let sshd = privilege::which("sshd").unwrap();
        let mut command = net.pod.command(&sshd.display().to_string());
        command.args(["-D", "-f"]).arg(&config).arg("-E").arg(&log);
        for option in &options {
            command.args(["-o", option]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let job = Self { child, log };
        let listening = cmd::wait_until(Duration::from_secs(10), || {
            cmd::run(
                net.pod
                    .command("ss")
                    .args(["-Hltn", &format!("sport = :{PORT}")]),
            )
            .is_ok_and(|o| !o.trim().is_empty())
        });
        assert!(listening, "sshd {name} never listened: {}", job.log_text());
        job
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for JobSshd {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// What the client saw: whether `echo in` ran, and its stderr. The client
/// types `ssh -p PORT root@HOST` as users do, HOST resolving to the pod in
/// a mount namespace of its own (its /etc/hosts bind-mounted).
fn connect(net: &Net, keys: &SshKeys, known_hosts: &Path) -> (bool, String) {
    let hosts = known_hosts.with_extension("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{POD} {HOST}\n")).unwrap();
    let out = net
        .client
        .command("unshare")
        .args([
            "--mount",
            "sh",
            "-c",
            "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
        ])
        .arg(&hosts)
        .args(["timeout", "--kill-after=2", "20", "ssh", "-i"])
        .arg(keys.dir().join("client"))
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-p",
            &PORT.to_string(),
            &format!("root@{HOST}"),
            "echo in",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success() && stdout.trim() == "in", stderr)
}

/// The client logs in with no prompt and leaves known_hosts as it was.
fn accepted(net: &Net, keys: &SshKeys, known_hosts: &Path, what: &str) {
    let before = std::fs::read(known_hosts).unwrap();
    let (ok, stderr) = connect(net, keys, known_hosts);
    assert!(ok, "{what}: the client did not log in: {stderr}");
    assert!(!stderr.contains("Warning"), "{what}: {stderr}");
    assert_eq!(
        std::fs::read(known_hosts).unwrap(),
        before,
        "{what}: known_hosts changed"
    );
}

/// The client refuses the host before authenticating: sshd never sees a
/// key offered.
fn refused(net: &Net, keys: &SshKeys, known_hosts: &Path, sshd: &JobSshd, what: &str) {
    let seen = sshd.log_text().len();
    let (ok, stderr) = connect(net, keys, known_hosts);
    assert!(!ok, "{what}: the client logged in");
    assert!(
        stderr.contains("Host key verification failed"),
        "{what}: {stderr}"
    );
    let log = sshd.log_text().split_off(seen);
    for trace in ["publickey", "Accepted", "Postponed"] {
        assert!(
            !log.contains(trace),
            "{what}: authentication reached sshd: {log}"
        );
    }
}

/// A keys directory as the pod's emptyDir gives it, and the client's key
/// authorized in a Secret volume beside it.
fn job_dirs(root: &Path, keys: &SshKeys, name: &str) -> (PathBuf, PathBuf) {
    let keys_dir = root.join(format!("keys-{name}"));
    std::fs::create_dir(&keys_dir).unwrap();
    std::fs::set_permissions(&keys_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let authorized = root.join(format!("authorized-{name}"));
    std::fs::copy(keys.dir().join("client.pub"), &authorized).unwrap();
    (keys_dir, authorized)
}

/// Under /run: every directory up to / is root's, as StrictModes and the
/// host key checks want.
fn root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ssh-fwd-host-certs")
        .tempdir_in("/run")
        .unwrap()
}

/// A job: its pair issued by `ca` for the published principals, installed
/// by install-keys, its sshd started with `load`'s form of the snippet.
fn job(net: &Net, root: &Path, keys: &SshKeys, ca: &Ca, name: &str, include: bool) -> JobSshd {
    let bound = Validity::new(30 * DAY).unwrap();
    let issued = issue(
        ca,
        &subject(name, &[HOST, POD]),
        SystemTime::now(),
        None,
        bound,
    )
    .unwrap();
    let secret = secret_volume(root, name, &issued.key, &issued.certificate);
    let (keys_dir, authorized) = job_dirs(root, keys, name);
    install(&secret, &keys_dir, &authorized);
    let load = if include {
        Load::Include(&keys_dir.join(SNIPPET_FILE))
    } else {
        Load::Options(&keys_dir)
    };
    // The snippet is what the job's sshd would include: it names the files.
    let snippet = std::fs::read_to_string(keys_dir.join(SNIPPET_FILE)).unwrap();
    assert!(snippet.contains(&format!(
        "HostCertificate {}",
        keys_dir.join(CERT_FILE).display()
    )));
    JobSshd::start(net, root, name, &keys_dir, load)
}

fn known_hosts(root: &Path, name: &str, content: &str) -> PathBuf {
    let path = root.join(format!("known_hosts.{name}"));
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn jobs_on_one_port_are_trusted_by_the_published_line_and_impostors_are_refused() {
    privilege::require();
    let net = Net::new();
    let root = root();
    let keys = SshKeys::generate().unwrap();
    let ca = Ca::generate("ssh-fwd host CA").unwrap();
    let published = trust::known_hosts(HOST, &ca.public_line(), None, SystemTime::now());
    assert_eq!(published.lines().count(), 1, "{published}");
    let kh = known_hosts(root.path(), "user", &published);

    // A job whose sshd includes the snippet.
    let first = job(&net, root.path(), &keys, &ca, "job-1", true);
    accepted(&net, &keys, &kh, "the first job (Include)");
    drop(first);
    // It ends; the next job gets the same port, with a new key.
    let second = job(&net, root.path(), &keys, &ca, "job-2", false);
    accepted(&net, &keys, &kh, "the next job on the port (-o options)");
    drop(second);

    // Impostors on the port.
    let impostor = |name: &str, key: &Path, cert: Option<&Path>| {
        let (keys_dir, _) = job_dirs(root.path(), &keys, name);
        std::fs::copy(
            keys.dir().join("client.pub"),
            keys_dir.join("authorized_keys"),
        )
        .unwrap();
        std::fs::set_permissions(&keys_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        JobSshd::start(&net, root.path(), name, &keys_dir, Load::Files(key, cert))
    };
    let write_pair = |name: &str, issued: &ssh_fwd::host_certs::Issued| {
        let dir = secret_volume(root.path(), name, &issued.key, &issued.certificate);
        for file in [KEY_FILE, CERT_FILE] {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        dir
    };
    let bound = Validity::new(30 * DAY).unwrap();
    let now = SystemTime::now();

    // A plain host key, no certificate.
    let plain = impostor("plain", &keys.dir().join("host"), None);
    refused(&net, &keys, &kh, &plain, "a plain host key");
    drop(plain);

    // A certificate from another CA.
    let other_ca = Ca::generate("someone else's CA").unwrap();
    let theirs = issue(&other_ca, &subject("x", &[HOST, POD]), now, None, bound).unwrap();
    let dir = write_pair("other-ca", &theirs);
    let sshd = impostor("other-ca", &dir.join(KEY_FILE), Some(&dir.join(CERT_FILE)));
    refused(&net, &keys, &kh, &sshd, "a certificate from another CA");
    drop(sshd);

    // Our CA's, for another host.
    let elsewhere = issue(
        &ca,
        &subject("y", &["other.example.org", "10.9.9.9"]),
        now,
        None,
        bound,
    )
    .unwrap();
    let dir = write_pair("principals", &elsewhere);
    let sshd = impostor(
        "principals",
        &dir.join(KEY_FILE),
        Some(&dir.join(CERT_FILE)),
    );
    refused(
        &net,
        &keys,
        &kh,
        &sshd,
        "a certificate for other principals",
    );
    drop(sshd);

    // Our CA's, expired: issued two days ago for a day.
    let day = Validity::new(DAY).unwrap();
    let expired = issue(&ca, &subject("z", &[HOST, POD]), now - 2 * DAY, None, day).unwrap();
    let dir = write_pair("expired", &expired);
    let sshd = impostor("expired", &dir.join(KEY_FILE), Some(&dir.join(CERT_FILE)));
    refused(&net, &keys, &kh, &sshd, "an expired certificate");
    drop(sshd);

    // And the real thing again, after them all: nothing was learnt.
    let third = job(&net, root.path(), &keys, &ca, "job-3", true);
    accepted(&net, &keys, &kh, "a job after the impostors");
    drop(third);
    assert_eq!(std::fs::read_to_string(&kh).unwrap(), published);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn during_a_rotation_both_cas_are_trusted_and_after_it_only_the_new_one() {
    privilege::require();
    let net = Net::new();
    let root = root();
    let keys = SshKeys::generate().unwrap();
    let (old, new) = (Ca::generate("old").unwrap(), Ca::generate("new").unwrap());
    let until = SystemTime::now() + DAY;
    let previous = Previous {
        public: old.public_line(),
        until,
    };
    let during = trust::known_hosts(HOST, &new.public_line(), Some(&previous), SystemTime::now());
    assert_eq!(during.lines().count(), 2, "{during}");
    let after = trust::known_hosts(HOST, &new.public_line(), Some(&previous), until);
    assert_eq!(after.lines().count(), 1, "{after}");
    let (kh_during, kh_after) = (
        known_hosts(root.path(), "during", &during),
        known_hosts(root.path(), "after", &after),
    );

    let by_old = job(&net, root.path(), &keys, &old, "by-old", true);
    accepted(
        &net,
        &keys,
        &kh_during,
        "the old CA's job during the overlap",
    );
    refused(
        &net,
        &keys,
        &kh_after,
        &by_old,
        "the old CA's job after the overlap",
    );
    drop(by_old);
    let by_new = job(&net, root.path(), &keys, &new, "by-new", true);
    accepted(
        &net,
        &keys,
        &kh_during,
        "the new CA's job during the overlap",
    );
    accepted(&net, &keys, &kh_after, "the new CA's job after the overlap");
    drop(by_new);
}
