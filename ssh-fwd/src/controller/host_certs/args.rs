//! The host CA's flags. Doc comments here are the `--help` text.

use std::time::{Duration, SystemTime};

use crate::{host_certs::Validity, vocabulary};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Host certificates (--host-certs)")]
pub struct HostCaArgs {
    /// The Secret, in the controller's namespace, holding the host CA's
    /// Ed25519 private key (key ssh_host_ca_key, OpenSSH format,
    /// unencrypted). Made by the first replica to start when absent; an
    /// operator may create it first with their own key.
    #[arg(long, value_name = "NAME", default_value = vocabulary::HOST_CA_SECRET)]
    pub host_ca_secret: String,

    /// The ConfigMap, in the controller's namespace, the CA's known_hosts
    /// line is published in (every authenticated user may read it:
    /// `ssh-fwd known-hosts`).
    #[arg(long, value_name = "NAME", default_value = vocabulary::HOST_CA_CONFIG_MAP)]
    pub host_ca_config_map: String,

    /// The longest a job's host certificate is valid; it ends sooner with
    /// the pod's activeDeadlineSeconds. At least 1m.
    #[arg(long, value_name = "DURATION", default_value = Validity::DEFAULT, value_parser = validity)]
    pub host_cert_validity: Duration,

    /// Rotation: the Secret of the CA being replaced. Its line is
    /// published beside --host-ca-secret's until --host-ca-previous-until;
    /// only --host-ca-secret signs.
    #[arg(long, value_name = "NAME", requires = "host_ca_previous_until")]
    pub host_ca_previous_secret: Option<String>,

    /// Rotation: when the previous CA stops being published (RFC 3339,
    /// e.g. 2027-01-31T00:00:00Z). Set it at least --host-cert-validity
    /// after the rotation starts, so certificates the old CA signed expire
    /// first.
    #[arg(long, value_name = "TIME", requires = "host_ca_previous_secret", value_parser = rfc3339)]
    pub host_ca_previous_until: Option<SystemTime>,
}

/// A duration, at least [`Validity`]'s minimum: `0s` is refused naming
/// the flag and a value that works.
fn validity(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 12h, 7d or 30d: {e}"))?;
    Validity::new(d)
        .map(Validity::bound)
        .map_err(|e| e.to_string())
}

fn rfc3339(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(s).map_err(|e| {
        format!("`{s}` is not an RFC 3339 time ({e}); write it as 2027-01-31T00:00:00Z")
    })
}

impl HostCaArgs {
    /// The certificates' bound, checked: refused before anything is read
    /// or written.
    pub fn validity(&self) -> Result<Validity, crate::host_certs::ValidityError> {
        Validity::new(self.host_cert_validity)
    }
}
