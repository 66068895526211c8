//! IPv6 entries: `[address]:port`, one family per entry, allow ranges of
//! the entry's family.

use std::net::IpAddr;

use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::*;
use crate::mapping::guard::{Allow, Defaults};
use crate::source::validate::Rules;

const CAP: usize = MAX_MAPPINGS as usize;

fn err(text: &str) -> String {
    parse(text, "m.yaml", &Rules::default(), CAP)
        .unwrap_err()
        .to_string()
}

#[test]
fn ipv6_entries_parse_beside_ipv4_ones() {
    let text = "mappings:\n\
        - name: job-4711\n  frontend: 198.18.0.10:8022\n  backend: 10.244.1.5:22\n\
        - name: job-4712\n  frontend: '[2001:db8::10]:8022'\n  backend: '[fd00:10:244::5]:22'\n  allow: ['2001:db8:1::/48']\n";
    let set = parse(text, "m.yaml", &Rules::default(), CAP).unwrap();
    let v6 = set
        .get(&"[2001:db8::10]:8022".parse().unwrap())
        .expect("the IPv6 entry");
    assert_eq!(&*v6.name, "job-4712");
    assert_eq!(v6.backend, "[fd00:10:244::5]:22".parse().unwrap());
    assert_eq!(v6.family(), Family::V6);
    assert_eq!(
        v6.guard.allow,
        Allow::Only(["2001:db8:1::/48".parse().unwrap()].into())
    );
    assert_eq!(set.len(), 2);
}

#[test]
fn an_entry_that_mixes_families_is_refused_naming_it_and_what_to_do() {
    let text = "mappings:\n\
        - {name: job, frontend: 198.18.0.10:8022, backend: '[fd00:10:244::5]:22'}\n";
    assert_eq!(
        err(text),
        "mappings file m.yaml, entry #1 (job): frontend 198.18.0.10:8022 is IPv4 and backend \
         [fd00:10:244::5]:22 is IPv6; ssh-fwd translates addresses, not families (no NAT46 or \
         NAT64): give the entry a frontend of the backend's family, or point it at the pod's \
         IPv4 address"
    );
    let text = "mappings:\n- {frontend: '[2001:db8::10]:8022', backend: 10.244.1.5:22}\n";
    let e = err(text);
    assert!(e.starts_with("mappings file m.yaml, entry #1: frontend [2001:db8::10]:8022 is IPv6 and backend 10.244.1.5:22 is IPv4"), "{e}");
    assert!(e.contains("no NAT46 or NAT64"), "{e}");
}

#[test]
fn an_allow_range_of_the_other_family_is_refused_naming_the_range_and_the_entry() {
    let text = "mappings:\n\
        - {name: job, frontend: '[2001:db8::10]:8022', backend: '[fd00::5]:22', allow: ['2001:db8:1::/48', 192.0.2.0/24]}\n";
    assert_eq!(
        err(text),
        "mappings file m.yaml, entry #1 (job): allow: range 192.0.2.0/24 is IPv4 but frontend \
         [2001:db8::10]:8022 is IPv6; list IPv6 ranges for this frontend, and give IPv4 clients \
         an entry with an IPv4 frontend"
    );
}

#[test]
fn an_ipv6_entry_without_a_list_gets_the_allow_flags_ipv6_ranges_only() {
    let rules = Rules {
        guard: Defaults {
            allow: [
                "10.0.0.0/8".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ]
            .into(),
            ..Defaults::default()
        },
        ..Rules::default()
    };
    let text = "mappings:\n\
        - {frontend: 198.18.0.10:8022, backend: 10.244.1.5:22}\n\
        - {frontend: '[2001:db8::10]:8022', backend: '[fd00::5]:22'}\n";
    let set = parse(text, "m.yaml", &rules, CAP).unwrap();
    let allow = |f: &str| set.get(&f.parse().unwrap()).unwrap().guard.allow.clone();
    assert_eq!(
        allow("198.18.0.10:8022"),
        Allow::Only(["10.0.0.0/8".parse().unwrap()].into())
    );
    assert_eq!(
        allow("[2001:db8::10]:8022"),
        Allow::Only(["2001:db8::/32".parse().unwrap()].into())
    );
}

#[test]
fn ipv6_frontends_and_backends_follow_the_ipv4_rules() {
    let one = |f: &str, b: &str| {
        err(&format!(
            "mappings:\n- {{frontend: '{f}', backend: '{b}'}}\n"
        ))
    };
    assert!(one("[::]:8022", "[fd00::5]:22").contains("not a unicast address"));
    assert!(one("[ff02::1]:8022", "[fd00::5]:22").contains("not a unicast address"));
    assert!(one("[2001:db8::10]:0", "[fd00::5]:22").contains("port 0"));
    assert!(one("[2001:db8::10]:8022", "[::1]:22").contains("loopback"));
    assert!(one("[2001:db8::10]:8022", "[fe80::5]:22").contains("link-local"));
    assert!(one("[2001:db8::10]:8022", "[::ffff:10.244.1.5]:22").contains("IPv4-mapped"));
    assert!(one("[fe80::10]:8022", "[fd00::5]:22").contains("link-local"));
    assert!(one("[2001:db8::10]:8022", "[2001:db8::10]:22").contains("on frontend address"));
    // A duplicate is named once, as written in IPv6 notation.
    let dup = "mappings:\n\
        - {frontend: '[2001:db8::10]:8022', backend: '[fd00::5]:22'}\n\
        - {frontend: '[2001:db8:0::10]:8022', backend: '[fd00::6]:22'}\n";
    assert!(
        err(dup).contains("both use frontend [2001:db8::10]:8022"),
        "{}",
        err(dup)
    );
}

#[test]
fn with_an_ipv6_ssh_ip_declared_an_ipv6_frontend_elsewhere_is_refused() {
    let rules = Rules {
        ssh_ips: ["2001:db8::10".parse::<IpAddr>().unwrap()].into(),
        ..Rules::default()
    };
    let text = "mappings:\n- {frontend: '[2001:db8::11]:8022', backend: '[fd00::5]:22'}\n";
    let e = parse(text, "m.yaml", &rules, CAP).unwrap_err().to_string();
    assert!(e.contains("add --ssh-ip 2001:db8::11"), "{e}");
}

#[test]
fn an_unquoted_ipv6_endpoint_is_refused_with_the_quoting_it_needs() {
    // YAML reads `[...]` as a list: the parser's own message says only
    // that it expected a string.
    for (text, quoted) in [
        (
            "mappings:\n- name: job\n  frontend: [2001:db8::10]:8022\n  backend: '[fd00::5]:22'\n",
            "frontend: '[2001:db8::10]:8022'",
        ),
        (
            "mappings:\n- {frontend: '[2001:db8::10]:8022', backend: [fd00::5]:22}\n",
            "backend: '[fd00::5]:22'",
        ),
    ] {
        let e = err(text);
        assert!(e.contains("quote") && e.contains(quoted), "{e}");
    }
    // No hint for a syntax error that has nothing to do with it.
    let e = err("mappings:\n- name: job\n  frontend 198.18.0.10:8022\n");
    assert!(!e.contains("quote"), "{e}");
}
