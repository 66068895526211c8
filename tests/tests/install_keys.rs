//! `ssh-fwd install-keys` (the real binary) against a real sshd with
//! StrictModes, in a network namespace: the keys Secret is played by a
//! directory the way the kubelet writes a Secret volume (a `..data` symlink
//! swapped atomically), the pod's keys volume by a world-writable directory
//! (an emptyDir's mount point).

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use ssh_fwd_tests::{
    NetNs, SshClient, Sshd,
    agent::binary,
    cmd::{self, eventually},
    privilege,
    ssh::SshKeys,
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(15);

/// A Secret volume as the kubelet lays it out: `authorized_keys` ->
/// `..data/authorized_keys`, `..data` -> a timestamped directory, swapped
/// by renaming a new symlink over `..data`.
struct SecretVolume {
    dir: PathBuf,
    version: u32,
}

impl SecretVolume {
    fn new(dir: PathBuf, content: &str) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let mut volume = Self { dir, version: 0 };
        volume.update(content);
        std::os::unix::fs::symlink("..data/authorized_keys", volume.dir.join("authorized_keys"))
            .unwrap();
        volume
    }

    fn update(&mut self, content: &str) {
        self.version += 1;
        let name = format!("..2026_01_01_00_00_0{}.000", self.version);
        std::fs::create_dir(self.dir.join(&name)).unwrap();
        std::fs::write(self.dir.join(&name).join("authorized_keys"), content).unwrap();
        let staged = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &staged).unwrap();
        std::fs::rename(&staged, self.dir.join("..data")).unwrap();
    }

    fn file(&self) -> PathBuf {
        self.dir.join("authorized_keys")
    }
}

fn public(keys: &SshKeys, name: &str) -> String {
    std::fs::read_to_string(keys.dir().join(format!("{name}.pub")))
        .unwrap()
        .trim()
        .to_owned()
}

fn install(source: &Path, dir: &Path, uid: u32, gid: u32, extra: &[&str]) -> Command {
    let mut c = Command::new(binary().unwrap());
    c.args(["install-keys", "--source"])
        .arg(source)
        .arg("--dir")
        .arg(dir)
        .args([
            "--file",
            "authorized_keys.ucloud",
            "--uid",
            &uid.to_string(),
            "--gid",
            &gid.to_string(),
        ])
        .args(extra);
    c
}

fn logs_in(ns: &NetNs, key: &SshClient) -> bool {
    key.run(ns, "127.0.0.1", 22, "echo in")
        .is_ok_and(|out| out == "in")
}

