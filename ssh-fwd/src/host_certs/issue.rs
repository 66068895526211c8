//! One job's host key and certificate, as `ssh-keygen -h` makes them: a
//! fresh Ed25519 key, and a host certificate for it signed by the CA.
//!
//! - principals: the names users type: the SSH host name and each SSH IP;
//! - key id: the pod (`namespace/name/uid`) and its port, for the record
//!   (`ssh -v` shows it, and sshd's log);
//! - validity: from a minute before issue (clocks differ) to the pod's
//!   expected end, and never past the bound (`--host-cert-validity`);
//! - a random serial.
//!
//! The key is made here and nowhere else: nothing a tenant writes is ever
//! signed. OpenSSH does not bind a certificate to a port, so the port is
//! only recorded: which job answers a port is the forwarder's grant.

use std::time::{Duration, SystemTime};

use ssh_key::{
    Algorithm, LineEnding, PrivateKey,
    certificate::{Builder, CertType},
    rand_core::{OsRng, RngCore as _},
};
use zeroize::Zeroizing;

use super::Ca;

/// How far before issue a certificate is valid: a client whose clock is a
/// little behind still accepts it.
pub const BACKDATE: Duration = Duration::from_secs(60);

/// The longest a certificate is valid (`--host-cert-validity`), checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity(Duration);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidityError {
    #[error(
        "--host-cert-validity {0} is too short: a job's host certificate would never be valid; give at least a minute, e.g. 30d (the default)"
    )]
    TooShort(String),
}

impl Validity {
    pub const DEFAULT: &str = "30d";

    pub fn new(bound: Duration) -> Result<Self, ValidityError> {
        if bound < Duration::from_secs(60) {
            return Err(ValidityError::TooShort(
                humantime::format_duration(bound).to_string(),
            ));
        }
        Ok(Self(bound))
    }

    pub fn bound(self) -> Duration {
        self.0
    }
}

/// What a certificate says of its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// The names users type: the host name first, then each SSH IP.
    pub principals: Vec<String>,
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub port: u16,
}

impl Subject {
    /// `namespace/pod/uid port PORT`.
    pub fn key_id(&self) -> String {
        format!(
            "{}/{}/{} port {}",
            self.namespace, self.pod, self.uid, self.port
        )
    }
}

/// A job's host key (OpenSSH private key text) and its certificate (one
/// `ssh-ed25519-cert-v01@openssh.com AAAA...` line).
pub struct Issued {
    pub key: Zeroizing<String>,
    pub certificate: String,
    pub serial: u64,
    pub valid_before: SystemTime,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("certificate", &self.certificate)
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

/// The end of a certificate issued at `now`: the pod's expected end if it
/// has one, within the bound.
pub fn valid_before(
    now: SystemTime,
    expected_end: Option<SystemTime>,
    bound: Validity,
) -> SystemTime {
    let latest = now + bound.bound();
    match expected_end {
        Some(end) if end < latest => end.max(now),
        _ => latest,
    }
}

/// A fresh host key for `subject` and its certificate, signed by `ca`.
pub fn issue(
    ca: &Ca,
    subject: &Subject,
    now: SystemTime,
    expected_end: Option<SystemTime>,
    bound: Validity,
) -> Result<Issued, ssh_key::Error> {
    let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)?;
    key.set_comment(subject.key_id());
    let after = unix(now.checked_sub(BACKDATE).unwrap_or(SystemTime::UNIX_EPOCH));
    let before_at = valid_before(now, expected_end, bound);
    let mut builder =
        Builder::new_with_random_nonce(&mut OsRng, key.public_key(), after, unix(before_at))?;
    let serial = OsRng.next_u64().max(1);
    builder
        .serial(serial)?
        .cert_type(CertType::Host)?
        .key_id(subject.key_id())?
        .comment(subject.key_id())?;
    for principal in &subject.principals {
        builder.valid_principal(principal.as_str())?;
    }
    let certificate = builder.sign(ca.signing_key())?;
    Ok(Issued {
        key: key.to_openssh(LineEnding::LF)?,
        certificate: certificate.to_openssh()?,
        serial,
        valid_before: before_at,
    })
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use ssh_key::{Certificate, HashAlg};

    use super::*;

    fn subject() -> Subject {
        Subject {
            principals: vec![
                "ssh.example.org".into(),
                "198.18.0.10".into(),
                "2001:db8::10".into(),
            ],
            namespace: "jobs".into(),
            pod: "job-1".into(),
            uid: "0b3c".into(),
            port: 20001,
        }
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_certificate_is_a_host_certificate_of_the_key_for_the_principals_signed_by_the_ca() {
        let ca = Ca::generate("test CA").unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let bound = Validity::new(30 * DAY).unwrap();
        let issued = issue(&ca, &subject(), now, None, bound).unwrap();
        let cert = Certificate::from_openssh(&issued.certificate).unwrap();
        assert_eq!(cert.cert_type(), CertType::Host);
        assert_eq!(cert.valid_principals(), subject().principals.as_slice());
        assert_eq!(cert.key_id(), "jobs/job-1/0b3c port 20001");
        assert_eq!(cert.serial(), issued.serial);
        assert_ne!(cert.serial(), 0);
        assert_eq!(cert.valid_after(), 1_800_000_000 - 60);
        assert_eq!(cert.valid_before(), 1_800_000_000 + 30 * 86_400);
        let fingerprint = ca.public_key().fingerprint(HashAlg::Sha256);
        cert.validate_at(1_800_000_000, [&fingerprint]).unwrap();
        let key = PrivateKey::from_openssh(issued.key.as_bytes()).unwrap();
        assert_eq!(key.algorithm(), Algorithm::Ed25519);
        assert_eq!(cert.public_key(), key.public_key().key_data());
        // Another CA's fingerprint does not validate it.
        let other = Ca::generate("other").unwrap();
        let theirs = other.public_key().fingerprint(HashAlg::Sha256);
        assert!(cert.validate_at(1_800_000_000, [&theirs]).is_err());
    }

    #[test]
    fn every_job_gets_a_fresh_key_and_serial() {
        let ca = Ca::generate("test CA").unwrap();
        let bound = Validity::new(DAY).unwrap();
        let now = SystemTime::now();
        let a = issue(&ca, &subject(), now, None, bound).unwrap();
        let b = issue(&ca, &subject(), now, None, bound).unwrap();
        assert_ne!(*a.key, *b.key);
        assert_ne!(a.serial, b.serial);
    }

    #[test]
    fn validity_ends_at_the_pods_expected_end_within_the_bound() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let bound = Validity::new(30 * DAY).unwrap();
        assert_eq!(valid_before(now, None, bound), now + 30 * DAY);
        assert_eq!(valid_before(now, Some(now + DAY), bound), now + DAY);
        assert_eq!(
            valid_before(now, Some(now + 90 * DAY), bound),
            now + 30 * DAY
        );
        // An end already past: valid for nothing beyond the backdating.
        assert_eq!(valid_before(now, Some(now - DAY), bound), now);
    }

    #[test]
    fn a_validity_under_a_minute_is_refused_naming_the_flag() {
        for short in [Duration::ZERO, Duration::from_secs(59)] {
            let error = Validity::new(short).unwrap_err().to_string();
            assert!(error.starts_with("--host-cert-validity "), "{error}");
            assert!(error.contains("e.g. 30d"), "{error}");
        }
        assert!(Validity::new(Duration::from_secs(60)).is_ok());
    }
}
