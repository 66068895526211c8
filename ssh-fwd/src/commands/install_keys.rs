//! `ssh-fwd install-keys`: writes a pod's authorized_keys the way UCloud
//! does (directory 0700, file 0600, both owned by the job's user), from the
//! keys Secret as the kubelet mounts it. Run as that user it needs no
//! privilege (the directory is made in a world-writable emptyDir); run as
//! root it hands them over (CAP_CHOWN). Each line is parsed as an OpenSSH
//! public key; a bad one is skipped with a warning naming its line number.
//! The file is replaced atomically (a temporary file in the same directory,
//! renamed over it), so sshd never reads half a file. With `--watch` it
//! keeps going as the pod's sidecar and rewrites the file whenever the
//! Secret volume changes (the kubelet swaps it in place), or whenever the
//! file on disk no longer is what it should be. The Secret volume is
//! optional: without the Secret (or its key) the source is absent, which
//! installs an empty file (no keys) with a warning naming the Secret, and
//! the watch installs the keys once the Secret appears.
//!
//! With `--host-key-source` it also writes the job's host key, its
//! certificate and an `sshd_config` snippet loading them (`host_key.rs`).

mod authorized;
pub mod host_key;

use std::{
    fs::{self, File, OpenOptions},
    io::Write as _,
    os::unix::fs::{
        DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
    },
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use crate::vocabulary;

pub use authorized::{Parsed, parse};

#[derive(Debug, clap::Args)]
pub struct InstallKeysArgs {
    /// The keys to install: the keys Secret's `authorized_keys`, as mounted
    /// (none: no authorized_keys is written).
    #[arg(long, value_name = "FILE", required_unless_present = "host_key_source")]
    pub source: Option<PathBuf>,

    /// The job's host key Secret as mounted (ssh_host_ed25519_key and
    /// ssh_host_ed25519_key-cert.pub): both are written into --dir with
    /// an sshd_config snippet loading them.
    #[arg(long, value_name = "DIR", requires = "mounted_at")]
    pub host_key_source: Option<PathBuf>,

    /// Where the job's containers see --dir: the paths the sshd_config
    /// snippet names.
    #[arg(long, value_name = "DIR")]
    pub mounted_at: Option<PathBuf>,

    /// The directory the file goes in; made if absent, then mode 0700 and
    /// owned by --uid.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// The file's name in --dir.
    #[arg(long, value_name = "NAME", default_value = "authorized_keys")]
    pub file: String,

    /// The owner of the directory and the file (the job's user).
    #[arg(long, value_name = "UID")]
    pub uid: u32,

    /// Their group (default: the same number as --uid).
    #[arg(long, value_name = "GID")]
    pub gid: Option<u32>,

    /// The keys Secret's name, to name it when --source is absent.
    #[arg(long, value_name = "NAME")]
    pub secret: Option<String>,

    /// Keep running and rewrite the file whenever --source changes.
    #[arg(long)]
    pub watch: bool,

    /// How often --watch checks --source and the file.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::args::duration)]
    pub interval: Duration,
}

impl InstallKeysArgs {
    pub fn target(&self) -> Target {
        Target {
            dir: self.dir.clone(),
            file: self.file.clone(),
            uid: self.uid,
            gid: self.gid.unwrap_or(self.uid),
        }
    }
}

/// Where the keys go and who owns them.
#[derive(Clone, Debug)]
pub struct Target {
    pub dir: PathBuf,
    pub file: String,
    pub uid: u32,
    pub gid: u32,
}

impl Target {
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file)
    }

    /// Whether the file, its mode and owner, and the directory's, are as
    /// they should be for `content`.
    fn is_current(&self, content: &str) -> bool {
        let right = |path: &Path, mode: u32| {
            fs::symlink_metadata(path).is_ok_and(|m| {
                !m.file_type().is_symlink()
                    && m.permissions().mode() & 0o7777 == mode
                    && (m.uid(), m.gid()) == (self.uid, self.gid)
            })
        };
        right(&self.dir, 0o700)
            && right(&self.path(), 0o600)
            && fs::read(self.path()).is_ok_and(|c| c == content.as_bytes())
    }

    /// Writes `content` unless it is there already; returns whether it
    /// wrote.
    pub fn sync(&self, content: &str) -> anyhow::Result<bool> {
        if self.is_current(content) {
            return Ok(false);
        }
        self.make_dir()?;
        self.replace(content)?;
        // The directory last: once it is 0700 and someone else's, only its
        // owner (or root with DAC_OVERRIDE) can write into it.
        set_mode_and_owner(&self.dir, 0o700, self.uid, self.gid)?;
        Ok(true)
    }

    fn make_dir(&self) -> anyhow::Result<()> {
        match fs::symlink_metadata(&self.dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => anyhow::bail!(
                "--dir {} exists and is not a directory (or is a symlink); remove it",
                self.dir.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fs::DirBuilder::new()
                .mode(0o700)
                .create(&self.dir)
                .with_context(|| format!("creating --dir {}", self.dir.display())),
            Err(e) => Err(e).with_context(|| format!("reading --dir {}", self.dir.display())),
        }
    }

    /// A new file beside the old one, renamed over it.
    fn replace(&self, content: &str) -> anyhow::Result<()> {
        let temporary = self.dir.join(format!(".{}.new", self.file));
        match fs::remove_file(&temporary) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", temporary.display())),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)
            .with_context(|| format!("creating {}", temporary.display()))?;
        file.write_all(content.as_bytes())
            .and_then(|()| file.set_permissions(fs::Permissions::from_mode(0o600)))
            .with_context(|| format!("writing {}", temporary.display()))?;
        chown_if_needed(&file, &temporary, self.uid, self.gid)?;
        file.sync_all()
            .with_context(|| format!("writing {}", temporary.display()))?;
        fs::rename(&temporary, self.path())
            .with_context(|| format!("renaming {} to {}", temporary.display(), self.file))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", self.dir.display()))
    }
}