/// The sidecar; killed when dropped.
struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn install_keys_and_its_watch_give_sshd_the_secrets_keys_and_follow_their_rotation() {
    privilege::require();
    let ns = NetNs::new("keys").unwrap();
    let keys = SshKeys::generate().unwrap();
    cmd::run(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", ""])
            .arg("-f")
            .arg(keys.dir().join("rotated")),
    )
    .unwrap();
    let (old, new) = (
        keys.client(),
        SshClient::with_key(keys.dir().join("rotated")),
    );
    // Under /run, so every directory up to / is root's and not writable by
    // others: what StrictModes demands of the path.
    let root = tempfile::Builder::new()
        .prefix("ssh-fwd-keys")
        .tempdir_in("/run")
        .unwrap();
    let keys_dir = root.path().join("etc-ucloud-ssh");
    let authorized = keys_dir.join("authorized_keys.ucloud");
    std::fs::create_dir(&keys_dir).unwrap();
    std::fs::set_permissions(&keys_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _sshd = Sshd::start_with(&ns, "pod", &keys, &authorized, true).unwrap();

    // Control: the key in a world-writable directory, as the emptyDir is
    // before install-keys runs: sshd refuses it.
    std::fs::write(&authorized, format!("{}\n", public(&keys, "client"))).unwrap();
    assert!(
        !logs_in(&ns, &old),
        "StrictModes must refuse a world-writable key directory"
    );
    std::fs::remove_file(&authorized).unwrap();

    let mut secret = SecretVolume::new(
        root.path().join("secret"),
        &format!(
            "{}\nssh-ed25519 AAAAnot-a-key\n# a comment\n",
            public(&keys, "client")
        ),
    );
    let out = install(&secret.file(), &keys_dir, 0, 0, &[])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped line 2 of the keys"), "{stderr}");
    let meta = std::fs::metadata(&keys_dir).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o700, 0, 0)
    );
    let meta = std::fs::metadata(&authorized).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o600, 0, 0)
    );
    assert!(
        !std::fs::read_to_string(&authorized)
            .unwrap()
            .contains("not-a-key")
    );
    assert!(logs_in(&ns, &old), "the installed key logs in");
    assert!(!logs_in(&ns, &new), "a key not in the Secret does not");

    // The sidecar: a key added to the Secret logs in, a removed one stops.
    let log = root.path().join("watch.log");
    let watcher = Watcher(
        install(
            &secret.file(),
            &keys_dir,
            0,
            0,
            &["--watch", "--interval", "200ms"],
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    secret.update(&format!(
        "{}\n{}\n",
        public(&keys, "client"),
        public(&keys, "rotated")
    ));
    eventually("the rotated-in key logs in", WAIT, || logs_in(&ns, &new));
    assert!(
        logs_in(&ns, &old),
        "the old key still does until it is removed"
    );
    secret.update(&format!("garbage line\n{}\n", public(&keys, "rotated")));
    eventually("the removed key is refused", WAIT, || !logs_in(&ns, &old));
    assert!(logs_in(&ns, &new));
    let meta = std::fs::metadata(&authorized).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600, "rewritten with the same mode");
    drop(watcher);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("skipped line 1 of the keys"), "{log}");

    // For a job's user: owned by it, whatever user install-keys runs as.
    let user_dir = root.path().join("user");
    let out = install(&secret.file(), &user_dir, 11042, 11043, &[])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = std::fs::metadata(&user_dir).unwrap();
    assert_eq!(
        (dir.mode() & 0o7777, dir.uid(), dir.gid()),
        (0o700, 11042, 11043)
    );
    let file = std::fs::metadata(user_dir.join("authorized_keys.ucloud")).unwrap();
    assert_eq!(
        (file.mode() & 0o7777, file.uid(), file.gid()),
        (0o600, 11042, 11043)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn without_the_secret_the_file_is_empty_and_the_watch_installs_the_keys_once_it_appears() {
    privilege::require();
    let ns = NetNs::new("keys-late").unwrap();
    let keys = SshKeys::generate().unwrap();
    let client = keys.client();
    let root = tempfile::Builder::new()
        .prefix("ssh-fwd-keys")
        .tempdir_in("/run")
        .unwrap();
    let keys_dir = root.path().join("etc-ucloud-ssh");
    let authorized = keys_dir.join("authorized_keys.ucloud");
    std::fs::create_dir(&keys_dir).unwrap();
    std::fs::set_permissions(&keys_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _sshd = Sshd::start_with(&ns, "pod", &keys, &authorized, true).unwrap();
    // The optional Secret volume as the kubelet mounts it when the Secret
    // does not exist: an empty directory.
    let secret_dir = root.path().join("secret");
    std::fs::create_dir(&secret_dir).unwrap();
    let source = secret_dir.join("authorized_keys");
    let named = ["--secret", "alice-keys"];
    let out = install(&source, &keys_dir, 0, 0, &named).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "no Secret is no keys: {stderr}");
    assert!(stderr.contains("Secret alice-keys"), "{stderr}");
    assert!(
        stderr.contains("kubectl create secret generic alice-keys"),
        "{stderr}"
    );
    let meta = std::fs::metadata(&authorized).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.len()), (0o600, 0));
    assert!(!logs_in(&ns, &client), "no key, no login");

    // The sidecar is running when the Secret is created.
    let watcher = Watcher(
        install(
            &source,
            &keys_dir,
            0,
            0,
            &[&named[..], &["--watch", "--interval", "200ms"]].concat(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let _secret = SecretVolume::new(secret_dir, &format!("{}\n", public(&keys, "client")));
    eventually("the key of the Secret made later logs in", WAIT, || {
        logs_in(&ns, &client)
    });
    drop(watcher);
}

/// `install` run as `uid`:`gid` with no supplementary group and no
/// capability, as a container with that runAsUser and runAsGroup.
fn install_as(uid: u32, gid: u32, source: &Path, dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ])
    .arg(binary().unwrap())
    .args(["install-keys", "--source"])
    .arg(source)
    .arg("--dir")
    .arg(dir)
    .args([
        "--file",
        "authorized_keys.ucloud",
        "--uid",
        &uid.to_string(),
        "--gid",
        &gid.to_string(),
    ])
    .args(extra);
    c
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn run_as_the_jobs_user_install_keys_needs_no_privilege_and_sshd_with_strict_modes_takes_its_file()
{
    privilege::require();
    const USER: (u32, u32) = (11042, 11043);
    let ns = NetNs::new("keys-user").unwrap();
    let keys = SshKeys::generate().unwrap();
    cmd::run(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", ""])
            .arg("-f")
            .arg(keys.dir().join("rotated")),
    )
    .unwrap();
    let (old, new) = (
        keys.client(),
        SshClient::with_key(keys.dir().join("rotated")),
    );
    let root = tempfile::Builder::new()
        .prefix("ssh-fwd-keys")
        .tempdir_in("/run")
        .unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The keys volume as the kubelet makes an emptyDir: root's, writable by
    // all. install-keys makes its directory in it.
    let volume = root.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = volume.join("keys");
    let mut secret = SecretVolume::new(
        root.path().join("secret"),
        &format!("{}\n", public(&keys, "client")),
    );
    let out = install_as(USER.0, USER.1, &secret.file(), &dir, &[])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o700, USER.0, USER.1)
    );
    let meta = std::fs::metadata(dir.join("authorized_keys.ucloud")).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o600, USER.0, USER.1)
    );

    // sshd as in the job's container: the directory mounted at the keys
    // path (subPath), and the job's user known to it.
    let seen = root.path().join("etc-ucloud-ssh");
    std::fs::create_dir(&seen).unwrap();
    let passwd = root.path().join("passwd");
    let mut users = std::fs::read_to_string("/etc/passwd").unwrap();
    users.push_str(&format!(
        "job:x:{}:{}:job:{}:/bin/sh\n",
        USER.0,
        USER.1,
        root.path().display()
    ));
    std::fs::write(&passwd, users).unwrap();
    let etc_passwd = Path::new("/etc/passwd");
    let _sshd = Sshd::start_with_binds(
        &ns,
        "pod",
        &keys,
        &seen.join("authorized_keys.ucloud"),
        true,
        &[(&dir, &seen), (&passwd, etc_passwd)],
    )
    .unwrap();
    let login = |key: &SshClient| {
        key.run_pasted(&ns, "ssh job@127.0.0.1 -p 22", "id -u")
            .is_ok_and(|out| out == USER.0.to_string())
    };
    assert!(login(&old), "StrictModes takes the user's own directory");
    assert!(!login(&new), "a key not in the Secret does not log in");

    // The sidecar, as the user too: a rotation reaches sshd through the
    // mount.
    let watcher = Watcher(
        install_as(
            USER.0,
            USER.1,
            &secret.file(),
            &dir,
            &["--watch", "--interval", "200ms"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    secret.update(&format!("{}\n", public(&keys, "rotated")));
    eventually("the rotated-in key logs in", WAIT, || login(&new));
    assert!(!login(&old), "the removed key no longer does");
    drop(watcher);
}
