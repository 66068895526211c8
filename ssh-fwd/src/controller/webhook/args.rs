//! The flags of the SSH feature at pod creation: the admission webhook, the
//! endpoint variable, the keys, and how long port reservations wait for
//! their pod. Doc comments here are the `--help` text.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Admission webhook and keys")]
pub struct AdmissionArgs {
    /// Serve the mutating admission webhook over HTTPS on this address (on
    /// every replica): pods labelled ssh-fwd.io/ssh=enabled get their port,
    /// the endpoint variable and their keys when they are created. Off when
    /// absent; then needs --webhook-cert-dir or --webhook-self-signed.
    #[arg(long, value_name = "ADDR:PORT")]
    pub webhook_addr: Option<SocketAddr>,

    /// Directory holding tls.crt and tls.key (e.g. cert-manager's Secret,
    /// mounted); re-read every --webhook-reload-interval, so a renewal
    /// needs no restart.
    #[arg(long, value_name = "DIR", conflicts_with = "webhook_self_signed")]
    pub webhook_cert_dir: Option<PathBuf>,

    /// Make a CA and serving certificate, keep them in the Secret
    /// --webhook-secret of this namespace, and write the CA into the
    /// caBundle of the MutatingWebhookConfiguration --webhook-configuration.
    #[arg(long)]
    pub webhook_self_signed: bool,

    /// The Service in front of the webhook (its DNS names go into the
    /// self-signed certificate).
    #[arg(long, value_name = "NAME", default_value = "ssh-fwd-webhook")]
    pub webhook_service: String,

    /// The Secret of --webhook-self-signed.
    #[arg(long, value_name = "NAME", default_value = "ssh-fwd-webhook-tls")]
    pub webhook_secret: String,

    /// The MutatingWebhookConfiguration whose caBundle
    /// --webhook-self-signed writes.
    #[arg(long, value_name = "NAME", default_value = "ssh-fwd")]
    pub webhook_configuration: String,

    /// A PEM file of CA certificates: when given, the webhook serves only
    /// clients presenting a certificate one of them signed, and refuses
    /// every other connection in its TLS handshake. The API server
    /// presents one only if the cluster admin gives it one for this
    /// webhook (an AdmissionConfiguration whose kubeConfigFile has a user
    /// named ssh-fwd-webhook.ssh-fwd.svc with client-certificate and
    /// client-key); see docs/controller.md. Read at start.
    #[arg(long, value_name = "FILE")]
    pub webhook_client_ca: Option<PathBuf>,

    /// How often the certificate files or Secret are checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::args::duration)]
    pub webhook_reload_interval: Duration,

    /// The variable every container of an SSH pod gets, set to HOST:PORT
    /// (UCloud: UCLOUD_PUBLIC_SSH).
    #[arg(long, value_name = "NAME", default_value = "SSH_FWD_PUBLIC_SSH")]
    pub env_name: String,

    /// The Secret (key authorized_keys) of a pod without the annotation
    /// ssh-fwd.io/authorized-keys-secret; without either, no keys are
    /// installed.
    #[arg(long, value_name = "NAME")]
    pub default_keys_secret: Option<String>,

    /// The image of the install-keys containers (default: the controller's
    /// own, read from its pod).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// Where the keys are mounted in every container (UCloud:
    /// /etc/ucloud/ssh).
    #[arg(long, value_name = "DIR", default_value = "/etc/ssh-fwd")]
    pub keys_dir: String,

    /// The keys file's name in --keys-dir (UCloud: authorized_keys.ucloud).
    #[arg(long, value_name = "NAME", default_value = "authorized_keys")]
    pub keys_file: String,

    /// The owner of the keys directory and file (default: the runAsUser
    /// of the container serving ssh-fwd.io/target-port, else of the first
    /// container, else the pod's, else root).
    #[arg(long, value_name = "UID")]
    pub keys_uid: Option<u32>,