fn chown_if_needed(file: &File, path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    let meta = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    // Only what differs: run as the owner, that is at most the group, to
    // one of the owner's own groups, which needs no capability.
    let owner = (meta.uid() != uid).then_some(uid);
    let group = (meta.gid() != gid).then_some(gid);
    if owner.is_none() && group.is_none() {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, owner, group).with_context(|| {
        format!(
            "making {} owned by {uid}:{gid}; run install-keys as that user and group, or as root with CAP_CHOWN",
            path.display()
        )
    })
}

fn set_mode_and_owner(dir: &Path, mode: u32, uid: u32, gid: u32) -> anyhow::Result<()> {
    let handle = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    handle
        .set_permissions(fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {} to {mode:o}", dir.display()))?;
    chown_if_needed(&handle, dir, uid, gid)
}

/// Logs the lines left out, naming each by number.
fn report(parsed: &Parsed, source: &Path) {
    for (line, why) in &parsed.skipped {
        tracing::warn!(source = %source.display(), line, "skipped line {line} of the keys: {why}; it is not installed");
    }
    if parsed.lines.is_empty() {
        tracing::warn!(source = %source.display(), "no valid key: nobody can log in with a key until one is added");
    }
}

/// What to say when `source` is absent: the Secret, or its key, is
/// missing, and how to make it.
fn missing_source(source: &Path, secret: Option<&str>) -> String {
    let named = format!("named by {}", vocabulary::KEYS_SECRET);
    let secret = secret.unwrap_or(&named);
    format!(
        "no SSH keys: {} is absent, so the Secret {secret} is not in this pod's namespace or has no key authorized_keys; an empty authorized_keys is installed and nobody can log in with a key. Create it (kubectl create secret generic {secret} --from-file=authorized_keys=KEYS.pub): the keys sidecar installs it once the kubelet mounts it (60-90 s later)",
        source.display()
    )
}

/// The source's content; `None` when it is absent (the volume is
/// optional: the Secret or its key is missing).
fn read_source(source: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match fs::read(source) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading --source {}", source.display())),
    }
}

pub fn run(args: InstallKeysArgs) -> anyhow::Result<()> {
    let target = args.target();
    anyhow::ensure!(
        !target.file.is_empty() && !target.file.contains('/'),
        "--file `{}` must be a file name without '/'",
        target.file
    );
    let host_key = (args.host_key_source.clone())
        .zip(args.mounted_at.clone())
        .map(|(dir, mounted_at)| host_key::HostKeySource { dir, mounted_at });
    let mut last = None;
    loop {
        let round = |last: &mut _| {
            if let Some(source) = &args.source {
                once(source, args.secret.as_deref(), &target, last)?;
            }
            if let Some(host_key) = &host_key
                && host_key::sync(host_key, &target)?
            {
                tracing::info!(dir = %target.dir.display(), "installed the host key, its certificate and the sshd_config snippet");
            }
            anyhow::Ok(())
        };
        match round(&mut last) {
            Ok(()) => {}
            Err(e) if !args.watch => return Err(e),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "installing the keys failed; trying again")
            }
        }
        if !args.watch {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}

