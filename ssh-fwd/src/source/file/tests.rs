use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::*;
use crate::source::validate::Rules;

/// The default `--max-mappings`.
const CAP: usize = MAX_MAPPINGS as usize;

fn err(text: &str) -> String {
    parse(text, "m.yaml", &Rules::default(), CAP)
        .unwrap_err()
        .to_string()
}

#[test]
fn documented_example_parses() {
    let set = parse(
        "mappings:\n  - name: job-4711          # optional label\n    frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n  - frontend: 198.18.0.10:8023\n    backend: 10.244.1.6:22\n",
        "m.yaml",
        &Rules::default(),
        CAP,
    )
    .unwrap();
    let all: Vec<_> = set.iter().cloned().collect();
    assert_eq!(all.len(), 2);
    assert_eq!(&*all[0].name, "job-4711");
    assert_eq!(all[0].frontend, "198.18.0.10:8022".parse().unwrap());
    assert_eq!(all[0].backend, "10.244.1.5:22".parse().unwrap());
    assert_eq!(&*all[1].name, "");
}

#[test]
fn explicit_empty_list_is_an_empty_set_but_an_empty_file_is_rejected() {
    assert!(
        parse("mappings: []\n", "m.yaml", &Rules::default(), CAP)
            .unwrap()
            .is_empty()
    );
    assert!(err("").contains("is empty; write `mappings: []`"));
    assert!(err("  \n").contains("is empty"));
}

#[test]
fn unknown_field_is_rejected_with_its_name() {
    let e = err("mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n    weight: 3\n");
    assert!(e.contains("unknown field `weight`"), "{e}");
    let e = err("mapings: []\n");
    assert!(e.contains("unknown field `mapings`"), "{e}");
}

#[test]
fn bad_address_names_the_entry_and_field() {
    let e = err(
        "mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n  - name: b\n    frontend: 1.2.3:80\n    backend: 10.0.0.1:22\n",
    );
    assert_eq!(
        e,
        "mappings file m.yaml, entry #2 (b): frontend `1.2.3:80` is not an address with a port, like 198.18.0.10:8022 or [2001:db8::10]:8022"
    );
    let e = err("mappings:\n  - frontend: 1.2.3.4\n    backend: 10.0.0.1:22\n");
    assert!(
        e.contains("entry #1: frontend `1.2.3.4` is not an address with a port"),
        "{e}"
    );
    let e = err("mappings:\n  - frontend: '2001:db8::10:80'\n    backend: '[fd00::5]:22'\n");
    assert!(e.contains("is not an address with a port"), "{e}");
    let e = err("mappings:\n  - frontend: 0.0.0.0:80\n    backend: 10.0.0.1:22\n");
    assert!(e.contains("not a unicast address"), "{e}");
}

#[test]
fn port_zero_is_rejected_in_either_field() {
    let e = err("mappings:\n  - frontend: 1.2.3.4:0\n    backend: 10.0.0.1:22\n");
    assert!(
        e.contains("entry #1: frontend `1.2.3.4:0` has port 0"),
        "{e}"
    );
    let e = err("mappings:\n  - frontend: 1.2.3.4:1\n    backend: 10.0.0.1:0\n");
    assert!(e.contains("backend `10.0.0.1:0` has port 0"), "{e}");
}

#[test]
fn duplicate_frontend_names_both_entries() {
    let e = err(
        "mappings:\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n  - frontend: 1.2.3.4:81\n    backend: 10.0.0.1:22\n  - frontend: 1.2.3.4:80\n    backend: 10.0.0.2:22\n",
    );
    assert!(
        e.contains("entries #1 and #3 both use frontend 1.2.3.4:80"),
        "{e}"
    );
}

#[test]
fn overlong_name_is_rejected() {
    let text = format!(
        "mappings:\n  - name: {}\n    frontend: 1.2.3.4:80\n    backend: 10.0.0.1:22\n",
        "x".repeat(200)
    );
    assert!(err(&text).contains("name is 200 bytes long; keep it at most 127"));
}

fn one(frontend: &str, backend: &str) -> String {
    format!("mappings:\n  - name: job\n    frontend: {frontend}\n    backend: {backend}\n")
}

