use super::*;

#[test]
fn translated_packets_are_redirected_unless_redirect_is_off() {
    let base = ["--external-iface", "eth0", "--mappings", "m.yaml"];
    assert_eq!(parse(base).unwrap().redirect, RedirectMode::Auto);
    let off = parse(base.into_iter().chain(["--redirect", "off"])).unwrap();
    assert_eq!(off.redirect, RedirectMode::Off);
    let typo = parse(base.into_iter().chain(["--redirect", "never"]));
    assert!(typo.unwrap_err().to_string().contains("never"));
}

#[test]
fn ssh_ips_of_both_families_are_accepted() {
    let argv = [
        "--external-iface",
        "eth0",
        "--mappings",
        "m.yaml",
        "--ssh-ip",
        "198.18.0.10",
        "--ssh-ip",
        "2001:db8::10",
    ];
    let args = parse(argv).unwrap();
    assert_eq!(
        args.ssh_ips,
        [
            "198.18.0.10".parse::<std::net::IpAddr>().unwrap(),
            "2001:db8::10".parse().unwrap()
        ]
    );
    let e = parse([
        "--external-iface",
        "eth0",
        "--mappings",
        "m",
        "--ssh-ip",
        "[2001:db8::10]",
    ]);
    assert!(e.unwrap_err().to_string().contains("--ssh-ip"));
}

#[test]
fn a_confirm_timeout_outside_a_second_to_ten_minutes_is_refused_with_the_range() {
    let base = ["--external-iface", "eth0", "--mappings", "m.yaml"];
    let args = parse(base).unwrap();
    assert_eq!(args.conn_confirm_timeout, Duration::from_secs(10));
    assert_eq!(args.conns_per_source, CONNS_PER_SOURCE);
    let ok = parse(base.into_iter().chain(["--conn-confirm-timeout", "2s"])).unwrap();
    assert_eq!(ok.conn_confirm_timeout, Duration::from_secs(2));
    for bad in ["100ms", "1h"] {
        let e = parse(base.into_iter().chain(["--conn-confirm-timeout", bad])).unwrap_err();
        assert!(e.to_string().contains("between 1s and 10m"), "{bad}: {e}");
    }
    let e = parse(base.into_iter().chain(["--conns-per-source", "lots"])).unwrap_err();
    assert!(e.to_string().contains("lots"), "{e}");
}

#[test]
fn only_load_balancers_are_honoured_unless_external_ips_are_asked_for() {
    let base = [
        "--external-iface",
        "eth0",
        "--kubernetes",
        "--ssh-ip",
        "198.18.0.10",
    ];
    let only_lb = Styles {
        load_balancer: true,
        external_ips: false,
    };
    assert_eq!(parse(base).unwrap().styles(), only_lb);
    let named = parse(base.into_iter().chain(["--honour-styles", "loadbalancer"])).unwrap();
    assert_eq!(named.styles(), only_lb);
    let both = ["--honour-styles", "externalips,loadbalancer"];
    assert_eq!(
        parse(base.into_iter().chain(both)).unwrap().styles(),
        Styles::ALL
    );
    let typo = parse(base.into_iter().chain(["--honour-styles", "nodeport"]));
    assert!(typo.unwrap_err().to_string().contains("nodeport"));
}

#[test]
fn the_cross_node_key_comes_from_a_file_or_in_kubernetes_mode_from_a_secret() {
    let file = ["--external-iface", "eth0", "--mappings", "m.yaml"];
    let args = parse(file).unwrap();
    assert_eq!(
        (args.cross_node_key, args.cross_node_key_secret),
        (None, None)
    );
    let with = parse(file.into_iter().chain(["--cross-node-key", "/k"])).unwrap();
    assert_eq!(with.cross_node_key, Some(PathBuf::from("/k")));
    let secret = parse(file.into_iter().chain(["--cross-node-key-secret", "s"]));
    assert!(secret.is_err(), "a Secret needs --kubernetes");
    let kube = [
        "--external-iface",
        "eth0",
        "--kubernetes",
        "--ssh-ip",
        "198.18.0.10",
    ];
    let args = parse(kube).unwrap();
    assert_eq!(
        args.cross_node_key_secret.as_deref(),
        Some(CROSS_NODE_KEY_SECRET)
    );
    let named = parse(kube.into_iter().chain(["--cross-node-key-secret", "s"])).unwrap();
    assert_eq!(named.cross_node_key_secret.as_deref(), Some("s"));
    let from_file = parse(kube.into_iter().chain(["--cross-node-key", "/k"])).unwrap();
    assert_eq!(from_file.cross_node_key, Some(PathBuf::from("/k")));
    let both = ["--cross-node-key", "/k", "--cross-node-key-secret", "s"];
    assert!(parse(kube.into_iter().chain(both)).is_err());
}