/// One round: read, parse (reporting a changed source), write if needed.
/// `last`: the source as the previous round read it.
fn once(
    source: &Path,
    secret: Option<&str>,
    target: &Target,
    last: &mut Option<Option<Vec<u8>>>,
) -> anyhow::Result<()> {
    let bytes = read_source(source)?;
    let parsed = parse(&String::from_utf8_lossy(
        bytes.as_deref().unwrap_or_default(),
    ));
    let changed = last.as_ref() != Some(&bytes);
    if changed {
        match &bytes {
            Some(_) => report(&parsed, source),
            None => {
                tracing::warn!(source = %source.display(), "{}", missing_source(source, secret))
            }
        }
    }
    if target.sync(&parsed.render())? {
        tracing::info!(keys = parsed.lines.len(), file = %target.path().display(), uid = target.uid, gid = target.gid, "installed the authorized keys");
    }
    *last = Some(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    fn me() -> (u32, u32) {
        // SAFETY: getuid and getgid have no preconditions.
        unsafe { (libc::getuid(), libc::getgid()) }
    }

    #[test]
    fn keys_are_written_0600_in_a_0700_directory_and_rewritten_only_when_they_differ() {
        let tmp = tempfile::tempdir().unwrap();
        let (uid, gid) = me();
        let target = Target {
            dir: tmp.path().join("ssh"),
            file: "authorized_keys.ucloud".into(),
            uid,
            gid,
        };
        let content = format!("{ED} a\n");
        assert!(target.sync(&content).unwrap());
        let dir = fs::metadata(&target.dir).unwrap();
        assert_eq!(dir.permissions().mode() & 0o7777, 0o700);
        let file = fs::metadata(target.path()).unwrap();
        assert_eq!(file.permissions().mode() & 0o7777, 0o600);
        assert_eq!(fs::read_to_string(target.path()).unwrap(), content);
        assert!(!target.sync(&content).unwrap(), "nothing to do");
        // Loosened by someone: put right.
        fs::set_permissions(target.path(), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(target.sync(&content).unwrap());
        assert_eq!(
            fs::metadata(target.path()).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        let names: Vec<_> = fs::read_dir(&target.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["authorized_keys.ucloud"], "no temporary file left");
    }

    fn args(tmp: &Path, watch: bool) -> InstallKeysArgs {
        let (uid, gid) = me();
        InstallKeysArgs {
            source: Some(tmp.join("secret/authorized_keys")),
            host_key_source: None,
            mounted_at: None,
            dir: tmp.join("ssh"),
            file: "authorized_keys".into(),
            uid,
            gid: Some(gid),
            secret: Some("alice-keys".into()),
            watch,
            interval: Duration::from_millis(50),
        }
    }

    #[test]
    fn a_missing_source_installs_an_empty_file_and_says_which_secret_to_create() {
        // The Secret volume is optional: without the Secret (or its key)
        // the kubelet mounts it empty, and the pod starts without keys.
        let tmp = tempfile::tempdir().unwrap();
        let args = args(tmp.path(), false);
        let target = args.target();
        run(args).expect("no Secret is no keys, not a failure");
        assert_eq!(fs::read_to_string(target.path()).unwrap(), "");
        let file = fs::metadata(target.path()).unwrap();
        assert_eq!(file.permissions().mode() & 0o7777, 0o600);
        let why = missing_source(
            &tmp.path().join("secret/authorized_keys"),
            Some("alice-keys"),
        );
        assert!(why.contains("Secret alice-keys"), "{why}");
        assert!(why.contains("key authorized_keys"), "{why}");
        assert!(
            why.contains("kubectl create secret generic alice-keys --from-file=authorized_keys="),
            "{why}"
        );
    }

    #[test]
    fn the_watch_installs_the_keys_of_a_secret_that_appears_later() {
        let tmp = tempfile::tempdir().unwrap();
        let args = args(tmp.path(), true);
        let (source, target) = (args.source.clone().unwrap(), args.target());
        let mut last = None;
        once(&source, args.secret.as_deref(), &target, &mut last).unwrap();
        assert_eq!(fs::read_to_string(target.path()).unwrap(), "");
        // The Secret is created: the kubelet fills the volume in.
        fs::create_dir(source.parent().unwrap()).unwrap();
        fs::write(&source, format!("{ED} alice\n")).unwrap();
        once(&source, args.secret.as_deref(), &target, &mut last).unwrap();
        assert_eq!(
            fs::read_to_string(target.path()).unwrap(),
            format!("{ED} alice\n")
        );
        // And deleted again: no keys.
        fs::remove_file(&source).unwrap();
        once(&source, args.secret.as_deref(), &target, &mut last).unwrap();
        assert_eq!(fs::read_to_string(target.path()).unwrap(), "");
    }

    #[test]
    fn a_directory_path_that_is_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("ssh")).unwrap();
        let (uid, gid) = me();
        let target = Target {
            dir: tmp.path().join("ssh"),
            file: "authorized_keys".into(),
            uid,
            gid,
        };
        let error = format!("{:#}", target.sync("x\n").unwrap_err());
        assert!(error.contains("is a symlink"), "{error}");
    }
}
