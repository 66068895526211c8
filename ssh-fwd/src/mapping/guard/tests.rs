use super::*;

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

#[test]
fn ranges_and_bare_addresses_parse() {
    assert_eq!(cidr("192.0.2.0/24").to_string(), "192.0.2.0/24");
    assert_eq!(cidr(" 198.51.100.7 ").to_string(), "198.51.100.7/32");
    assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
    assert!(cidr("10.0.0.0/8").contains(Ipv4Addr::new(10, 9, 8, 7).into()));
    assert!(!cidr("10.0.0.0/8").contains(Ipv4Addr::new(11, 0, 0, 1).into()));
    assert!(cidr("0.0.0.0/0").contains(Ipv4Addr::BROADCAST.into()));
}

#[test]
fn ipv6_ranges_and_bare_addresses_parse_and_match_only_their_family() {
    assert_eq!(cidr("2001:db8::/32").to_string(), "2001:db8::/32");
    assert_eq!(cidr(" 2001:db8::7 ").to_string(), "2001:db8::7/128");
    assert_eq!(cidr("::/0").to_string(), "::/0");
    let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(cidr("2001:db8::/32").contains(v6("2001:db8:1::5")));
    assert!(!cidr("2001:db8::/32").contains(v6("2001:db9::5")));
    assert!(
        !cidr("::/0").contains(v6("192.0.2.1")),
        "IPv6 ranges hold no IPv4 address"
    );
    assert!(!cidr("0.0.0.0/0").contains(v6("::ffff:192.0.2.1")));
    assert_eq!(cidr("2001:db8::/32").family(), Family::V6);
    // IPv4 ranges sort first: `Cidr::ALL` is the least of all.
    assert!(Cidr::ALL < cidr("::/0"));
}

#[test]
fn every_bad_range_is_refused_with_how_to_write_it() {
    let err = |s: &str| s.parse::<Cidr>().unwrap_err().to_string();
    assert_eq!(
        err("10.0.0.1/8"),
        "`10.0.0.1/8` has bits set past its /8 prefix; write 10.0.0.0/8 for the range, or \
         10.0.0.1/32 for the one address"
    );
    assert!(err("10.0.0.0/33").contains("prefix /33 is longer than 32"));
    assert!(err("10.0.0.0/300").contains("an IPv4 prefix is /0 to /32"));
    assert!(err("2001:db8::/129").contains("an IPv6 prefix is /0 to /128"));
    assert_eq!(
        err("2001:db8::1/32"),
        "`2001:db8::1/32` has bits set past its /32 prefix; write 2001:db8::/32 for the range, \
         or 2001:db8::1/128 for the one address"
    );
    assert!(err("10.0.0/8").contains("like 192.0.2.0/24 or 2001:db8::/32"));
    assert!(err("10.0.0.0/").contains("ADDRESS/PREFIX"));
    assert!(err("10.0.0.0/-1").contains("ADDRESS/PREFIX"));
    assert!(err("[2001:db8::]/32").contains("not an address range"));
    assert!(err("").contains("not an address range"));
    // What is quoted reaches terminals: escaped.
    assert!(err("\u{1b}[31m").contains("\\u{1b}"));
}

#[test]
fn a_list_is_sorted_merged_and_bounded() {
    let got = parse_ranges(["10.0.0.0/8", "192.0.2.0/24", "10.0.0.0/8"]).unwrap();
    assert_eq!(
        got.iter().map(Cidr::to_string).collect::<Vec<_>>(),
        ["10.0.0.0/8", "192.0.2.0/24"]
    );
    let err = parse_ranges(["10.0.0.0/8", "nope"]).unwrap_err();
    assert!(
        err.to_string().starts_with("source range #2: `nope`"),
        "{err}"
    );
    let many: Vec<String> = (0..=MAX_ALLOW_PER_MAPPING)
        .map(|i| format!("10.0.{i}.0/24"))
        .collect();
    let err = parse_ranges(many.iter().map(String::as_str)).unwrap_err();
    assert!(err.to_string().contains("merge them"), "{err}");
}

#[test]
fn ipv6_ranges_are_read_as_ipv4_ones() {
    assert_eq!(
        parse_ranges(["2001:db8::/32"]).unwrap(),
        [cidr("2001:db8::/32")].into()
    );
    assert!(parse_ranges(["2001:db8::/200"]).is_err());
}

#[test]
fn rates_are_per_second_and_bounded() {
    assert_eq!("20/s".parse::<SynRate>(), Ok(SynRate(20)));
    for bad in ["20", "0/s", "-1/s", "20/m", "1.5/s", "2000000/s", "/s"] {
        let err = bad.parse::<SynRate>().unwrap_err();
        assert!(err.contains("like 20/s"), "{bad}: {err}");
    }
}

#[test]
fn defaults_fill_in_only_what_a_mapping_leaves_open() {
    let defaults = Defaults {
        allow: [cidr("10.0.0.0/8")].into(),
        syn_rate: Some(SynRate(20)),
        syn_burst: Some(40),
        enforce_established: true,
    };
    let resolved = defaults.resolve(&Guard::default(), Family::V4);
    assert_eq!(resolved.ranges(), Some(&[cidr("10.0.0.0/8")].into()));
    assert_eq!(resolved.rate(), Some(Rate::new(20, 40)));
    assert!(resolved.enforce_established);
    // Its own choices win.
    let own = Guard {
        allow: Allow::Open,
        limit: Limit::Rate(SynRate(5)),
        enforce_established: false,
        draining: false,
    };
    let resolved = defaults.resolve(&own, Family::V4);
    assert_eq!(resolved.ranges(), None);
    assert_eq!(resolved.rate(), Some(Rate::new(5, 40)));
    assert!(
        !resolved.enforce_established,
        "nothing to enforce when open"
    );
    let off = Guard {
        limit: Limit::Off,
        ..Guard::default()
    };
    assert_eq!(defaults.resolve(&off, Family::V4).rate(), None);
    // No flags: open, unlimited; the burst is two seconds of the rate.
    let none = Defaults::default();
    assert_eq!(
        none.resolve(&Guard::default(), Family::V4).allow,
        Allow::Open
    );
    assert_eq!(
        none.resolve(&own, Family::V4).rate(),
        Some(Rate::new(5, 10))
    );
}

#[test]
fn a_mapping_without_a_list_gets_the_allow_flags_ranges_of_its_own_family() {
    let defaults = Defaults {
        allow: [cidr("10.0.0.0/8"), cidr("2001:db8::/32")].into(),
        ..Defaults::default()
    };
    let v4 = defaults.resolve(&Guard::default(), Family::V4);
    assert_eq!(v4.ranges(), Some(&[cidr("10.0.0.0/8")].into()));
    let v6 = defaults.resolve(&Guard::default(), Family::V6);
    assert_eq!(v6.ranges(), Some(&[cidr("2001:db8::/32")].into()));
    // `--allow` names IPv4 clients only: an IPv6 mapping admits none,
    // never every source.
    let only_v4 = Defaults {
        allow: [cidr("10.0.0.0/8")].into(),
        ..Defaults::default()
    };
    let v6 = only_v4.resolve(&Guard::default(), Family::V6);
    assert_eq!(v6.allow, Allow::Only(BTreeSet::new()));
}