    /// How often the keys sidecar checks the Secret volume for changes.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::args::duration)]
    pub keys_watch_interval: Duration,

    /// Give every SSH pod a fresh host key and a host certificate signed by
    /// the host CA (--host-ca-secret), installed by the install-keys
    /// containers next to the keys with an sshd_config snippet that loads
    /// them; users trust every job with one known_hosts line (`ssh-fwd
    /// known-hosts`). A pod starts once its certificate is issued.
    #[arg(long)]
    pub host_certs: bool,

    /// With --host-certs: the variable every container of an SSH pod gets,
    /// naming the sshd_config snippet (in --keys-dir) that loads the job's
    /// host key and certificate.
    #[arg(long, value_name = "NAME", default_value = "SSH_FWD_SSHD_CONFIG")]
    pub sshd_config_env_name: String,

    /// How long a port reservation may take at admission before the pod is
    /// admitted without a port; must stay under the webhook's
    /// timeoutSeconds (5 in deploy/).
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = crate::args::duration)]
    pub webhook_deadline: Duration,

    /// How long a port reserved at admission waits for its pod before it
    /// lapses and the port is free again: from when a controller replica
    /// first saw the reservation, or from its creation for an old one a
    /// controller that just started finds (then at least 60s, plus 20s
    /// for the clocks); at most 90s. Shorter frees the ports of pods that
    /// never come (refused by a later admission step, or forged reviews)
    /// sooner; a pod the API server creates later than this after its
    /// admission (slow later webhooks or storage) keeps its port only if
    /// it is still free, else gets another and an SSHEnvMissing warning.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::args::duration)]
    pub reservation_grace: Duration,

    /// How many pods of one namespace (as the review names it) may have
    /// been admitted with a reserved port and not exist yet. Past it a pod
    /// is admitted without a port (its ssh-fwd.io/admission annotation
    /// says why) and the controller gives it one once it exists, without
    /// the endpoint variable: raise it for namespaces that create more SSH
    /// pods than this at once.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub provisional_cap: u32,

    /// The same in all namespaces together, held to half of --port-range.
    /// A forged review can name any namespace, so this is what bounds the
    /// ports anyone who can reach the webhook holds: the rest of the range
    /// stays to the pods the controller serves.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub provisional_cap_total: u32,
}

/// The longest `--reservation-grace`: a reservation whose pod never came
/// into existence must be released within two minutes of its making. The
/// grace counts from when a replica first saw it, which a standby taking
/// over keeps; a controller that just started counts it from the
/// reservation's `creationTimestamp` plus
/// [`CLOCK_SKEW_MARGIN`](crate::controller::reservation::first_seen::CLOCK_SKEW_MARGIN)
/// ([`FirstSeen`](crate::controller::reservation::FirstSeen)). Either way it is released at
/// most this plus that margin after its making, and the watch's delay.
pub const MAX_RESERVATION_GRACE: Duration = Duration::from_secs(90);

/// A flag value the webhook cannot work with.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionFlagError {
    #[error(
        "--webhook-addr needs a certificate: --webhook-cert-dir DIR (with tls.crt and tls.key, e.g. from cert-manager) or --webhook-self-signed"
    )]
    NoCertificate,
    #[error(
        "--env-name or --sshd-config-env-name `{0}` is not a variable name Kubernetes takes: letters, digits, '_', '-' and '.', not starting with a digit"
    )]
    EnvName(String),
    #[error("--keys-dir `{0}` must be an absolute path, e.g. /etc/ssh-fwd")]
    KeysDir(String),
    #[error("--keys-file `{0}` must be a file name without '/', e.g. authorized_keys")]
    KeysFile(String),
    #[error(
        "--reservation-grace {} is too long: at most {}s, so that the port of a pod that never came into existence (refused after admission, a failed create) is free again within two minutes",
        humantime::format_duration(*.0),
        MAX_RESERVATION_GRACE.as_secs()
    )]
    ReservationGrace(Duration),
}

