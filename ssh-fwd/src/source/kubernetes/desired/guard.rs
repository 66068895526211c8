//! A Service's guard: who may connect through its ports
//! (`spec.loadBalancerSourceRanges`, or the annotation
//! [`vocabulary::SOURCE_RANGES`] for any Service) and how fast (the
//! annotation [`vocabulary::SYN_RATE`]). A Service that writes either
//! wrong is refused whole, like any invalid Service: never forwarded with
//! a guard other than the one it asked for.

use crate::{
    mapping::{
        Family,
        guard::{Allow, Defaults, Guard, Limit, parse_ranges},
    },
    source::kubernetes::objects::GuardText,
    vocabulary::{SOURCE_RANGES, SYN_RATE},
};

/// The guard `text` states, with the agent's `defaults` filled in; `Err`:
/// what is wrong, for the Service's note.
pub fn guard_of(text: &GuardText, defaults: &Defaults) -> Result<Guard, String> {
    let annotation = (text.ranges_annotation.as_deref())
        .map(str::trim)
        .filter(|a| !a.is_empty());
    // IPv6 ranges are left out: a dual-stack Service may list them, and
    // the IPv4 traffic of its mappings never matches them; a list of only
    // IPv6 ranges allows no IPv4 source at all.
    let allow = match (text.ranges.is_empty(), annotation) {
        (false, Some(_)) => {
            return Err(format!(
                "it sets both spec.loadBalancerSourceRanges and the annotation {SOURCE_RANGES}; \
                 keep one of them"
            ));
        }
        (false, None) => Allow::Only(
            parse_ranges(text.ranges.iter().map(|r| &**r), true)
                .map_err(|e| format!("spec.loadBalancerSourceRanges: {e}"))?,
        ),
        (true, Some(list)) => Allow::Only(
            parse_ranges(
                list.split(',').map(str::trim).filter(|r| !r.is_empty()),
                true,
            )
            .map_err(|e| format!("annotation {SOURCE_RANGES}: {e}"))?,
        ),
        (true, None) => Allow::Default,
    };
    let limit = match text.syn_rate.as_deref().map(str::trim) {
        None => Limit::Default,
        Some("off") => Limit::Off,
        Some(rate) => Limit::Rate(
            rate.parse()
                .map_err(|e| format!("annotation {SYN_RATE}: {e}, or `off`"))?,
        ),
    };
    // A Service's mappings are IPv4 (dual-stack Services are not read).
    let guard = Guard {
        allow,
        limit,
        enforce_established: false,
        draining: false,
    };
    Ok(defaults.resolve(&guard, Family::V4))
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
        let g = guard_of(&text(&["192.0.2.0/24"], None, None), &d).unwrap();
        assert_eq!(g.ranges(), Some(&[cidr("192.0.2.0/24")].into()));
        let g = guard_of(&text(&[], Some(" 10.0.0.0/8, 192.0.2.1 ,"), None), &d).unwrap();
        assert_eq!(
            g.ranges(),
            Some(&[cidr("10.0.0.0/8"), cidr("192.0.2.1/32")].into())
        );
        let g = guard_of(&text(&[], Some(""), None), &d).unwrap();
        assert_eq!(g.allow, Allow::Open, "an empty annotation is no list");
    }

    #[test]
    fn a_dual_stack_list_keeps_its_ipv4_ranges_and_an_ipv6_only_one_allows_none() {
        let d = Defaults::default();
        let g = guard_of(&text(&["2001:db8::/32", "192.0.2.0/24"], None, None), &d).unwrap();
        assert_eq!(g.ranges(), Some(&[cidr("192.0.2.0/24")].into()));
        let g = guard_of(&text(&["2001:db8::/32"], None, None), &d).unwrap();
        assert_eq!(g.ranges(), Some(&Default::default()));
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
    fn the_rate_annotation_overrides_the_agents() {
        let d = Defaults {
            syn_rate: Some(SynRate(20)),
            syn_burst: Some(40),
            ..Defaults::default()
        };
        let g = guard_of(&text(&[], None, Some("5/s")), &d).unwrap();
        assert_eq!(g.rate(), Some(Rate::new(5, 40)));
        let g = guard_of(&text(&[], None, Some("off")), &d).unwrap();
        assert_eq!(g.rate(), None);
        let g = guard_of(&text(&[], None, None), &d).unwrap();
        assert_eq!(g.rate(), Some(Rate::new(20, 40)));
    }
}
