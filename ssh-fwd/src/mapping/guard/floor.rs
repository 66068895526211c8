//! The operator's floor under a tenant's guard.
//!
//! In Kubernetes mode a Service states who may connect through its ports
//! and how fast, and whoever may edit the Service writes it: a tenant with
//! the standard `edit` role in its namespace. The agent's `--allow` and
//! `--syn-rate` are the operator's. A tenant's guard may only narrow them
//! ([`Defaults::narrow`]): its ranges are intersected with `--allow`, its
//! rate is the lower of the two, and `off` leaves `--syn-rate` in force.
//! What the floor cut is handed back, for the agent to tell once.
//!
//! The mappings file is the operator's own input, and
//! [`Defaults::resolve`] lets an entry replace the flags instead.

use std::{
    collections::BTreeSet,
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use super::{Allow, Cidr, Defaults, Guard, Limit, SynRate};
use crate::mapping::Family;

impl Cidr {
    /// Every address of `family`: `0.0.0.0/0` or `::/0`.
    pub fn everything(family: Family) -> Self {
        let ip = match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        Self { ip, prefix: 0 }
    }

    /// Whether every address of `other` is in this range (never, for a
    /// range of the other family).
    pub fn covers(&self, other: &Cidr) -> bool {
        self.prefix <= other.prefix && self.contains(other.ip)
    }

    /// The two halves of this range; `None` for a single address.
    fn halves(&self) -> Option<[Cidr; 2]> {
        let prefix = self.prefix + 1;
        let high = match self.ip {
            IpAddr::V4(v4) if prefix <= 32 => {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) | 1 << (32 - prefix)))
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) | 1 << (128 - prefix)))
            }
            _ => return None,
        };
        Some([
            Cidr {
                ip: self.ip,
                prefix,
            },
            Cidr { ip: high, prefix },
        ])
    }
}

/// The addresses both lists admit, as ranges. Two ranges are nested or
/// disjoint, so each pair meets in the smaller of the two or not at all;
/// a range inside another of the result is left out. Ranges of different
/// families never meet.
pub fn intersect(a: &BTreeSet<Cidr>, b: &BTreeSet<Cidr>) -> BTreeSet<Cidr> {
    let met: BTreeSet<Cidr> = (a.iter())
        .flat_map(|x| {
            b.iter().filter_map(move |y| {
                if x.covers(y) {
                    Some(*y)
                } else if y.covers(x) {
                    Some(*x)
                } else {
                    None
                }
            })
        })
        .collect();
    (met.iter())
        .filter(|r| !met.iter().any(|o| o != *r && o.covers(r)))
        .copied()
        .collect()
}

/// Whether `ranges` together admit every address of `range`: one covers
/// it, or ranges inside it cover each of its halves.
fn admits_all(ranges: &BTreeSet<Cidr>, range: &Cidr) -> bool {
    if ranges.iter().any(|r| r.covers(range)) {
        return true;
    }
    // Only ranges inside `range` can still fill it; without one, nothing
    // does. Each step halves the range, so this recurses at most 128 deep.
    if !ranges.iter().any(|r| range.covers(r)) {
        return false;
    }
    range
        .halves()
        .is_some_and(|[low, high]| admits_all(ranges, &low) && admits_all(ranges, &high))
}

/// What the operator's floor cut from a tenant's guard.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cut {
    /// A range `--allow` admits only part of: `kept` (empty: none of it).
    Range { asked: Cidr, kept: Vec<Cidr> },
    /// A rate above `--syn-rate` (`None`: `off`): `--syn-rate` applies.
    Rate {
        asked: Option<SynRate>,
        kept: SynRate,
    },
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Range { asked, kept } if kept.is_empty() => {
                write!(
                    f,
                    "source range {asked} is outside --allow: none of it admitted"
                )
            }
            Self::Range { asked, kept } => {
                write!(f, "source range {asked} cut by --allow to ")?;
                for (i, range) in kept.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{range}")?;
                }
                Ok(())
            }
            Self::Rate { asked: None, kept } => {
                write!(f, "syn-rate off does not lift --syn-rate: {kept} applies")
            }
            Self::Rate {
                asked: Some(asked),
                kept,
            } => write!(f, "syn-rate {asked} is above --syn-rate: {kept} applies"),
        }
    }
}

impl Defaults {
    /// A tenant's `asked` guard for a mapping of `family`, no wider than
    /// the flags, resolved as [`Defaults::resolve`] does, and what the
    /// flags cut from it.
    ///
    /// - Ranges: with `--allow`, the intersection of the tenant's list
    ///   with `--allow`'s ranges of `family` (none of them: no source at
    ///   all, as for a mapping without a list); an empty intersection
    ///   admits nobody. Without `--allow` (every source), the tenant's
    ///   list as it is.
    /// - Rate: the lower of the tenant's and `--syn-rate`; `off` is
    ///   `--syn-rate` when the agent has one.
    pub fn narrow(&self, asked: &Guard, family: Family) -> (Guard, Vec<Cut>) {
        let mut cuts = Vec::new();
        let floor: Option<BTreeSet<Cidr>> = (!self.allow.is_empty()).then(|| {
            (self.allow.iter())
                .filter(|r| r.family() == family)
                .copied()
                .collect()
        });
        let allow = match (&asked.allow, &floor) {
            (Allow::Default, _) | (_, None) => asked.allow.clone(),
            (Allow::Open, Some(floor)) => {
                let all = BTreeSet::from([Cidr::everything(family)]);
                Allow::Only(narrow_ranges(&all, floor, &mut cuts))
            }
            (Allow::Only(ranges), Some(floor)) => {
                Allow::Only(narrow_ranges(ranges, floor, &mut cuts))
            }
        };
        let limit = match (asked.limit, self.syn_rate) {
            (limit, None) | (limit @ Limit::Default, _) => limit,
            (Limit::Off, Some(floor)) => {
                cuts.push(Cut::Rate {
                    asked: None,
                    kept: floor,
                });
                Limit::Default
            }
            (Limit::Rate(rate), Some(floor)) if rate > floor => {
                cuts.push(Cut::Rate {
                    asked: Some(rate),
                    kept: floor,
                });
                Limit::Default
            }
            // Never a tenant's (it is the maps' form): compared by its rate.
            (Limit::Exact(rate), Some(floor)) if rate.rate() > floor.0 => {
                cuts.push(Cut::Rate {
                    asked: Some(SynRate(rate.rate())),
                    kept: floor,
                });
                Limit::Default
            }
            (limit, Some(_)) => limit,
        };
        let narrowed = Guard {
            allow,
            limit,
            ..asked.clone()
        };
        (self.resolve(&narrowed, family), cuts)
    }
}

/// `ranges` intersected with `floor`; each range `floor` does not admit
/// whole is noted in `cuts` with what is left of it.
fn narrow_ranges(
    ranges: &BTreeSet<Cidr>,
    floor: &BTreeSet<Cidr>,
    cuts: &mut Vec<Cut>,
) -> BTreeSet<Cidr> {
    for range in ranges {
        if !admits_all(floor, range) {
            cuts.push(Cut::Range {
                asked: *range,
                kept: intersect(&BTreeSet::from([*range]), floor)
                    .into_iter()
                    .collect(),
            });
        }
    }
    intersect(ranges, floor)
}

#[cfg(test)]
mod tests;
