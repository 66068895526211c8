//! One `--external-iface` value (or one entry of a Node's `ssh-fwd.io/iface`
//! annotation) as read, and what a name or a pattern picks among the
//! node's interfaces. Pure.

use std::{fmt, net::IpAddr, str::FromStr};

use super::Unresolved;
use crate::datapath::netdev::{Kind, Link};

/// How one external interface is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfaceRule {
    /// `eth0`: the interface of that name, whatever its state.
    Name(String),
    /// `eno*`, `bond+`: the one interface whose name matches that is up
    /// and not a port of another device (a bond's or a bridge's).
    Pattern(String),
    /// `auto`: the interfaces of the default routes.
    DefaultRoute,
    /// `auto:ADDR`: the interface of the route to ADDR, an address of the
    /// network clients come from.
    RouteTo(IpAddr),
}

impl IfaceRule {
    /// The rule's kind, as the log and the metric's `chosen_by` name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Name(_) => "name",
            Self::Pattern(_) => "pattern",
            Self::DefaultRoute => "default-route",
            Self::RouteTo(_) => "route-to",
        }
    }
}

impl fmt::Display for IfaceRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(s) | Self::Pattern(s) => f.write_str(s),
            Self::DefaultRoute => f.write_str(AUTO),
            Self::RouteTo(ip) => write!(f, "{AUTO}:{ip}"),
        }
    }
}

/// A rule equals the text that reads as it (`auto:192.0.2.1`, `bond+`).
impl PartialEq<&str> for IfaceRule {
    fn eq(&self, written: &&str) -> bool {
        written.parse::<Self>().is_ok_and(|rule| rule == *self)
    }
}

const AUTO: &str = "auto";

/// The longest interface name Linux takes (`IFNAMSIZ` less the NUL).
const NAME_MAX: usize = 15;

impl FromStr for IfaceRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == AUTO {
            return Ok(Self::DefaultRoute);
        }
        if let Some(addr) = s.strip_prefix("auto:") {
            let bare = addr
                .strip_prefix('[')
                .and_then(|a| a.strip_suffix(']'))
                .unwrap_or(addr);
            return bare.parse().map(Self::RouteTo).map_err(|_| {
                format!(
                    "`{s}`: after `auto:` comes an IP address clients connect from (or one of \
                     their network), e.g. auto:192.0.2.1 or auto:2001:db8::1"
                )
            });
        }
        let body = s.strip_suffix('+').unwrap_or(s);
        let bad = |why: &str| {
            Err(format!(
                "`{s}`: {why}; use an interface name (eth0), a pattern (eno*, bond+), auto (the \
                 default route's interface) or auto:ADDR (the interface of the route to ADDR)"
            ))
        };
        if body.is_empty() {
            return bad("empty");
        }
        if let Some(c) = body
            .chars()
            .find(|c| c.is_whitespace() || matches!(c, '/' | ':' | '+' | ','))
        {
            return bad(&format!("{c:?} cannot be part of an interface name"));
        }
        if body.contains('*') || s.ends_with('+') {
            return Ok(Self::Pattern(s.to_owned()));
        }
        if s.len() > NAME_MAX || s == "." || s == ".." {
            return bad("not an interface name Linux takes (at most 15 bytes)");
        }
        Ok(Self::Name(s.to_owned()))
    }
}

/// Whether `name` matches `pattern`: `*` stands for any run of characters,
/// a trailing `+` for any suffix (Cilium's `eth+`), empty ones included.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('+') {
        Some(prefix) => glob(&format!("{prefix}*"), name),
        None => glob(pattern, name),
    }
}

/// `*`-only glob, by the classic backtracking walk.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Whether a pattern may pick `link`: up, not the loopback, and not a port
/// of another device (a bond's member or a bridge's port: traffic is
/// addressed to the master).
fn eligible(link: &Link) -> bool {
    link.up && link.kind != Kind::Loopback && link.master.is_none()
}

/// The one interface `pattern` picks among `links`.
pub fn pick<'a>(pattern: &str, links: &'a [Link]) -> Result<&'a Link, Unresolved> {
    let found: Vec<&Link> = links
        .iter()
        .filter(|l| matches(pattern, &l.name) && eligible(l))
        .collect();
    match found[..] {
        [one] => Ok(one),
        [] => Err(Unresolved::PatternNone {
            pattern: pattern.to_owned(),
            present: present(links),
        }),
        _ => Err(Unresolved::PatternSeveral {
            pattern: pattern.to_owned(),
            matched: found.iter().map(|l| l.name.clone()).collect(),
        }),
    }
}

