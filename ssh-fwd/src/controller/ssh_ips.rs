//! The SSH IPs the controller's Services expose (`--ssh-ip`, one of each
//! family at most) and what follows from their families: the first is the
//! one published (the `ssh` command, the endpoint annotation and variable,
//! the reservations' name); the Services ask for the families in that
//! order, so the published one is the Service's primary family.

use std::net::IpAddr;

use crate::mapping::Family;

/// `--ssh-ip`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshIps {
    published: IpAddr,
    /// The other family's, for a dual-stack Service.
    other: Option<IpAddr>,
}

/// Why `--ssh-ip` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SshIpsError {
    #[error("--ssh-ip is required: the SSH IP the Services expose (IPv4 or IPv6)")]
    None,
    #[error(
        "--ssh-ip {first} and {second} are both {family}; give at most one of each family (the \
         first is the one published, the other makes the Services dual-stack)"
    )]
    SameFamily {
        first: IpAddr,
        second: IpAddr,
        family: Family,
    },
    #[error("--ssh-ip takes one IPv4 and one IPv6 address at most; {count} were given")]
    TooMany { count: usize },
}

impl SshIps {
    /// The flag's values, in the order given.
    pub fn new(ips: &[IpAddr]) -> Result<Self, SshIpsError> {
        match *ips {
            [] => Err(SshIpsError::None),
            [only] => Ok(Self::single(only)),
            [first, second] if Family::of(first) == Family::of(second) => {
                Err(SshIpsError::SameFamily {
                    first,
                    second,
                    family: Family::of(first),
                })
            }
            [first, second] => Ok(Self {
                published: first,
                other: Some(second),
            }),
            _ => Err(SshIpsError::TooMany { count: ips.len() }),
        }
    }

    /// One SSH IP, single-stack.
    pub fn single(ip: IpAddr) -> Self {
        Self {
            published: ip,
            other: None,
        }
    }

    /// The one users are told (unless `--ssh-hostname` names another).
    pub fn published(&self) -> IpAddr {
        self.published
    }

    /// Every SSH IP, the published one first.
    pub fn all(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.published).chain(self.other)
    }

    /// `spec.ipFamilies` of the Services: the published one's family
    /// first (a Service's first family can never change).
    pub fn ip_families(&self) -> Vec<String> {
        self.all().map(|ip| family_name(Family::of(ip))).collect()
    }

    /// `spec.ipFamilyPolicy`: `SingleStack` for one family;
    /// `RequireDualStack` for two, so that a cluster that cannot give the
    /// Service both refuses it (422, naming the policy) instead of making
    /// it single-stack, with the other SSH IP's port closed for good.
    pub fn ip_family_policy(&self) -> &'static str {
        match self.other {
            None => "SingleStack",
            Some(_) => "RequireDualStack",
        }
    }
}

/// A family as `spec.ipFamilies` names it.
fn family_name(family: Family) -> String {
    family.to_string()
}

/// `HOST:PORT` as the endpoint annotation and variable show it: an IPv6
/// address (or a host with a colon) in brackets (`[2001:db8::10]:8022`),
/// as OpenSSH, URLs and most tools read a host and port.
pub fn endpoint(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The command users paste: `ssh USER@HOST -p PORT`. With `-p`, OpenSSH
/// takes an IPv6 address after `@` as it is, without brackets.
pub fn command(user: &str, host: &str, port: u16) -> String {
    format!("ssh {user}@{host} -p {port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(texts: &[&str]) -> Vec<IpAddr> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn one_ip_makes_single_stack_services_of_its_family() {
        let v4 = SshIps::new(&ips(&["198.18.0.10"])).unwrap();
        assert_eq!(v4.ip_families(), ["IPv4"]);
        assert_eq!(v4.ip_family_policy(), "SingleStack");
        let v6 = SshIps::new(&ips(&["2001:db8::10"])).unwrap();
        assert_eq!(v6.ip_families(), ["IPv6"]);
        assert_eq!(v6.published(), "2001:db8::10".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn one_of_each_family_makes_dual_stack_services_the_first_published_and_primary() {
        let both = SshIps::new(&ips(&["2001:db8::10", "198.18.0.10"])).unwrap();
        assert_eq!(both.ip_families(), ["IPv6", "IPv4"]);
        assert_eq!(both.ip_family_policy(), "RequireDualStack");
        assert_eq!(both.published(), "2001:db8::10".parse::<IpAddr>().unwrap());
        assert_eq!(both.all().count(), 2);
    }

    #[test]
    fn two_of_one_family_or_more_than_two_are_refused_naming_the_flag() {
        let e = SshIps::new(&ips(&["198.18.0.10", "198.18.0.11"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--ssh-ip 198.18.0.10 and 198.18.0.11 are both IPv4"),
            "{e}"
        );
        let e = SshIps::new(&ips(&["198.18.0.10", "2001:db8::1", "198.18.0.11"])).unwrap_err();
        assert_eq!(e, SshIpsError::TooMany { count: 3 });
        assert_eq!(SshIps::new(&[]), Err(SshIpsError::None));
    }

    #[test]
    fn an_ipv6_endpoint_is_bracketed_and_the_command_is_not() {
        assert_eq!(endpoint("198.18.0.10", 8022), "198.18.0.10:8022");
        assert_eq!(endpoint("ssh.example.org", 8022), "ssh.example.org:8022");
        assert_eq!(endpoint("2001:db8::10", 8022), "[2001:db8::10]:8022");
        assert_eq!(
            command("ucloud", "2001:db8::10", 8022),
            "ssh ucloud@2001:db8::10 -p 8022"
        );
    }
}
