//! Checks of the flags that end up in the published `ssh USER@HOST -p PORT`
//! command: users paste it into a shell, so it must be words a shell and ssh
//! take as they are.

use super::{
    super::ssh_ips::{SshIps, SshIpsError},
    ControllerArgs,
};
use crate::args::ServiceStyle;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error(
        "--ssh-user `{0}` must be one user name users can type, e.g. ucloud: letters, digits, '.', '_' and '-', not starting with '-'"
    )]
    User(String),
    #[error(
        "--ssh-hostname `{0}` must be a host name or IP address users can type, e.g. ssh.example.org: letters, digits, '.', '-' and ':', not starting with '-'; leave the flag out to show --ssh-ip"
    )]
    Hostname(String),
    #[error(
        "--expose-as {made} makes Services the agents would not honour (--honour-styles {honoured}); add `{made}` to --honour-styles here and on the agents, or choose another --expose-as"
    )]
    StyleNotHonoured {
        made: ServiceStyle,
        honoured: String,
    },
    #[error(transparent)]
    SshIps(#[from] SshIpsError),
}

/// `--ssh-ip`, checked: one address, or one of each family.
pub fn ssh_ips(args: &ControllerArgs) -> Result<SshIps, FlagError> {
    Ok(SshIps::new(&args.ssh_ips)?)
}

/// The host name shown in the command: --ssh-hostname, else --ssh-ip.
pub fn check(args: &ControllerArgs) -> Result<String, FlagError> {
    let made = args.service_style;
    if !args.service_styles.contains(&made) {
        let honoured: Vec<String> = (args.service_styles.iter())
            .map(ToString::to_string)
            .collect();
        return Err(FlagError::StyleNotHonoured {
            made,
            honoured: honoured.join(","),
        });
    }
    if !is_word(&args.ssh_user, &['.', '_', '-']) {
        return Err(FlagError::User(args.ssh_user.clone()));
    }
    match &args.ssh_hostname {
        Some(host) if !is_word(host, &['.', '-', ':']) => Err(FlagError::Hostname(host.clone())),
        Some(host) => Ok(host.clone()),
        None => Ok(ssh_ips(args)?.published().to_string()),
    }
}

/// Non-empty ASCII letters, digits and `extra`, not starting with '-' (ssh
/// would read it as an option).
fn is_word(s: &str, extra: &[char]) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ControllerArgs {
        let argv = ["--ssh-ip", "198.18.0.10"];
        super::super::parse(argv.iter().chain(extra).copied()).unwrap()
    }

    #[test]
    fn the_host_shown_is_the_hostname_flag_else_the_ip() {
        assert_eq!(check(&args(&[])), Ok("198.18.0.10".into()));
        let named = args(&["--ssh-hostname", "ssh.example.org", "--ssh-user", "a.b_c-1"]);
        assert_eq!(check(&named), Ok("ssh.example.org".into()));
        assert!(check(&args(&["--ssh-hostname", "2001:db8::1"])).is_ok());
    }

    #[test]
    fn the_first_ssh_ip_is_shown_and_two_of_one_family_are_refused() {
        let parse = |argv: &[&str]| super::super::parse(argv.iter().copied()).unwrap();
        let v6_first = parse(&["--ssh-ip", "2001:db8::10", "--ssh-ip", "198.18.0.10"]);
        assert_eq!(check(&v6_first), Ok("2001:db8::10".into()));
        assert_eq!(ssh_ips(&v6_first).unwrap().ip_families(), ["IPv6", "IPv4"]);
        let twice = parse(&["--ssh-ip", "198.18.0.10", "--ssh-ip", "198.18.0.11"]);
        let error = check(&twice).unwrap_err().to_string();
        assert!(error.contains("are both IPv4"), "{error}");
        assert!(super::super::parse([]).is_err(), "--ssh-ip is required");
    }

    #[test]
    fn an_activity_interval_of_0s_turns_the_mirror_off() {
        // docs/activity.md and --help say so; the leader then watches no
        // activity ConfigMap (`Leadership::watch_activity`).
        assert!(
            args(&["--activity-interval", "0s"])
                .activity_interval
                .is_zero()
        );
        assert_eq!(
            args(&[]).activity_interval,
            std::time::Duration::from_secs(300)
        );
    }

    #[test]
    fn the_style_made_must_be_one_the_agents_honour() {
        let lone = args(&["--honour-styles", "externalips"]);
        let err = check(&lone).unwrap_err().to_string();
        assert!(err.contains("--expose-as loadbalancer"), "{err}");
        assert!(err.contains("(--honour-styles externalips)"), "{err}");
        let legacy = args(&[
            "--honour-styles",
            "externalips",
            "--expose-as",
            "externalips",
        ]);
        assert!(check(&legacy).is_ok());
    }

    #[test]
    fn hostnames_and_users_a_shell_or_ssh_would_misread_are_refused_naming_the_flag() {
        for bad in [
            "",
            " ",
            "ssh host",
            "h;rm -rf ~",
            "$(id)",
            "-oProxyCommand=x",
            "h`",
            "h\n",
        ] {
            let error = check(&args(&[&format!("--ssh-hostname={bad}")])).unwrap_err();
            assert_eq!(error, FlagError::Hostname(bad.into()));
            let message = error.to_string();
            assert!(message.starts_with("--ssh-hostname `"), "{message}");
            assert!(message.contains("e.g. ssh.example.org"), "{message}");
            let error = check(&args(&[&format!("--ssh-user={bad}")])).unwrap_err();
            assert!(error.to_string().starts_with("--ssh-user `"), "{error}");
        }
    }
}
