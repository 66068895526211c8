//! What users trust: one line for `~/.ssh/known_hosts`,
//! `@cert-authority [HOST]:* ssh-ed25519 AAAA...`, which accepts any job's
//! certificate on any port of HOST, and refuses everything else there
//! (with `StrictHostKeyChecking yes`, "Host key verification failed").
//!
//! During a rotation the old CA's line is published beside the new one
//! until the date the operator set (`--host-ca-previous-until`); after it,
//! only the new one.
//!
//! The controller publishes these lines in a ConfigMap every authenticated
//! user may read ([`ConfigMap keys`](KNOWN_HOSTS_KEY)); `ssh-fwd
//! known-hosts` prints them.

use std::time::SystemTime;

/// The published ConfigMap's key holding the known_hosts lines.
pub const KNOWN_HOSTS_KEY: &str = "known_hosts";
/// Its key holding the host name the lines are for.
pub const HOST_KEY: &str = "host";
/// Its key holding the CA that signs now (`ssh-ed25519 AAAA...`).
pub const CA_KEY: &str = "ca.pub";

/// `@cert-authority [host]:* KEY`: `[host]:*` matches every port of host
/// (a bare `host` would too, for OpenSSH 9.2; the port pattern says what
/// is meant).
pub fn line(host: &str, ca_public: &str) -> String {
    format!("@cert-authority [{host}]:* {ca_public}")
}

/// A CA trusted beside the current one until a date.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Previous {
    pub public: String,
    pub until: SystemTime,
}

/// The lines users put in known_hosts at `now`: the current CA's, then the
/// previous CA's while it is still trusted. Each ends with a newline.
pub fn known_hosts(
    host: &str,
    current: &str,
    previous: Option<&Previous>,
    now: SystemTime,
) -> String {
    let mut out = line(host, current) + "\n";
    if let Some(previous) = previous.filter(|p| now < p.until && p.public != current) {
        out += &line(host, &previous.public);
        out.push('\n');
    }
    out
}

/// An `ssh_config` block for `host` that refuses a job whose host key its
/// known_hosts does not vouch for, instead of asking.
pub fn ssh_config(host: &str) -> String {
    format!("Host {host}\n    StrictHostKeyChecking yes\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NEW: &str = "ssh-ed25519 AAAAnew";
    const OLD: &str = "ssh-ed25519 AAAAold";

    #[test]
    fn the_line_matches_every_port_of_the_host() {
        assert_eq!(
            line("ssh.example.org", NEW),
            "@cert-authority [ssh.example.org]:* ssh-ed25519 AAAAnew"
        );
        assert_eq!(
            line("2001:db8::10", NEW),
            "@cert-authority [2001:db8::10]:* ssh-ed25519 AAAAnew"
        );
    }

    #[test]
    fn the_previous_ca_is_published_until_its_date_then_only_the_new_one() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let previous = Previous {
            public: OLD.into(),
            until: now + Duration::from_secs(3600),
        };
        let during = known_hosts("h", NEW, Some(&previous), now);
        assert_eq!(
            during,
            "@cert-authority [h]:* ssh-ed25519 AAAAnew\n@cert-authority [h]:* ssh-ed25519 AAAAold\n"
        );
        let after = known_hosts("h", NEW, Some(&previous), previous.until);
        assert_eq!(after, "@cert-authority [h]:* ssh-ed25519 AAAAnew\n");
        assert_eq!(known_hosts("h", NEW, None, now), after);
        // The same CA named as its own predecessor: one line.
        let same = Previous {
            public: NEW.into(),
            until: previous.until,
        };
        assert_eq!(known_hosts("h", NEW, Some(&same), now), after);
    }

    #[test]
    fn the_ssh_config_block_checks_strictly() {
        assert_eq!(
            ssh_config("ssh.example.org"),
            "Host ssh.example.org\n    StrictHostKeyChecking yes\n"
        );
    }
}
