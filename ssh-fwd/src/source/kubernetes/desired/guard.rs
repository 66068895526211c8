//! A Service's guard: who may connect through its ports
//! (`spec.loadBalancerSourceRanges`, or the annotation
//! [`vocabulary::SOURCE_RANGES`] for any Service) and how fast (the
//! annotation [`vocabulary::SYN_RATE`]). A Service that writes either
//! wrong is refused whole, like any invalid Service: never forwarded with
//! a guard other than the one it asked for.
//!
//! Trust boundary: all three are written by whoever may edit the Service,
//! a tenant with `edit` in its namespace. They only narrow the agent's
//! `--allow` and `--syn-rate`, the operator's ([`Defaults::narrow`]): a
//! Service asking for more is cut to them, not refused, and what was cut
//! is told once.

use std::collections::BTreeSet;

use ssh_fwd_common::maps::MAX_ALLOW_PER_MAPPING;

use crate::{
    mapping::{
        Family,
        guard::{Allow, Cidr, Cut, Defaults, Guard, Limit, RangesError},
    },
    source::kubernetes::objects::GuardText,
    vocabulary::{SOURCE_RANGES, SYN_RATE},
};

/// A Service's guard for each family of its frontends: the ranges of a
/// family apply to the frontends of that family (a dual-stack Service
/// lists both), the rate to all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guards {
    pub v4: Guard,
    pub v6: Guard,
    /// What the agent's flags cut from what the Service asked (sorted,
    /// each once).
    pub cut: Vec<Cut>,
}

impl Guards {
    /// The guard of frontends of `family`.
    pub fn of(&self, family: Family) -> &Guard {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }
}

/// The guards `text` states, narrowed to the agent's `defaults` and with
/// them filled in; `Err`: what is wrong, for the Service's note.
pub fn guard_of(text: &GuardText, defaults: &Defaults) -> Result<Guards, String> {
    let annotation = (text.ranges_annotation.as_deref())
        .map(str::trim)
        .filter(|a| !a.is_empty());
    // A list names the sources of both families: a family it lists none
    // of allows no source at all (as a cloud load balancer's list does).
    let ranges = match (text.ranges.is_empty(), annotation) {
        (false, Some(_)) => {
            return Err(format!(
                "it sets both spec.loadBalancerSourceRanges and the annotation {SOURCE_RANGES}; \
                 keep one of them"
            ));
        }
        (false, None) => Some(
            by_family(text.ranges.iter().map(|r| &**r))
                .map_err(|e| format!("spec.loadBalancerSourceRanges: {e}"))?,
        ),
        (true, Some(list)) => Some(
            by_family(list.split(',').map(str::trim).filter(|r| !r.is_empty()))
                .map_err(|e| format!("annotation {SOURCE_RANGES}: {e}"))?,
        ),
        (true, None) => None,
    };
    let limit = match text.syn_rate.as_deref().map(str::trim) {
        None => Limit::Default,
        Some("off") => Limit::Off,
        Some(rate) => Limit::Rate(
            rate.parse()
                .map_err(|e| format!("annotation {SYN_RATE}: {e}, or `off`"))?,
        ),
    };
    let guard = |family: Family| {
        let allow = match &ranges {
            Some((v4, v6)) => Allow::Only(match family {
                Family::V4 => v4.clone(),
                Family::V6 => v6.clone(),
            }),
            None => Allow::Default,
        };
        let asked = Guard {
            allow,
            limit,
            enforce_established: false,
            draining: false,
        };
        let (guard, cut) = defaults.narrow(&asked, family);
        match guard.ranges().map(BTreeSet::len) {
            Some(n) if n > MAX_ALLOW_PER_MAPPING as usize => Err(format!(
                "its {family} source ranges and --allow's meet in {n} ranges; a mapping holds \
                 at most {MAX_ALLOW_PER_MAPPING}: list fewer, wider ranges"
            )),
            _ => Ok((guard, cut)),
        }
    };
    let (v4, mut cut) = guard(Family::V4)?;
    let (v6, cut6) = guard(Family::V6)?;
    cut.extend(cut6);
    cut.sort();
    cut.dedup();
    Ok(Guards { v4, v6, cut })
}

