//! Who may open a connection through a mapping, and how fast: source
//! ranges ([`Cidr`]), the per-source rate of new connections
//! ([`SynRate`]), and the [`Guard`] each mapping carries from its source to
//! the maps. Parsing is strict, and every refusal names the value and how
//! to write it, because the same parsers read the mappings file, the
//! agent's flags and Kubernetes objects. What a tenant writes only narrows
//! the agent's flags (`floor.rs`).

use std::{
    collections::BTreeSet,
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

use ssh_fwd_common::maps::{Guard as Rate, MAX_ALLOW_PER_MAPPING};

use super::{Family, printable};

mod floor;

pub use floor::{Cut, intersect};

/// An address range of either family: an address whose bits past the
/// prefix are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    ip: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Every IPv4 address: `0.0.0.0/0`, the least range in order (IPv4
    /// ranges sort before IPv6 ones).
    pub const ALL: Self = Self {
        ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        prefix: 0,
    };

    /// `ip/prefix`, refused if the prefix is longer than the family's
    /// address or `ip` has bits set past it.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Self> {
        let range = Self::masked(ip, prefix);
        (prefix <= max_prefix(ip) && range.ip == ip).then_some(range)
    }

    /// The range of `ip/prefix` (a prefix past the address's length is
    /// its length), host bits cleared.
    pub fn masked(ip: IpAddr, prefix: u8) -> Self {
        let prefix = prefix.min(max_prefix(ip));
        let ip = match ip {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        };
        Self { ip, prefix }
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn family(&self) -> Family {
        Family::of(self.ip)
    }

    /// Whether `addr` is in the range (never, for an address of the other
    /// family).
    pub fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.ip.is_ipv4() && Self::masked(addr, self.prefix).ip == self.ip
    }
}

/// The longest prefix of `ip`'s family.
fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

/// Why a source range was refused. The value is quoted escaped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error(
        "`{0}` is not an address range; write ADDRESS/PREFIX, like 192.0.2.0/24 or \
         2001:db8::/32"
    )]
    Syntax(String),
    #[error("`{value}`: prefix /{prefix} is longer than {max}; an {family} prefix is /0 to /{max}")]
    Prefix {
        value: String,
        prefix: String,
        family: Family,
        max: u8,
    },
    #[error(
        "`{value}` has bits set past its /{prefix} prefix; write {range}/{prefix} for the range, \
         or {ip}/{max} for the one address"
    )]
    HostBits {
        value: String,
        ip: IpAddr,
        prefix: u8,
        range: IpAddr,
        max: u8,
    },
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `ADDRESS/PREFIX`, or a bare address for its /32 (IPv4) or /128
    /// (IPv6).
    fn from_str(value: &str) -> Result<Self, CidrError> {
        let shown = || printable(value);
        let trimmed = value.trim();
        let (addr, prefix) = match trimmed.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (trimmed, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| CidrError::Syntax(shown()))?;
        let max = max_prefix(ip);
        let prefix = match prefix {
            None => max,
            Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(CidrError::Syntax(shown()));
            }
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(CidrError::Prefix {
                        value: shown(),
                        prefix: printable(p),
                        family: Family::of(ip),
                        max,
                    });
                }
            },
        };
        Cidr::new(ip, prefix).ok_or_else(|| CidrError::HostBits {
            value: shown(),
            ip,
            prefix,
            range: Cidr::masked(ip, prefix).ip,
            max,
        })
    }
}

/// Why a list of source ranges was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangesError {
    #[error("source range #{index}: {error}")]
    Range { index: usize, error: CidrError },
    #[error(
        "{count} source ranges; a mapping holds at most {MAX_ALLOW_PER_MAPPING}: merge them into \
         wider ranges"
    )]
    TooMany { count: usize },
}

/// A list of source ranges as a mapping's allowlist (sorted, duplicates
/// merged).
pub fn parse_ranges<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeSet<Cidr>, RangesError> {
    let mut out = BTreeSet::new();
    for (i, value) in values.into_iter().enumerate() {
        match value.parse::<Cidr>() {
            Ok(cidr) => {
                out.insert(cidr);
            }
            Err(error) => {
                return Err(RangesError::Range {
                    index: i + 1,
                    error,
                });
            }
        }
    }
    if out.len() > MAX_ALLOW_PER_MAPPING as usize {
        return Err(RangesError::TooMany { count: out.len() });
    }
    Ok(out)
}

/// The most new connections a second `--syn-rate` may allow per source.
pub const MAX_SYN_RATE: u32 = 1_000_000;