#[test]
fn a_backend_that_is_another_entrys_frontend_is_refused() {
    let e = err(
        "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.0.0.1:22\n  - name: b\n    frontend: 198.18.0.10:8031\n    backend: 198.18.0.10:8022\n",
    );
    assert!(
        e.contains("entry #2 (b): backend 198.18.0.10:8022 is a frontend"),
        "{e}"
    );
    assert!(e.contains("point the backend at the pod"), "{e}");
}

#[test]
fn a_mapping_to_itself_is_refused() {
    let e = err(&one("198.18.0.10:8022", "198.18.0.10:8022"));
    assert!(
        e.contains("entry #1 (job): backend 198.18.0.10:8022 is the entry's own frontend"),
        "{e}"
    );
}

#[test]
fn backends_in_reserved_ranges_are_refused() {
    for (backend, what) in [
        ("127.0.0.1:22", "loopback"),
        ("127.8.9.1:22", "loopback"),
        ("0.1.2.3:22", "0.0.0.0/8"),
        ("169.254.1.1:22", "link-local"),
        ("224.0.0.5:22", "multicast"),
        ("255.255.255.255:22", "broadcast"),
    ] {
        let e = err(&one("198.18.0.10:8022", backend));
        assert!(e.contains("entry #1 (job): backend"), "{backend}: {e}");
        assert!(e.contains(what), "{backend}: {e}");
    }
}

#[test]
fn names_with_control_characters_are_refused_without_printing_them() {
    let e = err(
        "mappings:\n  - name: \"evil\\e[2Jname\"\n    frontend: 198.18.0.10:8022\n    backend: 10.0.0.1:22\n",
    );
    assert!(e.contains("control character"), "{e}");
    assert!(
        !e.contains('\u{1b}'),
        "the raw escape must not reach a terminal: {e:?}"
    );
}

#[test]
fn a_backend_on_a_frontends_address_is_refused_whatever_the_port() {
    let e = err(
        "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.0.0.1:22\n  - frontend: 198.18.0.10:8023\n    backend: 198.18.0.10:22\n",
    );
    assert!(
        e.contains("entry #2: backend 198.18.0.10:22 is on frontend address 198.18.0.10"),
        "{e}"
    );
}

#[test]
fn with_ssh_ips_declared_a_frontend_elsewhere_rejects_the_file() {
    let rules = Rules {
        ssh_ips: ["198.18.0.10".parse().unwrap()].into(),
        ..Rules::default()
    };
    let e = parse(&one("192.0.2.1:22", "10.0.0.1:22"), "m.yaml", &rules, CAP)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("entry #1 (job): frontend 192.0.2.1:22 is not on a declared --ssh-ip"),
        "{e}"
    );
    assert!(parse(&one("198.18.0.10:22", "10.0.0.1:22"), "m.yaml", &rules, CAP).is_ok());
}

#[test]
fn a_file_over_capacity_says_by_how_much() {
    let mut text = String::from("mappings:\n");
    for i in 0..MAX_MAPPINGS as usize + 2 {
        text.push_str(&format!(
            "  - frontend: 198.18.{}.{}:8022\n    backend: 10.0.0.1:22\n",
            i / 250,
            i % 250 + 1
        ));
    }
    assert_eq!(
        err(&text),
        "mappings file m.yaml lists 16386 mappings, 2 more than this node holds (--max-mappings 16384): entries #16385 to #16386 do not fit; remove 2 entries, or raise --max-mappings (after `ssh-fwd teardown`)"
    );
    let small = parse(&text, "m.yaml", &Rules::default(), 100).unwrap_err();
    assert!(
        small
            .to_string()
            .contains("16286 more than this node holds (--max-mappings 100)"),
        "{small}"
    );
}

