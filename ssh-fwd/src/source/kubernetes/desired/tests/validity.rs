//! Services that would break or hijack a node are skipped; the rest apply.

use serde_json::{Value, json};
use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::{super::*, views};
use crate::source::kubernetes::objects::SERVICE_NAME_LABEL;

const SSH_IP: &str = "198.18.0.10";

fn policy() -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: [SSH_IP.parse().unwrap()].into(),
        ports: 1..=65535,
        styles: Styles::ALL,
        capacity: MAX_MAPPINGS as usize,
    }
}

fn service(name: &str, port: u32, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "jobs", "creationTimestamp": created},
        "spec": {"externalIPs": [SSH_IP], "ports": [{"port": port, "targetPort": 22, "protocol": "TCP"}]}
    })
}

fn slice(service: &str, ip: &str) -> Value {
    json!({
        "metadata": {"name": format!("{service}-abc"), "namespace": "jobs", "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
    })
}

fn names(d: &Desired) -> Vec<String> {
    d.mappings.iter().map(|m| m.name.to_string()).collect()
}

#[test]
fn a_service_with_a_dangerous_backend_is_skipped_and_the_rest_apply() {
    let t = "2026-01-01T00:00:00Z";
    let (services, slices) = views(
        vec![
            service("good", 8022, t),
            service("loop", 8023, t),
            service("self", 8024, t),
            service("link", 8025, t),
        ],
        vec![
            slice("good", "10.244.1.5"),
            slice("loop", "127.0.0.1"),
            slice("self", SSH_IP),
            slice("link", "169.254.169.254"),
        ],
    );
    let d = compute(&services, &slices, &policy());
    assert_eq!(names(&d), ["jobs/good"]);
    // In the order the full recompute visits Services (by namespace/name).
    let skipped: Vec<&str> = d
        .notes
        .iter()
        .filter_map(|n| match n {
            Note::Invalid { service, .. } => Some(service.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, ["jobs/link", "jobs/loop", "jobs/self"]);
}

#[test]
fn over_capacity_the_newest_services_are_left_out_and_named() {
    let n = MAX_MAPPINGS as usize + 2;
    let mut services = Vec::with_capacity(n);
    let mut slices = Vec::with_capacity(n);
    for i in 0..n {
        // Older services first; the last two are the newest.
        let created = format!(
            "2026-01-01T{:02}:{:02}:{:02}Z",
            i / 3600,
            i / 60 % 60,
            i % 60
        );
        let name = format!("s{i}");
        services.push(service(&name, 1000 + i as u32, &created));
        slices.push(slice(&name, &format!("10.{}.{}.1", 100 + i / 250, i % 250)));
    }
    let (services, slices) = views(services, slices);
    let d = compute(&services, &slices, &policy());
    assert_eq!(d.mappings.len(), MAX_MAPPINGS as usize);
    let kept = names(&d);
    assert!(!kept.contains(&format!("jobs/s{}", n - 1)));
    assert!(!kept.contains(&format!("jobs/s{}", n - 2)));
    assert!(kept.contains(&"jobs/s0".to_owned()));
    let over = d.notes.iter().find_map(|n| match n {
        Note::OverCapacity { excess, left_out } => Some((*excess, left_out.clone())),
        _ => None,
    });
    assert_eq!(
        over,
        Some((
            2,
            vec![format!("jobs/s{}", n - 2), format!("jobs/s{}", n - 1)]
        ))
    );
    // A node with a smaller --max-mappings cuts at its own capacity.
    let small = Policy {
        capacity: 10,
        ..policy()
    };
    let d = compute(&services, &slices, &small);
    assert_eq!(d.mappings.len(), 10);
    assert!(names(&d).contains(&"jobs/s9".to_owned()));
    assert!(!names(&d).contains(&"jobs/s10".to_owned()));
}

#[test]
fn a_service_whose_endpoint_is_an_address_of_the_node_is_skipped() {
    let t = "2026-01-01T00:00:00Z";
    // A hostNetwork pod's endpoint is its node's address.
    let (services, slices) = views(
        vec![service("good", 8022, t), service("hostnet", 8023, t)],
        vec![slice("good", "10.244.1.5"), slice("hostnet", "192.0.2.1")],
    );
    let node = [("192.0.2.1".parse().unwrap(), "eth0".to_owned())].into();
    let d = compute_on(&services, &slices, &policy(), &rules(&policy(), node));
    assert_eq!(names(&d), ["jobs/good"]);
    let problem = d.notes.iter().find_map(|n| match n {
        Note::Invalid { service, problem } if service == "jobs/hostnet" => Some(problem.clone()),
        _ => None,
    });
    assert!(
        problem.is_some_and(|p| p.contains("is an address of this node (interface eth0)")),
        "{:?}",
        d.notes
    );
    // Off the node (the controller's view) the same endpoint is a pod's.
    assert_eq!(names(&compute(&services, &slices, &policy())).len(), 2);
}

#[test]
fn an_invalid_owner_keeps_its_port_closed_and_a_younger_claimant_does_not_take_it() {
    // The older Service's endpoint is the node's own address (a hostNetwork
    // pod): it cannot be served here, but it still owns the port, as the
    // controller sees it; the younger one on the same frontend gets nothing.
    let (services, slices) = views(
        vec![
            service("older", 8022, "2026-01-01T00:00:00Z"),
            service("younger", 8022, "2026-01-02T00:00:00Z"),
            service("other", 8023, "2026-01-02T00:00:00Z"),
        ],
        vec![
            slice("older", "192.0.2.1"),
            slice("younger", "10.244.1.6"),
            slice("other", "10.244.1.7"),
        ],
    );
    let node = [("192.0.2.1".parse().unwrap(), "eth0".to_owned())].into();
    let d = compute_on(&services, &slices, &policy(), &rules(&policy(), node));
    assert_eq!(names(&d), ["jobs/other"]);
    assert!(
        d.notes.contains(&Note::Conflict {
            frontend: format!("{SSH_IP}:8022").parse().unwrap(),
            winner: "jobs/older".into(),
            loser: "jobs/younger".into(),
        }),
        "{:?}",
        d.notes
    );
    assert!(
        d.notes
            .iter()
            .any(|n| matches!(n, Note::Invalid { service, .. } if service == "jobs/older"))
    );
}

#[test]
fn a_service_with_a_bad_guard_is_skipped_with_its_reason_and_a_good_one_carries_it() {
    use crate::vocabulary::{SOURCE_RANGES, SYN_RATE};
    let t = "2026-01-01T00:00:00Z";
    let mut bad_range = service("bad-range", 8022, t);
    bad_range["metadata"]["annotations"] = json!({SOURCE_RANGES: "10.0.0.0/8, 10.1.2.3/16"});
    let mut bad_rate = service("bad-rate", 8023, t);
    bad_rate["metadata"]["annotations"] = json!({SYN_RATE: "fast"});
    let mut good = service("good", 8024, t);
    good["metadata"]["annotations"] = json!({SOURCE_RANGES: "192.0.2.0/24", SYN_RATE: "5/s"});
    let (services, slices) = views(
        vec![bad_range, bad_rate, good],
        vec![
            slice("bad-range", "10.244.1.5"),
            slice("bad-rate", "10.244.1.6"),
            slice("good", "10.244.1.7"),
        ],
    );
    let d = compute(&services, &slices, &policy());
    assert_eq!(names(&d), ["jobs/good"]);
    let m = d.mappings.iter().next().unwrap();
    assert_eq!(
        m.guard.ranges(),
        Some(&["192.0.2.0/24".parse().unwrap()].into())
    );
    assert!(m.guard.rate().is_some());
    let problems: Vec<&str> = (d.notes.iter())
        .filter_map(|n| match n {
            Note::Invalid { problem, .. } => Some(problem.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    // By namespace/name: bad-range, then bad-rate.
    assert!(
        problems[0].contains("source range #2: `10.1.2.3/16` has bits set"),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with("annotation ssh-fwd.io/syn-rate: `fast`"),
        "{problems:?}"
    );
}

#[test]
fn a_service_asking_for_more_than_the_agents_guard_is_narrowed_with_a_note_not_refused() {
    use crate::{
        mapping::guard::{Cidr, Cut, Defaults, SynRate},
        vocabulary::{SOURCE_RANGES, SYN_RATE},
    };
    let cidr = |s: &str| s.parse::<Cidr>().unwrap();
    let t = "2026-01-01T00:00:00Z";
    let mut wide = service("wide", 8022, t);
    wide["metadata"]["annotations"] = json!({SOURCE_RANGES: "0.0.0.0/0", SYN_RATE: "off"});
    let mut narrow = service("narrow", 8023, t);
    narrow["metadata"]["annotations"] = json!({SOURCE_RANGES: "192.0.2.7", SYN_RATE: "5/s"});
    let (services, slices) = views(
        vec![wide, narrow],
        vec![slice("wide", "10.244.1.5"), slice("narrow", "10.244.1.6")],
    );
    let policy = Policy {
        guard: Defaults {
            allow: [cidr("192.0.2.0/24")].into(),
            syn_rate: Some(SynRate(20)),
            ..Defaults::default()
        },
        ..policy()
    };
    let d = compute(&services, &slices, &policy);
    assert_eq!(names(&d), ["jobs/wide", "jobs/narrow"], "both forwarded");
    let guard = |port: u16| {
        let frontend = format!("{SSH_IP}:{port}").parse().unwrap();
        d.mappings.get(&frontend).unwrap().guard.clone()
    };
    assert_eq!(guard(8022).ranges(), Some(&[cidr("192.0.2.0/24")].into()));
    assert_eq!(guard(8022).rate().map(|r| r.rate()), Some(20));
    assert_eq!(guard(8023).ranges(), Some(&[cidr("192.0.2.7/32")].into()));
    assert_eq!(guard(8023).rate().map(|r| r.rate()), Some(5));
    let narrowed: Vec<&Note> = (d.notes.iter())
        .filter(|n| matches!(n, Note::Narrowed { .. }))
        .collect();
    assert_eq!(
        narrowed,
        [&Note::Narrowed {
            service: "jobs/wide".into(),
            cut: vec![
                Cut::Range {
                    asked: cidr("0.0.0.0/0"),
                    kept: vec![cidr("192.0.2.0/24")],
                },
                Cut::Rate {
                    asked: None,
                    kept: SynRate(20),
                },
            ],
        }],
        "only the Service that asked for more, once"
    );
}
