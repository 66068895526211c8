//! OpenSSH host certificates for jobs: the controller's host CA
//! ([`ca`]), the key and certificate each SSH pod gets ([`issue`]), and
//! what users trust, one `@cert-authority` line ([`trust`]).
//!
//! Keys, certificates and their encodings are the `ssh-key` crate's
//! (RustCrypto); nothing here encodes by hand. Pure: no I/O, no clock of
//! its own (the time is passed in), so every rule is a unit test; the
//! controller reads and writes the Secrets and the ConfigMap, and
//! `install-keys` the pod's files. Depends on nothing in the crate.

pub mod ca;
pub mod issue;
pub mod trust;

pub use ca::{Ca, CaError};

/// The host key's file name: in the per-pod Secret, and in the keys
/// directory install-keys writes.
pub const KEY_FILE: &str = "ssh_host_ed25519_key";
/// The certificate's, as `ssh-keygen -s` names it.
pub const CERT_FILE: &str = "ssh_host_ed25519_key-cert.pub";
/// The `sshd_config` snippet's (`HostKey`, `HostCertificate`).
pub const SNIPPET_FILE: &str = "sshd_config";
pub use issue::{Issued, Subject, Validity, ValidityError};
