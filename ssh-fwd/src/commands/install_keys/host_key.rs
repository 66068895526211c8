//! The job's host key and certificate, from the per-pod Secret the
//! controller issued (mounted at `--host-key-source`), written next to
//! authorized_keys with an `sshd_config` snippet that loads them: the key
//! 0600, like every file here, in the 0700 directory of the job's user
//! (sshd refuses a host key others can read).
//!
//! The snippet names the files where the job's containers see them
//! (`--mounted-at`, the webhook's `--keys-dir`), not where install-keys
//! writes them. The pair is checked before it is written: a key that is
//! not the certificate's would make sshd start without the certificate,
//! and every client refuse it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::Target;

pub use crate::host_certs::{CERT_FILE, KEY_FILE, SNIPPET_FILE};

/// Where the pair comes from and where the job sees it.
#[derive(Clone, Debug)]
pub struct HostKeySource {
    pub dir: PathBuf,
    pub mounted_at: PathBuf,
}

/// The snippet: `HostKey` and `HostCertificate` at `mounted_at`.
pub fn snippet(mounted_at: &Path) -> String {
    format!(
        "# Written by ssh-fwd install-keys: this job's host key and the certificate the\n# platform's host CA issued for it. Include it from sshd_config, or pass both\n# lines to sshd with -o.\nHostKey {key}\nHostCertificate {cert}\n",
        key = mounted_at.join(KEY_FILE).display(),
        cert = mounted_at.join(CERT_FILE).display(),
    )
}

/// The key and the certificate read from `source`, checked to be a pair.
fn read_pair(source: &Path) -> anyhow::Result<(String, String)> {
    let read = |name: &str| {
        let path = source.join(name);
        std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {}: the host key Secret is not mounted (the controller issues it once the pod has its port; `kubectl describe pod` shows a FailedMount until then)",
                path.display()
            )
        })
    };
    let (key, cert) = (read(KEY_FILE)?, read(CERT_FILE)?);
    let private = ssh_key::PrivateKey::from_openssh(&key).with_context(|| {
        format!(
            "{} is not an OpenSSH private key",
            source.join(KEY_FILE).display()
        )
    })?;
    let certificate = ssh_key::Certificate::from_openssh(cert.trim()).with_context(|| {
        format!(
            "{} is not an OpenSSH certificate",
            source.join(CERT_FILE).display()
        )
    })?;
    anyhow::ensure!(
        certificate.public_key() == private.public_key().key_data(),
        "{} is not the certificate of {}; delete the pod's host key Secret and recreate the pod",
        source.join(CERT_FILE).display(),
        source.join(KEY_FILE).display()
    );
    Ok((key, cert))
}

/// Writes the key, the certificate and the snippet into `target`'s
/// directory unless they are there already; returns whether it wrote.
pub fn sync(source: &HostKeySource, target: &Target) -> anyhow::Result<bool> {
    let (key, cert) = read_pair(&source.dir)?;
    let mut wrote = false;
    for (file, content) in [
        (KEY_FILE, key),
        (CERT_FILE, cert),
        (SNIPPET_FILE, snippet(&source.mounted_at)),
    ] {
        let one = Target {
            file: file.to_owned(),
            ..target.clone()
        };
        wrote |= one.sync(&content)?;
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::PermissionsExt as _, time::SystemTime};

    use super::*;
    use crate::host_certs::{Ca, Subject, Validity, issue::issue};

    fn pair(dir: &Path) {
        let ca = Ca::generate("test").unwrap();
        let subject = Subject {
            principals: vec!["ssh.example.org".into()],
            namespace: "jobs".into(),
            pod: "job-1".into(),
            uid: "u".into(),
            port: 20001,
        };
        let bound = Validity::new(std::time::Duration::from_secs(3600)).unwrap();
        let issued = issue(&ca, &subject, SystemTime::now(), None, bound).unwrap();
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join(KEY_FILE), issued.key.as_bytes()).unwrap();
        fs::write(dir.join(CERT_FILE), &issued.certificate).unwrap();
    }

    fn target(tmp: &Path) -> Target {
        // SAFETY: getuid and getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Target {
            dir: tmp.join("keys"),
            file: "authorized_keys".into(),
            uid,
            gid,
        }
    }

    #[test]
    fn the_pair_and_a_snippet_naming_it_where_the_job_sees_it_are_written_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let source = HostKeySource {
            dir: tmp.path().join("host-key"),
            mounted_at: "/etc/ssh-fwd".into(),
        };
        pair(&source.dir);
        let target = target(tmp.path());
        assert!(sync(&source, &target).unwrap());
        assert!(!sync(&source, &target).unwrap(), "nothing to do");
        for file in [KEY_FILE, CERT_FILE, SNIPPET_FILE] {
            let mode = fs::metadata(target.dir.join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o600, "{file}");
        }
        let dir = fs::metadata(&target.dir).unwrap().permissions().mode();
        assert_eq!(dir & 0o7777, 0o700);
        let snippet = fs::read_to_string(target.dir.join(SNIPPET_FILE)).unwrap();
        assert!(
            snippet.contains("\nHostKey /etc/ssh-fwd/ssh_host_ed25519_key\n"),
            "{snippet}"
        );
        assert!(
            snippet.contains("\nHostCertificate /etc/ssh-fwd/ssh_host_ed25519_key-cert.pub\n"),
            "{snippet}"
        );
        assert_eq!(
            fs::read(target.dir.join(KEY_FILE)).unwrap(),
            fs::read(source.dir.join(KEY_FILE)).unwrap()
        );
    }

    #[test]
    fn a_certificate_of_another_key_is_refused_and_nothing_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let source = HostKeySource {
            dir: tmp.path().join("host-key"),
            mounted_at: "/etc/ssh-fwd".into(),
        };
        pair(&source.dir);
        let other = tmp.path().join("other");
        pair(&other);
        fs::copy(other.join(CERT_FILE), source.dir.join(CERT_FILE)).unwrap();
        let target = target(tmp.path());
        let error = format!("{:#}", sync(&source, &target).unwrap_err());
        assert!(error.contains("is not the certificate of"), "{error}");
        assert!(!target.dir.join(KEY_FILE).exists());
        // Absent: says what to look at.
        fs::remove_file(source.dir.join(KEY_FILE)).unwrap();
        let error = format!("{:#}", sync(&source, &target).unwrap_err());
        assert!(error.contains("host key Secret is not mounted"), "{error}");
    }
}