impl AdmissionArgs {
    pub fn check(&self) -> Result<(), AdmissionFlagError> {
        if self.webhook_addr.is_some()
            && self.webhook_cert_dir.is_none()
            && !self.webhook_self_signed
        {
            return Err(AdmissionFlagError::NoCertificate);
        }
        let env_ok = |name: &str| {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        };
        for name in [&self.env_name, &self.sshd_config_env_name] {
            if !env_ok(name) {
                return Err(AdmissionFlagError::EnvName(name.clone()));
            }
        }
        if !self.keys_dir.starts_with('/') || self.keys_dir.contains(['\n', '\0']) {
            return Err(AdmissionFlagError::KeysDir(self.keys_dir.clone()));
        }
        let file = &self.keys_file;
        if file.is_empty() || file.contains(['/', '\0']) || file == "." || file == ".." {
            return Err(AdmissionFlagError::KeysFile(file.clone()));
        }
        if self.reservation_grace > MAX_RESERVATION_GRACE {
            return Err(AdmissionFlagError::ReservationGrace(self.reservation_grace));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::controller::reservation::first_seen::{API_REQUEST_TIMEOUT, CLOCK_SKEW_MARGIN};

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        admission: AdmissionArgs,
    }

    fn check(argv: &[&str]) -> Result<(), AdmissionFlagError> {
        let argv = std::iter::once("controller").chain(argv.iter().copied());
        Flags::try_parse_from(argv).unwrap().admission.check()
    }

    #[test]
    fn the_defaults_pass_and_each_unusable_value_is_refused_by_name() {
        use AdmissionFlagError as E;
        assert_eq!(check(&[]), Ok(()));
        let addr = ["--webhook-addr", "0.0.0.0:8443"];
        assert_eq!(check(&addr), Err(E::NoCertificate));
        assert_eq!(
            check(&[&addr[..], &["--webhook-self-signed"]].concat()),
            Ok(())
        );
        assert_eq!(
            check(&["--env-name", "1ABC"]),
            Err(E::EnvName("1ABC".into()))
        );
        assert_eq!(check(&["--env-name", "A B"]), Err(E::EnvName("A B".into())));
        assert_eq!(
            check(&["--keys-dir", "etc/ssh"]),
            Err(E::KeysDir("etc/ssh".into()))
        );
        assert_eq!(
            check(&["--keys-file", "a/b"]),
            Err(E::KeysFile("a/b".into()))
        );
        assert_eq!(check(&["--keys-file", ".."]), Err(E::KeysFile("..".into())));
        assert_eq!(check(&["--webhook-deadline", "3s"]), Ok(()));
        // A zero deadline (every pod admitted without a port) does not
        // even parse.
        let zero = Flags::try_parse_from(["controller", "--webhook-deadline", "0s"]);
        assert!(zero.is_err());
    }

    #[test]
    fn a_reservation_grace_over_90_seconds_is_refused_naming_the_flag_and_why() {
        assert_eq!(check(&["--reservation-grace", "90s"]), Ok(()));
        let refused = check(&["--reservation-grace", "91s"]).expect_err("91 s is too long");
        let message = refused.to_string();
        assert!(message.contains("--reservation-grace 1m 31s"), "{message}");
        assert!(message.contains("at most 90s"), "{message}");
        assert!(message.contains("within two minutes"), "{message}");
    }

    #[test]
    fn the_longest_grace_with_the_clock_margin_releases_within_two_minutes() {
        // A controller that just started counts from the creation: the
        // grace (or the API server's request timeout, if longer) and the
        // margin for clocks.
        let latest = MAX_RESERVATION_GRACE.max(API_REQUEST_TIMEOUT) + CLOCK_SKEW_MARGIN;
        assert!(latest <= Duration::from_secs(110), "{latest:?}");
    }
}
