use ssh_fwd_common::maps::Guard as Rate;

use super::*;

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

fn set(list: &[&str]) -> BTreeSet<Cidr> {
    list.iter().map(|s| cidr(s)).collect()
}

fn only(list: &[&str]) -> Guard {
    Guard {
        allow: Allow::Only(set(list)),
        ..Guard::default()
    }
}

fn rate(limit: Limit) -> Guard {
    Guard {
        limit,
        ..Guard::default()
    }
}

fn allow(list: &[&str]) -> Defaults {
    Defaults {
        allow: set(list),
        ..Defaults::default()
    }
}

fn syn_rate(n: u32) -> Defaults {
    Defaults {
        syn_rate: Some(SynRate(n)),
        ..Defaults::default()
    }
}

/// Every case in both families: the IPv6 twin of an IPv4 range list.
fn both(v4: &[&'static str], v6: &[&'static str], check: impl Fn(Family, &[&'static str])) {
    check(Family::V4, v4);
    check(Family::V6, v6);
}

#[test]
fn two_ranges_meet_in_the_smaller_when_nested_and_not_at_all_otherwise() {
    both(
        &["10.0.0.0/8", "10.1.0.0/16", "11.0.0.0/8"],
        &["2001:db8::/32", "2001:db8:1::/48", "2001:db9::/32"],
        |_, r| {
            let (wide, inside, apart) = (r[0], r[1], r[2]);
            assert_eq!(intersect(&set(&[wide]), &set(&[inside])), set(&[inside]));
            assert_eq!(intersect(&set(&[inside]), &set(&[wide])), set(&[inside]));
            assert_eq!(intersect(&set(&[wide]), &set(&[wide])), set(&[wide]));
            assert!(intersect(&set(&[wide]), &set(&[apart])).is_empty());
            assert!(intersect(&set(&[inside]), &set(&[])).is_empty());
        },
    );
}

#[test]
fn an_intersection_keeps_only_its_outermost_ranges_and_never_mixes_families() {
    let floor = set(&["10.0.0.0/8", "10.1.0.0/16", "2001:db8::/32"]);
    let asked = set(&["10.1.2.0/24", "0.0.0.0/0", "2001:db8:5::/48", "::/0"]);
    assert_eq!(
        intersect(&asked, &floor),
        set(&["10.0.0.0/8", "2001:db8::/32"]),
        "10.1.2.0/24 and 2001:db8:5::/48 lie inside what is kept"
    );
    assert!(intersect(&set(&["0.0.0.0/0"]), &set(&["::/0"])).is_empty());
}

#[test]
fn ranges_that_fill_a_range_between_them_admit_it_whole() {
    let halves = set(&["10.0.0.0/8", "11.0.0.0/8"]);
    assert!(admits_all(&halves, &cidr("10.0.0.0/7")));
    assert!(!admits_all(&set(&["10.0.0.0/8"]), &cidr("10.0.0.0/7")));
    let quarters = set(&["2001:db8::/34", "2001:db8:4000::/34", "2001:db8:8000::/33"]);
    assert!(admits_all(&quarters, &cidr("2001:db8::/32")));
    let gap = set(&["2001:db8::/34", "2001:db8:8000::/33"]);
    assert!(!admits_all(&gap, &cidr("2001:db8::/32")));
    // One address short of the whole space: the walk goes 128 deep.
    let mut all_but_one = BTreeSet::new();
    for prefix in 1..=128u8 {
        let ip = Ipv6Addr::from(1u128 << (128 - u32::from(prefix)));
        all_but_one.insert(Cidr::new(IpAddr::V6(ip), prefix).unwrap());
    }
    assert!(!admits_all(&all_but_one, &cidr("::/0")));
    all_but_one.insert(cidr("::/128"));
    assert!(admits_all(&all_but_one, &cidr("::/0")));
}

#[test]
fn a_tenants_list_is_cut_to_the_agents_allow_in_each_family() {
    let d = allow(&["192.0.2.0/24", "2001:db8::/32"]);
    both(
        &[
            "0.0.0.0/0",
            "192.0.2.0/24",
            "192.0.2.128/25",
            "198.51.100.0/24",
        ],
        &["::/0", "2001:db8::/32", "2001:db8:7::/48", "2001:db9::/32"],
        |family, r| {
            let (everything, floor, inside, outside) = (r[0], r[1], r[2], r[3]);
            let (g, cuts) = d.narrow(&only(&[everything]), family);
            assert_eq!(g.ranges(), Some(&set(&[floor])), "{family}");
            assert_eq!(
                cuts,
                [Cut::Range {
                    asked: cidr(everything),
                    kept: vec![cidr(floor)]
                }]
            );
            // A list inside the floor is the tenant's to make.
            let (g, cuts) = d.narrow(&only(&[inside]), family);
            assert_eq!(g.ranges(), Some(&set(&[inside])));
            assert!(cuts.is_empty(), "{cuts:?}");
            // A list outside it admits nobody: never every source.
            let (g, cuts) = d.narrow(&only(&[outside]), family);
            assert_eq!(g.allow, Allow::Only(BTreeSet::new()));
            assert_eq!(
                cuts,
                [Cut::Range {
                    asked: cidr(outside),
                    kept: vec![]
                }]
            );
            // Asking for every source, even as `Open`, drops to the floor.
            let open = Guard {
                allow: Allow::Open,
                ..Guard::default()
            };
            assert_eq!(d.narrow(&open, family).0.ranges(), Some(&set(&[floor])));
        },
    );
}

#[test]
fn an_allow_of_the_other_family_only_leaves_a_tenants_list_nobody() {
    let d = allow(&["192.0.2.0/24"]);
    let (g, cuts) = d.narrow(&only(&["::/0"]), Family::V6);
    assert_eq!(g.allow, Allow::Only(BTreeSet::new()));
    assert_eq!(cuts.len(), 1);
    let d6 = allow(&["2001:db8::/32"]);
    let (g, _) = d6.narrow(&only(&["0.0.0.0/0"]), Family::V4);
    assert_eq!(g.allow, Allow::Only(BTreeSet::new()));
}

#[test]
fn without_allow_a_tenants_list_narrows_every_source_as_it_is() {
    let d = Defaults::default();
    both(&["0.0.0.0/0"], &["::/0"], |family, r| {
        let (g, cuts) = d.narrow(&only(r), family);
        assert_eq!(g.ranges(), Some(&set(r)));
        assert!(cuts.is_empty());
        let (g, _) = d.narrow(&Guard::default(), family);
        assert_eq!(g.allow, Allow::Open, "no list anywhere: every source");
    });
}

#[test]
fn a_tenant_without_a_list_gets_the_agents_allow() {
    let d = allow(&["192.0.2.0/24", "2001:db8::/32"]);
    both(&["192.0.2.0/24"], &["2001:db8::/32"], |family, r| {
        let (g, cuts) = d.narrow(&Guard::default(), family);
        assert_eq!(g.ranges(), Some(&set(r)));
        assert!(cuts.is_empty());
    });
}

#[test]
fn a_tenants_rate_is_the_lower_of_the_two_and_off_never_lifts_the_agents() {
    let d = Defaults {
        syn_burst: Some(40),
        ..syn_rate(20)
    };
    both(&[], &[], |family, _| {
        let (g, cuts) = d.narrow(&rate(Limit::Rate(SynRate(5))), family);
        assert_eq!(g.rate(), Some(Rate::new(5, 40)), "lower: the tenant's");
        assert!(cuts.is_empty());
        let (g, cuts) = d.narrow(&rate(Limit::Rate(SynRate(500))), family);
        assert_eq!(g.rate(), Some(Rate::new(20, 40)), "higher: the agent's");
        assert_eq!(
            cuts,
            [Cut::Rate {
                asked: Some(SynRate(500)),
                kept: SynRate(20)
            }]
        );
        let (g, cuts) = d.narrow(&rate(Limit::Off), family);
        assert_eq!(g.rate(), Some(Rate::new(20, 40)), "off: the agent's");
        assert_eq!(
            cuts,
            [Cut::Rate {
                asked: None,
                kept: SynRate(20)
            }]
        );
        let (g, cuts) = d.narrow(&rate(Limit::Exact(Rate::new(100, 1))), family);
        assert_eq!(g.rate(), Some(Rate::new(20, 40)));
        assert_eq!(cuts.len(), 1);
        let (g, _) = d.narrow(&rate(Limit::Default), family);
        assert_eq!(g.rate(), Some(Rate::new(20, 40)));
    });
}

#[test]
fn without_syn_rate_a_tenant_may_set_a_rate_or_none() {
    let d = Defaults::default();
    let (g, cuts) = d.narrow(&rate(Limit::Rate(SynRate(5))), Family::V4);
    assert_eq!(g.rate(), Some(Rate::new(5, 10)));
    assert!(cuts.is_empty());
    let (g, cuts) = d.narrow(&rate(Limit::Off), Family::V6);
    assert_eq!((g.limit, cuts), (Limit::Off, vec![]));
}

#[test]
fn the_burst_of_a_lower_rate_is_never_above_the_agents() {
    // Without --syn-burst each rate's burst is two seconds of it: a lower
    // rate has a lower burst too.
    let d = syn_rate(20);
    let (g, _) = d.narrow(&rate(Limit::Rate(SynRate(5))), Family::V4);
    assert_eq!(g.rate(), Some(Rate::new(5, 10)));
    let (g, _) = d.narrow(&rate(Limit::Off), Family::V4);
    assert_eq!(g.rate(), Some(Rate::new(20, 40)));
}

#[test]
fn what_was_cut_reads_as_what_applies() {
    let cut = |asked: &str, kept: &[&str]| Cut::Range {
        asked: cidr(asked),
        kept: kept.iter().map(|k| cidr(k)).collect(),
    };
    assert_eq!(
        cut("0.0.0.0/0", &["10.0.0.0/8", "192.0.2.7/32"]).to_string(),
        "source range 0.0.0.0/0 cut by --allow to 10.0.0.0/8, 192.0.2.7/32"
    );
    assert_eq!(
        cut("2001:db9::/32", &[]).to_string(),
        "source range 2001:db9::/32 is outside --allow: none of it admitted"
    );
    let off = Cut::Rate {
        asked: None,
        kept: SynRate(20),
    };
    assert_eq!(
        off.to_string(),
        "syn-rate off does not lift --syn-rate: 20/s applies"
    );
    let high = Cut::Rate {
        asked: Some(SynRate(50)),
        kept: SynRate(20),
    };
    assert_eq!(
        high.to_string(),
        "syn-rate 50/s is above --syn-rate: 20/s applies"
    );
}

#[test]
fn the_file_keeps_its_meaning_an_entrys_list_replaces_the_agents() {
    // `resolve`, the file's rule, is unchanged: the operator's own input.
    let d = Defaults {
        syn_rate: Some(SynRate(20)),
        ..allow(&["192.0.2.0/24"])
    };
    let entry = Guard {
        limit: Limit::Off,
        ..only(&["0.0.0.0/0"])
    };
    let g = d.resolve(&entry, Family::V4);
    assert_eq!(g.ranges(), Some(&set(&["0.0.0.0/0"])));
    assert_eq!(g.rate(), None);
    let (g, _) = d.narrow(&entry, Family::V4);
    assert_eq!(g.ranges(), Some(&set(&["192.0.2.0/24"])));
    assert_eq!(g.rate(), Some(Rate::new(20, 40)));
}