/// The interfaces present, each with why a pattern would pass it over:
/// `lo (loopback), eno1 (port of bond0), eno2 (down), bond0`.
pub fn present(links: &[Link]) -> String {
    let name_of = |index: u32| {
        links
            .iter()
            .find(|l| l.index == index)
            .map_or_else(|| format!("#{index}"), |l| l.name.clone())
    };
    let described: Vec<String> = links
        .iter()
        .map(|l| match (l.kind, l.master, l.up) {
            (Kind::Loopback, ..) => format!("{} (loopback)", l.name),
            (_, Some(master), _) => format!("{} (port of {})", l.name, name_of(master)),
            (_, None, false) => format!("{} (down)", l.name),
            (_, None, true) => l.name.clone(),
        })
        .collect();
    if described.is_empty() {
        "none".into()
    } else {
        described.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> IfaceRule {
        s.parse().unwrap()
    }

    #[test]
    fn a_value_is_a_name_a_pattern_auto_or_the_route_to_an_address() {
        assert_eq!(rule("eth0"), IfaceRule::Name("eth0".into()));
        assert_eq!(rule("eno*"), IfaceRule::Pattern("eno*".into()));
        assert_eq!(rule("bond+"), IfaceRule::Pattern("bond+".into()));
        assert_eq!(rule("en*s0"), IfaceRule::Pattern("en*s0".into()));
        assert_eq!(rule("auto"), IfaceRule::DefaultRoute);
        assert_eq!(
            rule("auto:192.0.2.1"),
            IfaceRule::RouteTo("192.0.2.1".parse().unwrap())
        );
        for v6 in ["auto:2001:db8::1", "auto:[2001:db8::1]"] {
            assert_eq!(rule(v6), IfaceRule::RouteTo("2001:db8::1".parse().unwrap()));
        }
        for written in ["eth0", "eno*", "bond+", "auto", "auto:2001:db8::1"] {
            assert_eq!(rule(written).to_string(), written);
            assert_eq!(rule(written), written);
        }
    }

    #[test]
    fn a_value_no_interface_can_have_is_refused_with_the_forms_that_work() {
        for bad in [
            "",
            "+",
            "eth 0",
            "eth0/1",
            "b+nd",
            "a,b",
            "auto:",
            "auto:eth0",
        ] {
            let e = bad.parse::<IfaceRule>().unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
            assert!(
                e.contains("auto:") && (e.contains("eno*") || e.contains("192.0.2.1")),
                "{bad}: {e}"
            );
        }
        let e = "averyveryverylongname0".parse::<IfaceRule>().unwrap_err();
        assert!(e.contains("at most 15 bytes"), "{e}");
    }

    #[test]
    fn a_star_is_any_run_and_a_trailing_plus_any_suffix() {
        assert!(matches("eno*", "eno1"));
        assert!(matches("eno*", "eno"));
        assert!(!matches("eno*", "eth0"));
        assert!(matches("bond+", "bond0"));
        assert!(matches("bond+", "bond"));
        assert!(!matches("bond+", "xbond0"));
        assert!(matches("en*s0", "enp3s0"));
        assert!(!matches("en*s0", "enp3s0f1"));
        assert!(matches("*0", "bond0"));
        assert!(matches("eth0", "eth0"));
        assert!(!matches("eth0", "eth01"));
        assert!(matches("e*p*s*", "enp3s0f1"));
    }

    fn link(index: u32, name: &str, up: bool, master: Option<u32>) -> Link {
        Link {
            index,
            name: name.into(),
            up,
            master,
            kind: if index == 1 {
                Kind::Loopback
            } else {
                Kind::Other
            },
            ..Link::default()
        }
    }

    /// A bare-metal node: a four-port NIC, two ports bonded, one cabled
    /// apart, one dark.
    fn node() -> Vec<Link> {
        vec![
            link(1, "lo", true, None),
            link(2, "eno1", true, Some(6)),
            link(3, "eno2", true, Some(6)),
            link(4, "eno3", true, None),
            link(5, "eno4", false, None),
            link(6, "bond0", true, None),
        ]
    }

    #[test]
    fn a_pattern_picks_the_one_match_that_is_up_and_no_ports_member() {
        let links = node();
        assert_eq!(pick("bond+", &links).unwrap().name, "bond0");
        // eno1 and eno2 are the bond's; eno4 is down.
        assert_eq!(pick("eno*", &links).unwrap().name, "eno3");
        // Never the loopback.
        assert!(matches!(
            pick("l+", &links),
            Err(Unresolved::PatternNone { .. })
        ));
    }

    #[test]
    fn a_pattern_matching_nothing_usable_names_every_interface_and_why() {
        let e = pick("eth+", &node()).unwrap_err();
        assert!(e.may_appear_later(), "a bond may come up later");
        assert_eq!(
            e.to_string(),
            "`eth+` matches no interface that is up and not a port of another (a bond's \
             or a bridge's); present: lo (loopback), eno1 (port of bond0), eno2 (port of bond0), \
             eno3, eno4 (down), bond0. Name the interface clients reach this node on (--external-iface \
             NAME, or the Node annotation ssh-fwd.io/iface), use a pattern that matches it, or \
             auto (the default route's interface)"
        );
    }

    #[test]
    fn a_pattern_matching_several_names_them_and_asks_for_one() {
        let mut links = node();
        links[4].up = true; // eno4 cabled too
        let e = pick("eno*", &links).unwrap_err();
        assert!(!e.may_appear_later());
        assert_eq!(
            e.to_string(),
            "`eno*` matches several interfaces that are up: eno3, eno4. Name the one \
             clients reach this node on (--external-iface eno3), narrow the pattern, give each its own \
             --external-iface if every one is external, or use auto (the default route's interface)"
        );
    }
}