#[test]
fn a_frontend_in_loopback_link_local_or_this_network_is_refused() {
    for (frontend, range) in [
        ("127.0.0.1:22", "a loopback address (127.0.0.0/8)"),
        ("127.1.2.3:8022", "a loopback address (127.0.0.0/8)"),
        ("169.254.169.254:80", "link-local"),
        ("0.1.2.3:8022", "in 0.0.0.0/8"),
    ] {
        let e = err(&one(frontend, "10.0.0.1:22"));
        assert!(
            e.contains(&format!("entry #1 (job): frontend {frontend} is {range}")),
            "{e}"
        );
    }
    // Declaring one as an SSH IP changes nothing.
    let rules = Rules {
        ssh_ips: ["127.0.0.1".parse().unwrap()].into(),
        ..Rules::default()
    };
    assert!(parse(&one("127.0.0.1:22", "10.0.0.1:22"), "m.yaml", &rules, CAP).is_err());
}

#[test]
fn field_values_quoted_in_errors_have_terminal_controls_escaped() {
    for (frontend, backend, shown) in [
        ("\"\\e[2J1.2.3:80\"", "10.0.0.1:22", "`\\u{1b}[2J1.2.3:80`"),
        ("\"\\u202e[::1]:80\"", "10.0.0.1:22", "`\\u{202e}[::1]:80`"),
        ("1.2.3.4:80", "\"10.0.0.1:0\\a\"", "`10.0.0.1:0\\u{7}`"),
        // Parsed once trimmed (U+2028 is white space), then quoted whole.
        (
            "\"1.2.3.4:0\\u2028\"",
            "10.0.0.1:22",
            "`1.2.3.4:0\\u{2028}`",
        ),
        ("\"[::1]:0\\u2029\"", "10.0.0.1:22", "`[::1]:0\\u{2029}`"),
    ] {
        let e = err(&format!(
            "mappings:\n  - frontend: {frontend}\n    backend: {backend}\n"
        ));
        assert!(e.contains(shown), "{e:?}");
        assert!(
            !e.chars()
                .any(|c| c.is_control() || matches!(c, '\u{2028}'..='\u{202e}')),
            "{e:?}"
        );
    }
}

#[test]
fn an_entrys_allow_list_replaces_the_default_and_an_empty_one_opens_it() {
    use crate::mapping::guard::{Allow, Defaults};
    let rules = Rules {
        guard: Defaults {
            allow: ["10.0.0.0/8".parse().unwrap()].into(),
            ..Defaults::default()
        },
        ..Rules::default()
    };
    let text = "mappings:\n\
        - {frontend: 198.18.0.10:8022, backend: 10.244.1.5:22, allow: [192.0.2.0/24, 192.0.2.0/24]}\n\
        - {frontend: 198.18.0.10:8023, backend: 10.244.1.6:22, allow: []}\n\
        - {frontend: 198.18.0.10:8024, backend: 10.244.1.7:22}\n";
    let set = parse(text, "m.yaml", &rules, CAP).unwrap();
    let allows: Vec<_> = set.iter().map(|m| m.guard.allow.clone()).collect();
    assert_eq!(
        allows,
        [
            Allow::Only(["192.0.2.0/24".parse().unwrap()].into()),
            Allow::Open,
            Allow::Only(["10.0.0.0/8".parse().unwrap()].into()),
        ]
    );
}

#[test]
fn a_bad_allow_range_refuses_the_file_naming_the_entry_and_the_fix() {
    let text = "mappings:\n\
        - {frontend: 198.18.0.10:8022, backend: 10.244.1.5:22}\n\
        - {name: job, frontend: 198.18.0.10:8023, backend: 10.244.1.6:22, allow: [192.0.2.1/24]}\n";
    assert_eq!(
        err(text),
        "mappings file m.yaml, entry #2 (job): allow: source range #1: `192.0.2.1/24` has bits \
         set past its /24 prefix; write 192.0.2.0/24 for the range, or 192.0.2.1/32 for the one \
         address"
    );
    let v6 = "mappings:\n- {frontend: 198.18.0.10:8022, backend: 10.244.1.5:22, allow: ['::/0']}\n";
    assert!(err(v6).contains("range ::/0 is IPv6"), "{}", err(v6));
    let not_list =
        "mappings:\n- {frontend: 198.18.0.10:8022, backend: 10.244.1.5:22, allow: 10.0.0.0/8}\n";
    assert!(
        err(not_list).contains("m.yaml is not valid"),
        "{}",
        err(not_list)
    );
}
