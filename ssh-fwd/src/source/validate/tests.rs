use super::*;

fn m(frontend: &str, backend: &str) -> Mapping {
    Mapping {
        guard: Default::default(),
        name: "job".into(),
        frontend: frontend.parse().unwrap(),
        backend: backend.parse().unwrap(),
    }
}

#[test]
fn with_declared_ssh_ips_every_frontend_must_be_on_one() {
    let rules = Rules {
        ssh_ips: ["198.18.0.10".parse().unwrap()].into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    assert_eq!(c.check(&m("198.18.0.10:8022", "10.244.1.5:22")), Ok(()));
    let e = c.check(&m("192.0.2.1:22", "10.244.1.5:22")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "frontend 192.0.2.1:22 is not on a declared --ssh-ip (198.18.0.10); use one of them, or add --ssh-ip 192.0.2.1"
    );
}

#[test]
fn without_ssh_ips_a_frontend_on_a_node_interface_address_is_refused() {
    let rules = Rules {
        node_addrs: [("192.0.2.1".parse().unwrap(), "eth0".to_owned())].into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    let e = c.check(&m("192.0.2.1:22", "10.244.1.5:22")).unwrap_err();
    assert!(
        e.to_string().contains("an address of interface eth0"),
        "{e}"
    );
    assert!(e.to_string().contains("put the SSH IP on lo"), "{e}");
    // An SSH IP on lo is not among the node's addresses as the agent
    // gathers them, so it stays allowed.
    assert_eq!(c.check(&m("198.18.0.10:8022", "10.244.1.5:22")), Ok(()));
}

#[test]
fn a_backend_on_a_declared_ssh_ip_is_refused_even_without_a_frontend_there() {
    let rules = Rules {
        ssh_ips: ["198.18.0.10".parse().unwrap()].into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    assert!(matches!(
        c.check(&m("198.18.0.10:8022", "198.18.0.10:22")),
        Err(Danger::BackendOnFrontendIp(..))
    ));
}

#[test]
fn printable_escapes_control_characters() {
    assert_eq!(printable("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
    assert_eq!(
        check_name("ok\u{7}"),
        Err(Danger::ControlCharacter("ok\\u{7}".into()))
    );
}

#[test]
fn a_backend_on_any_address_of_the_node_is_refused_lo_and_dummies_included() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let rules = Rules {
        all_node_addrs: [
            (ip("192.0.2.1"), "eth0".to_owned()),
            (ip("203.0.113.10"), "lo".to_owned()),
            (ip("203.0.113.9"), "ssh0".to_owned()),
        ]
        .into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    for (backend, iface) in [
        ("192.0.2.1:22", "eth0"),
        ("203.0.113.10:2222", "lo"),
        ("203.0.113.9:22", "ssh0"),
    ] {
        let e = c.check(&m("198.18.0.10:8022", backend)).unwrap_err();
        assert_eq!(
            e,
            Danger::BackendOnNode {
                backend: backend.parse().unwrap(),
                iface: iface.into()
            }
        );
        assert!(
            e.to_string()
                .contains("point the backend at the pod's own address"),
            "{e}"
        );
    }
    assert_eq!(c.check(&m("198.18.0.10:8022", "10.244.1.5:22")), Ok(()));
}

#[test]
fn a_frontend_in_a_reserved_range_is_refused_even_as_a_declared_ssh_ip() {
    let rules = Rules {
        ssh_ips: ["127.0.0.1".parse().unwrap()].into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    for frontend in ["127.0.0.1:22", "169.254.0.1:22", "0.0.0.1:22"] {
        assert!(
            matches!(
                c.check(&m(frontend, "10.244.1.5:22")),
                Err(Danger::ReservedFrontend(..))
            ),
            "{frontend}"
        );
    }
}

#[test]
fn printable_escapes_format_characters_and_line_separators() {
    // A right-to-left override would reorder what follows on the screen.
    assert_eq!(
        printable("job\u{202e}gpj.exe\u{2066}\u{200b}\u{feff}\u{2028}é"),
        "job\\u{202e}gpj.exe\\u{2066}\\u{200b}\\u{feff}\\u{2028}é"
    );
    assert_eq!(printable("\u{e0041}\u{ad}"), "\\u{e0041}\\u{ad}");
    assert_eq!(
        check_name("a\u{202e}b"),
        Err(Danger::ControlCharacter("a\\u{202e}b".into()))
    );
}

#[test]
fn a_mapping_that_mixes_families_is_refused_whatever_its_source() {
    let rules = Rules::default();
    let c = Checker::new(&rules, []);
    let e = c
        .check(&m("198.18.0.10:8022", "[fd00:10:244::5]:22"))
        .unwrap_err();
    assert!(matches!(e, Danger::MixedFamily { .. }), "{e}");
    assert!(e.to_string().contains("no NAT46 or NAT64"), "{e}");
    assert!(matches!(
        c.check(&m("[2001:db8::10]:8022", "10.244.1.5:22")),
        Err(Danger::MixedFamily { .. })
    ));
    assert_eq!(
        c.check(&m("[2001:db8::10]:8022", "[fd00:10:244::5]:22")),
        Ok(())
    );
}

#[test]
fn ipv6_ssh_ips_are_declared_beside_ipv4_ones() {
    let rules = Rules {
        ssh_ips: [
            "198.18.0.10".parse().unwrap(),
            "2001:db8::10".parse().unwrap(),
        ]
        .into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    assert_eq!(c.check(&m("198.18.0.10:8022", "10.244.1.5:22")), Ok(()));
    assert_eq!(c.check(&m("[2001:db8::10]:8022", "[fd00::5]:22")), Ok(()));
    let e = c
        .check(&m("[2001:db8::11]:8022", "[fd00::5]:22"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "frontend [2001:db8::11]:8022 is not on a declared --ssh-ip (198.18.0.10, 2001:db8::10); \
         use one of them, or add --ssh-ip 2001:db8::11"
    );
    // A backend on an SSH IP of either family would reach the node.
    assert!(matches!(
        c.check(&m("[2001:db8::10]:8022", "[2001:db8::10]:22")),
        Err(Danger::BackendOnFrontendIp(..))
    ));
}

#[test]
fn ipv6_addresses_on_the_node_are_judged_as_ipv4_ones() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let rules = Rules {
        node_addrs: [(ip("2001:db8::1"), "eth0".to_owned())].into(),
        all_node_addrs: [
            (ip("2001:db8::1"), "eth0".to_owned()),
            (ip("fd00:1::1"), "cni0".to_owned()),
        ]
        .into(),
        ..Rules::default()
    };
    let c = Checker::new(&rules, []);
    assert!(matches!(
        c.check(&m("[2001:db8::1]:8022", "[fd00::5]:22")),
        Err(Danger::FrontendOnNodeAddress { .. })
    ));
    assert!(matches!(
        c.check(&m("[2001:db8::10]:8022", "[fd00:1::1]:22")),
        Err(Danger::BackendOnNode { .. })
    ));
}

#[test]
fn ipv6_ranges_that_are_never_a_pod_nor_an_ssh_ip_are_refused_on_both_sides() {
    let rules = Rules::default();
    let c = Checker::new(&rules, []);
    for (reserved, what) in [
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:10.244.1.5", "IPv4-mapped"),
        ("64:ff9b::a0a:105", "NAT64"),
    ] {
        let addr = format!("[{reserved}]:22");
        let e = c.check(&m("[2001:db8::10]:8022", &addr)).unwrap_err();
        assert!(matches!(e, Danger::ReservedBackend(..)), "{reserved}: {e}");
        assert!(e.to_string().contains(what), "{reserved}: {e}");
        let e = c.check(&m(&addr, "[fd00::5]:22")).unwrap_err();
        assert!(matches!(e, Danger::ReservedFrontend(..)), "{reserved}: {e}");
    }
    // Unique-local and global addresses are pods' and SSH IPs'.
    assert_eq!(c.check(&m("[2001:db8::10]:8022", "[fd00::5]:22")), Ok(()));
    assert_eq!(c.check(&m("[fec0::10]:8022", "[2001:db8:2::5]:22")), Ok(()));
}