/// A list of source ranges split by family (sorted, duplicates merged);
/// each family's list holds at most what one mapping's allowlist does.
fn by_family<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<(BTreeSet<Cidr>, BTreeSet<Cidr>), RangesError> {
    let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
    for (i, value) in values.into_iter().enumerate() {
        let cidr: Cidr = value.parse().map_err(|error| RangesError::Range {
            index: i + 1,
            error,
        })?;
        match cidr.family() {
            Family::V4 => v4.insert(cidr),
            Family::V6 => v6.insert(cidr),
        };
    }
    for list in [&v4, &v6] {
        if list.len() > MAX_ALLOW_PER_MAPPING as usize {
            return Err(RangesError::TooMany { count: list.len() });
        }
    }
    Ok((v4, v6))
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::maps::Guard as Rate;

    use super::*;
    use crate::mapping::guard::{Cidr, SynRate};

    fn text(ranges: &[&str], annotation: Option<&str>, rate: Option<&str>) -> GuardText {
        GuardText {
            ranges: ranges.iter().map(|r| Box::from(*r)).collect(),
            ranges_annotation: annotation.map(Box::from),
            syn_rate: rate.map(Box::from),
        }
    }

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_come_from_the_spec_or_the_annotation() {
        let d = Defaults::default();
        let g = guard_of(&text(&["192.0.2.0/24"], None, None), &d)
            .unwrap()
            .v4;
        assert_eq!(g.ranges(), Some(&[cidr("192.0.2.0/24")].into()));
        let g = guard_of(&text(&[], Some(" 10.0.0.0/8, 192.0.2.1 ,"), None), &d)
            .unwrap()
            .v4;
        assert_eq!(
            g.ranges(),
            Some(&[cidr("10.0.0.0/8"), cidr("192.0.2.1/32")].into())
        );
        let g = guard_of(&text(&[], Some(""), None), &d).unwrap();
        assert_eq!(g.v4.allow, Allow::Open, "an empty annotation is no list");
        assert_eq!(g.v6.allow, Allow::Open);
    }

    #[test]
    fn a_dual_stack_list_gives_each_family_its_own_ranges_and_a_family_it_omits_none() {
        let d = Defaults::default();
        let g = guard_of(&text(&["2001:db8::/32", "192.0.2.0/24"], None, None), &d).unwrap();
        assert_eq!(g.v4.ranges(), Some(&[cidr("192.0.2.0/24")].into()));
        assert_eq!(g.v6.ranges(), Some(&[cidr("2001:db8::/32")].into()));
        let g = guard_of(&text(&[], Some("2001:db8::/32, 2001:db8:1::7"), None), &d).unwrap();
        assert_eq!(g.v4.ranges(), Some(&Default::default()), "no IPv4 source");
        assert_eq!(
            g.v6.ranges(),
            Some(&[cidr("2001:db8::/32"), cidr("2001:db8:1::7/128")].into())
        );
    }

    #[test]
    fn a_bad_ipv6_range_refuses_the_service_and_each_family_is_counted_apart() {
        let d = Defaults::default();
        let e = guard_of(&text(&["192.0.2.0/24", "2001:db8::1/32"], None, None), &d).unwrap_err();
        assert!(
            e.starts_with("spec.loadBalancerSourceRanges: source range #2"),
            "{e}"
        );
        let max = MAX_ALLOW_PER_MAPPING as usize;
        let v4: Vec<String> = (0..max).map(|i| format!("10.0.{i}.0/24")).collect();
        let v6: Vec<String> = (0..max).map(|i| format!("2001:db8:{i:x}::/48")).collect();
        let both: Vec<&str> = v4.iter().chain(&v6).map(String::as_str).collect();
        let g = guard_of(&text(&both, None, None), &d).unwrap();
        assert_eq!(g.v4.ranges().map(|r| r.len()), Some(max));
        assert_eq!(g.v6.ranges().map(|r| r.len()), Some(max));
        let mut over = both.clone();
        over.push("2001:db8:ffff::/48");
        let e = guard_of(&text(&over, None, None), &d).unwrap_err();
        assert!(e.contains(&format!("{} source ranges", max + 1)), "{e}");
    }

    #[test]
    fn the_agents_allow_list_fills_in_each_family_from_its_own_ranges() {
        let d = Defaults {
            allow: [cidr("192.0.2.0/24"), cidr("2001:db8::/32")].into(),
            ..Defaults::default()
        };
        let g = guard_of(&text(&[], None, None), &d).unwrap();
        assert_eq!(g.v4.ranges(), Some(&[cidr("192.0.2.0/24")].into()));
        assert_eq!(g.v6.ranges(), Some(&[cidr("2001:db8::/32")].into()));
    }

    #[test]
    fn every_bad_field_refuses_the_service_with_its_name() {
        let d = Defaults::default();
        let err = |t| guard_of(&t, &d).unwrap_err();
        let e = err(text(&["10.0.0.1/8"], None, None));
        assert!(
            e.starts_with("spec.loadBalancerSourceRanges: source range #1"),
            "{e}"
        );
        let e = err(text(&[], Some("10.0.0.0/8,nope"), None));
        assert!(
            e.starts_with("annotation ssh-fwd.io/source-ranges: source range #2"),
            "{e}"
        );
        let e = err(text(&["10.0.0.0/8"], Some("10.0.0.0/8"), None));
        assert!(e.contains("keep one"), "{e}");
        let e = err(text(&[], None, Some("20")));
        assert!(e.starts_with("annotation ssh-fwd.io/syn-rate: `20`"), "{e}");
        assert!(e.ends_with("or `off`"), "{e}");
    }

    #[test]
    fn the_rate_annotation_only_lowers_the_agents() {
        let d = Defaults {
            syn_rate: Some(SynRate(20)),
            syn_burst: Some(40),
            ..Defaults::default()
        };
        let g = guard_of(&text(&[], None, Some("5/s")), &d).unwrap();
        assert_eq!(g.v4.rate(), Some(Rate::new(5, 40)));
        assert_eq!(g.v6.rate(), Some(Rate::new(5, 40)));
        assert!(g.cut.is_empty(), "{:?}", g.cut);
        let g = guard_of(&text(&[], None, Some("off")), &d).unwrap();
        assert_eq!(g.v4.rate(), Some(Rate::new(20, 40)), "off: the agent's");
        assert_eq!(g.v6.rate(), Some(Rate::new(20, 40)));
        assert_eq!(
            g.cut,
            [Cut::Rate {
                asked: None,
                kept: SynRate(20)
            }],
            "told once, not once per family"
        );
        let g = guard_of(&text(&[], None, Some("1000/s")), &d).unwrap();
        assert_eq!(g.v4.rate(), Some(Rate::new(20, 40)));
        let g = guard_of(&text(&[], None, None), &d).unwrap();
        assert_eq!(g.v6.rate(), Some(Rate::new(20, 40)));
        // Without --syn-rate, the Service's own, or none.
        let none = Defaults::default();
        let g = guard_of(&text(&[], None, Some("5/s")), &none).unwrap();
        assert_eq!(g.v4.rate(), Some(Rate::new(5, 10)));
        let g = guard_of(&text(&[], None, Some("off")), &none).unwrap();
        assert_eq!(g.v4.rate(), None);
    }

    #[test]
    fn a_list_of_every_source_in_the_spec_or_the_annotation_drops_to_the_agents_allow() {
        let d = Defaults {
            allow: [cidr("192.0.2.2/32"), cidr("2001:db8::2/128")].into(),
            ..Defaults::default()
        };
        for t in [
            text(&["0.0.0.0/0", "::/0"], None, None),
            text(&[], Some("0.0.0.0/0, ::/0"), None),
        ] {
            let g = guard_of(&t, &d).unwrap();
            assert_eq!(g.v4.ranges(), Some(&[cidr("192.0.2.2/32")].into()));
            assert_eq!(g.v6.ranges(), Some(&[cidr("2001:db8::2/128")].into()));
            assert_eq!(
                g.cut,
                [
                    Cut::Range {
                        asked: cidr("0.0.0.0/0"),
                        kept: vec![cidr("192.0.2.2/32")]
                    },
                    Cut::Range {
                        asked: cidr("::/0"),
                        kept: vec![cidr("2001:db8::2/128")]
                    }
                ]
            );
        }
        // A list of one family still admits nobody of the other.
        let g = guard_of(&text(&[], Some("0.0.0.0/0"), None), &d).unwrap();
        assert_eq!(g.v6.ranges(), Some(&Default::default()));
        // A narrower list than the agent's is the Service's to make.
        let wide = Defaults {
            allow: [cidr("192.0.2.0/24")].into(),
            ..Defaults::default()
        };
        let g = guard_of(&text(&["192.0.2.7/32"], None, None), &wide).unwrap();
        assert_eq!(g.v4.ranges(), Some(&[cidr("192.0.2.7/32")].into()));
        assert!(g.cut.is_empty());
    }

    #[test]
    fn an_intersection_past_what_a_mapping_holds_refuses_the_service() {
        let max = MAX_ALLOW_PER_MAPPING as usize;
        // The Service's /24s inside 10.0.0.0/8 and the agent's inside
        // 11.0.0.0/8 each survive: more than a mapping holds together.
        let asked: Vec<String> = (0..max - 1)
            .map(|i| format!("10.0.{i}.0/24"))
            .chain(["11.0.0.0/8".into()])
            .collect();
        let d = Defaults {
            allow: (0..max - 1)
                .map(|i| cidr(&format!("11.0.{i}.0/24")))
                .chain([cidr("10.0.0.0/8")])
                .collect(),
            ..Defaults::default()
        };
        let asked: Vec<&str> = asked.iter().map(String::as_str).collect();
        let e = guard_of(&text(&asked, None, None), &d).unwrap_err();
        assert!(
            e.contains("meet in 126 ranges") && e.contains("list fewer"),
            "{e}"
        );
    }
}
