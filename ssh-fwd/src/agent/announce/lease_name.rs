//! The names SSH IPs go by in the Kubernetes API: each one's Lease, and
//! the value of its [`vocabulary::ANNOUNCE`](crate::vocabulary::ANNOUNCE)
//! label, both DNS-1123 whatever the family.

use std::net::IpAddr;

/// The Lease of `ip`: `ssh-fwd-announce-` and [`lease_label`].
pub fn lease_name(ip: IpAddr) -> String {
    format!("ssh-fwd-announce-{}", lease_label(ip))
}

/// `ip` as a Lease's name and label value may hold it (DNS-1123: lower
/// case letters, digits and `-`, ending in a letter or digit). IPv4 with
/// its dots as dashes (`198-18-0-10`); IPv6 as its eight groups in full,
/// four hex digits each, joined by dashes
/// (`fd00-0198-0000-0000-0000-0000-0000-0010`): `::` would leave a
/// trailing or doubled dash and `:` is not allowed, and the full form is
/// one text per address and never an IPv4 one's (8 groups, not 4).
pub fn lease_label(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string().replace('.', "-"),
        IpAddr::V6(ip) => ip.segments().map(|group| format!("{group:04x}")).join("-"),
    }
}

/// The value of the Lease's
/// [`vocabulary::ANNOUNCE`](crate::vocabulary::ANNOUNCE) label: the IPv4
/// address as it is written, an IPv6 one as [`lease_label`] (a label value
/// may not hold `:`).
pub fn label_value(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(_) => lease_label(ip),
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, net::Ipv4Addr};

    use super::*;

    #[test]
    fn each_ssh_ip_has_a_lease_of_its_own_named_after_it() {
        let v4 = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10));
        assert_eq!(lease_name(v4), "ssh-fwd-announce-198-18-0-10");
        assert_eq!(label_value(v4), "198.18.0.10");
    }

    /// DNS-1123: a Lease's name is a subdomain (at most 253 characters,
    /// lower case letters, digits, `-` and `.`, a letter or digit at each
    /// end) and a label value at most 63 characters of the same.
    fn valid(name: &str, max: usize) -> bool {
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        name.len() <= max
            && edge(name.chars().next())
            && edge(name.chars().last())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    }

    #[test]
    fn an_ipv6_ssh_ip_has_a_valid_lease_name_of_its_own() {
        let ip: IpAddr = "fd00:198::10".parse().unwrap();
        assert_eq!(
            lease_name(ip),
            "ssh-fwd-announce-fd00-0198-0000-0000-0000-0000-0000-0010"
        );
        let odd = [
            "::",
            "::1",
            "2001:db8::",
            "fd00:198::10",
            "::ffff:198.18.0.10",
            "fe80::1:2:3:4:5",
        ];
        let mut names = BTreeSet::new();
        for text in odd {
            let ip: IpAddr = text.parse().unwrap();
            assert!(valid(&lease_name(ip), 253), "{text}: {}", lease_name(ip));
            assert!(valid(&label_value(ip), 63), "{text}: {}", label_value(ip));
            assert!(names.insert(lease_name(ip)), "{text}: one name per address");
        }
        let v4 = lease_name(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)));
        assert!(!names.contains(&v4), "never an IPv4 one's");
    }
}