/// A rate of new connections per source: `N/s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SynRate(pub u32);

impl FromStr for SynRate {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let shown = printable(value);
        let Some(n) = value.trim().strip_suffix("/s") else {
            return Err(format!(
                "`{shown}` is not a rate; write new connections per second per source, like 20/s"
            ));
        };
        match n.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_SYN_RATE).contains(&n) => Ok(Self(n)),
            _ => Err(format!(
                "`{shown}`: the rate is a whole number of connections per second from 1 to \
                 {MAX_SYN_RATE}, like 20/s"
            )),
        }
    }
}

impl fmt::Display for SynRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.0)
    }
}

/// Who may connect through one mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Allow {
    /// The source said nothing: the agent's `--allow`, or every source.
    #[default]
    Default,
    /// Every source, whatever `--allow` says.
    Open,
    /// Only these ranges (none: no source at all).
    Only(BTreeSet<Cidr>),
}

/// How fast one source may open connections through one mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Limit {
    /// The source said nothing: the agent's `--syn-rate`, or no limit.
    #[default]
    Default,
    /// No limit, whatever `--syn-rate` says.
    Off,
    /// This rate, with the agent's `--syn-burst`.
    Rate(SynRate),
    /// As the maps hold it.
    Exact(Rate),
}

/// A mapping's guard, as its source states it; [`Defaults::resolve`]
/// fills in what the agent's flags say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    pub allow: Allow,
    pub limit: Limit,
    /// Enforce the allowlist on every segment (`--enforce-established`).
    pub enforce_established: bool,
    /// The backend is draining (a pod being deleted that still serves):
    /// its open connections go on, new ones are refused.
    pub draining: bool,
}

impl Guard {
    /// The ranges the kernel checks, if the mapping has a list.
    pub fn ranges(&self) -> Option<&BTreeSet<Cidr>> {
        match &self.allow {
            Allow::Only(ranges) => Some(ranges),
            Allow::Default | Allow::Open => None,
        }
    }

    /// The rate the kernel applies, if any.
    pub fn rate(&self) -> Option<Rate> {
        match self.limit {
            Limit::Exact(rate) => Some(rate),
            Limit::Rate(SynRate(n)) => Some(Rate::new(n, default_burst(n))),
            Limit::Default | Limit::Off => None,
        }
    }
}

/// The burst when `--syn-burst` is not given: two seconds' worth.
pub fn default_burst(rate: u32) -> u32 {
    rate.saturating_mul(2)
}

/// What the agent's flags add to the mappings' own guards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// `--allow`: the list of a mapping that has none of its own.
    pub allow: BTreeSet<Cidr>,
    /// `--syn-rate`.
    pub syn_rate: Option<SynRate>,
    /// `--syn-burst`: the burst of every rate, `--syn-rate`'s or a
    /// mapping's own.
    pub syn_burst: Option<u32>,
    /// `--enforce-established`.
    pub enforce_established: bool,
}

impl Defaults {
    /// `guard`, the operator's own (a mappings-file entry), with the
    /// defaults filled in for a mapping of `family`: only
    /// `Open`, `Only`, `Off` and `Exact` remain. A mapping without a list
    /// of its own gets `--allow`'s ranges of its family; if `--allow` has
    /// ranges only of the other family, none (no source at all: the
    /// operator restricted who may connect, and named no one of this
    /// family). An entry's own list or rate replaces the flags'; a tenant's
    /// goes through [`Defaults::narrow`] instead.
    pub fn resolve(&self, guard: &Guard, family: Family) -> Guard {
        let allow = match &guard.allow {
            Allow::Default if self.allow.is_empty() => Allow::Open,
            Allow::Default => Allow::Only(
                (self.allow.iter())
                    .filter(|r| r.family() == family)
                    .copied()
                    .collect(),
            ),
            other => other.clone(),
        };
        let rate = match guard.limit {
            Limit::Default => self.syn_rate,
            Limit::Rate(rate) => Some(rate),
            Limit::Off | Limit::Exact(_) => None,
        };
        let limit = match (guard.limit, rate) {
            (Limit::Exact(rate), _) => Limit::Exact(rate),
            (_, Some(SynRate(n))) => {
                Limit::Exact(Rate::new(n, self.syn_burst.unwrap_or(default_burst(n))))
            }
            (_, None) => Limit::Off,
        };
        Guard {
            enforce_established: self.enforce_established && matches!(allow, Allow::Only(_)),
            allow,
            limit,
            draining: guard.draining,
        }
    }
}

#[cfg(test)]
mod tests;
