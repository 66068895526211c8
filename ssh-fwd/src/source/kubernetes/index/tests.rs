//! The incremental index against the full recompute: random sequences of
//! watch events over a small cluster (few names, so events collide: ports
//! shared by several Services, slices moving between Services, relists that
//! drop objects), checked after every event. Both families take part: SSH
//! IPs, Service addresses and slices of either, so frontends of one family
//! meet backends of both.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use ssh_fwd_common::maps::MAX_MAPPINGS;

use super::*;
use crate::{
    k8s::grant::Grant,
    mapping::{Family, Mapping},
    source::kubernetes::{
        desired::Styles,
        objects::{Ingress, PodAt, PortView},
    },
};

const SSH_IPS: [&str; 3] = ["198.18.0.10", "198.18.0.11", "fd00:198::10"];
const OTHER_IPS: [&str; 2] = ["203.0.113.9", "2001:db8::9"];
const POD_IPS: [&str; 5] = [
    "10.244.1.5",
    "10.244.1.6",
    "10.244.2.7",
    "fd00:244:1::5",
    "fd00:244:2::7",
];
/// Backends that make their Service invalid (skipped whole).
const LOOPBACKS: [&str; 2] = ["127.0.0.1", "::1"];

fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

fn policy(styles: Styles) -> Policy {
    Policy {
        guard: Default::default(),
        ssh_ips: SSH_IPS.iter().map(|t| ip(t)).collect(),
        ports: 8000..=8001,
        styles,
        capacity: MAX_MAPPINGS as usize,
    }
}

fn service_id(n: usize) -> Id {
    format!("jobs/s{n}").into()
}

fn addresses() -> impl Strategy<Value = Vec<IpAddr>> {
    proptest::sample::subsequence([&SSH_IPS[..], &OTHER_IPS[..]].concat(), 0..=3)
        .prop_map(|ips| ips.into_iter().map(ip).collect())
}

/// A slice's `addressType`: mostly IPv4 or IPv6, sometimes FQDN.
fn family() -> impl Strategy<Value = Option<Family>> {
    prop_oneof![
        4 => Just(Some(Family::V4)),
        4 => Just(Some(Family::V6)),
        1 => Just(None),
    ]
}

/// Addresses of `family` only, as a slice read off the wire holds.
fn of_family(texts: Vec<&str>, family: Option<Family>) -> Vec<IpAddr> {
    (texts.into_iter().map(ip))
        .filter(|ip| Some(Family::of(*ip)) == family)
        .collect()
}

fn port() -> impl Strategy<Value = PortView> {
    (
        prop_oneof![Just(""), Just("ssh"), Just("alt")],
        prop_oneof![Just(8000), Just(8001), Just(7999)],
        prop::bool::weighted(0.9),
        prop::option::of(prop_oneof![Just(22u16), Just(2222)]),
    )
        .prop_map(|(name, port, tcp, numeric_target)| PortView {
            name: name.into(),
            port,
            tcp,
            numeric_target,
        })
}

/// The uid of the pod at a pod address, when the slice names one: two
/// addresses are the same pod's, so a granted port finds one of several.
fn pod_uid(ip: &IpAddr) -> Option<Box<str>> {
    let n = POD_IPS.iter().position(|p| self::ip(p) == *ip)?;
    (n != 4).then(|| format!("uid-{}", n % 3).into())
}

/// Ingress entries, each listing some of the ports in the range.
fn ingress() -> impl Strategy<Value = Vec<Ingress>> {
    (
        addresses(),
        prop::collection::vec(proptest::sample::subsequence(vec![8000u16, 8001], 0..=2), 3),
    )
        .prop_map(|(ips, ports)| {
            (ips.into_iter().zip(ports))
                .map(|(ip, ports)| Ingress {
                    ip,
                    ports: ports.into(),
                })
                .collect()
        })
}

/// A grant of a port (in the range or not) to one of the pods.
fn grant() -> impl Strategy<Value = Option<Grant>> {
    prop::option::of(
        (
            prop_oneof![Just(8000u16), Just(8001), Just(7999)],
            0..3usize,
        )
            .prop_map(|(port, n)| Grant {
                port,
                pod_uid: format!("uid-{n}").into(),
            }),
    )
}

fn service(n: usize) -> impl Strategy<Value = ServiceView> {
    (
        prop::option::of(0..3i64),
        any::<bool>(),
        prop::bool::weighted(0.8),
        addresses(),
        ingress(),
        grant(),
        prop::collection::vec(port(), 1..=2),
    )
        .prop_map(
            move |(age, ours, node_ports_off, external_ips, ingress, grant, ports)| {
                let created = age.map(|days| {
                    let text = format!("2026-01-0{}T00:00:00Z", days + 1);
                    Time(text.parse().expect("time"))
                });
                ServiceView {
                    guard: Default::default(),
                    id: service_id(n),
                    created,
                    external_ips: external_ips.into(),
                    ours,
                    node_ports_off,
                    ingress: if ours {
                        ingress.into()
                    } else {
                        Vec::new().into()
                    },
                    grant,
                    ports: ports.into(),
                }
            },
        )
}

fn slice() -> impl Strategy<Value = SliceView> {
    (
        prop::option::of(0..4usize),
        family(),
        prop::collection::vec(
            (
                prop_oneof![Just(""), Just("ssh"), Just("alt")],
                prop::option::of(prop_oneof![Just(22u16), Just(2200)]),
            ),
            0..=2,
        ),
        proptest::sample::subsequence([&POD_IPS[..], &LOOPBACKS[..]].concat(), 0..=3),
        proptest::sample::subsequence(&POD_IPS[..], 0..=2),
    )
        .prop_map(|(service, family, ports, ready, terminating)| {
            let (ready, terminating) = (of_family(ready, family), of_family(terminating, family));
            let pods = (ready.iter().chain(&terminating))
                .map(|ip| PodAt {
                    ip: *ip,
                    name: format!("jobs/{ip}").into(),
                    uid: pod_uid(ip),
                })
                .collect();
            SliceView {
                service: service.map(service_id),
                family,
                ports: ports.into_iter().map(|(n, p)| (n.into(), p)).collect(),
                ready: ready.into(),
                terminating: terminating.into(),
                pods,
            }
        })
}

fn slice_id(n: usize) -> Id {
    format!("jobs/slice-{n}").into()
}

fn update() -> impl Strategy<Value = Update> {
    let one_service = (0..4usize).prop_flat_map(|n| {
        prop::option::weighted(0.8, service(n)).prop_map(move |v| Update::Service(service_id(n), v))
    });
    let one_slice = (0..6usize, prop::option::weighted(0.8, slice()))
        .prop_map(|(n, v)| Update::Slice(slice_id(n), v));
    let services =
        prop::collection::vec((0..4usize).prop_flat_map(service), 0..=4).prop_map(|mut all| {
            all.sort_by(|a, b| a.id.cmp(&b.id));
            all.dedup_by(|a, b| a.id == b.id);
            Update::Services(all)
        });
    let slices = prop::collection::btree_map(0..6usize, slice(), 0..=6)
        .prop_map(|all| Update::Slices(all.into_iter().map(|(n, v)| (slice_id(n), v)).collect()));
    prop_oneof![4 => one_service, 4 => one_slice, 1 => services, 1 => slices]
}

fn styles() -> impl Strategy<Value = Styles> {
    prop_oneof![
        3 => Just(Styles::ALL),
        1 => Just(Styles { load_balancer: true, external_ips: false }),
        1 => Just(Styles { load_balancer: false, external_ips: true }),
    ]
}

fn sorted(mut notes: Vec<Note>) -> Vec<Note> {
    notes.sort();
    notes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn incremental_state_always_equals_the_full_recompute(
        styles in styles(),
        batches in prop::collection::vec(prop::collection::vec(update(), 1..=3), 1..=25),
    ) {
        let mut index = Index::new(policy(styles));
        index.take_touched();
        for batch in batches {
            let before = index.mappings().clone();
            index.apply(batch.clone());
            let full = index.full();
            prop_assert_eq!(index.mappings(), &full.mappings, "after {:?}", batch);
            // Every frontend whose mapping changed is named as touched.
            if let Some(touched) = index.take_touched() {
                let after = index.mappings();
                for m in before.iter().chain(after.iter()) {
                    if before.get(&m.frontend) != after.get(&m.frontend) {
                        prop_assert!(touched.contains(&m.frontend), "{} not touched after {:?}", m.frontend, batch);
                    }
                }
            }
            let invalid = (full.notes.iter())
                .filter(|n| matches!(n, Note::Invalid { .. }))
                .count();
            prop_assert_eq!(index.invalid_services(), invalid, "after {:?}", batch);
            prop_assert_eq!(index.notes(), sorted(full.notes), "after {:?}", batch);
        }
        prop_assert_eq!(index.check(), Ok(()));
    }
}

fn view(n: usize, created: &str, port: i32) -> ServiceView {
    ServiceView {
        guard: Default::default(),
        id: service_id(n),
        created: Some(Time(created.parse().expect("time"))),
        external_ips: vec![ip(SSH_IPS[0])].into(),
        ours: false,
        node_ports_off: false,
        ingress: Vec::new().into(),
        grant: None,
        ports: vec![PortView {
            name: "".into(),
            port,
            tcp: true,
            numeric_target: Some(22),
        }]
        .into(),
    }
}

fn ready(service: usize, pod: &str) -> SliceView {
    SliceView {
        service: Some(service_id(service)),
        family: Some(Family::of(ip(pod))),
        ports: vec![("".into(), Some(22))].into(),
        ready: vec![ip(pod)].into(),
        terminating: Vec::new().into(),
        pods: Vec::new().into(),
    }
}

#[test]
fn a_port_goes_to_the_younger_claimant_only_once_the_owner_is_deleted() {
    let mut index = Index::new(policy(Styles::ALL));
    let raised = index.apply([
        Update::Service(service_id(0), Some(view(0, "2026-01-01T00:00:00Z", 8000))),
        Update::Service(service_id(1), Some(view(1, "2026-02-01T00:00:00Z", 8000))),
        Update::Slice(slice_id(1), Some(ready(1, POD_IPS[1]))),
    ]);
    assert!(index.mappings().is_empty(), "the owner has no endpoint yet");
    assert!(raised.iter().any(|n| matches!(n, Note::Conflict { .. })));
    index.apply([Update::Slice(slice_id(0), Some(ready(0, POD_IPS[0])))]);
    let backends: Vec<String> = index
        .mappings()
        .iter()
        .map(|m| m.backend.to_string())
        .collect();
    assert_eq!(backends, ["10.244.1.5:22"]);
    // The owner's pod restarts: closed, not handed over.
    index.apply([Update::Slice(slice_id(0), None)]);
    assert!(index.mappings().is_empty());
    // The owner goes: now the younger one owns the port.
    let raised = index.apply([Update::Service(service_id(0), None)]);
    assert!(raised.is_empty(), "nothing new to log: {raised:?}");
    let backends: Vec<String> = index
        .mappings()
        .iter()
        .map(|m| m.backend.to_string())
        .collect();
    assert_eq!(backends, ["10.244.1.6:22"]);
}

#[test]
fn a_note_is_raised_once_while_it_holds() {
    let mut index = Index::new(policy(Styles::ALL));
    let first = index.apply([Update::Service(
        service_id(0),
        Some(view(0, "2026-01-01T00:00:00Z", 8000)),
    )]);
    assert_eq!(
        first,
        [Note::NoReadyEndpoint {
            service: "jobs/s0".into()
        }]
    );
    let again = index.apply([Update::Service(
        service_id(0),
        Some(view(0, "2026-01-01T00:00:00Z", 8001)),
    )]);
    assert!(again.is_empty(), "still the same note: {again:?}");
}

#[test]
fn the_self_check_finds_and_repairs_drift() {
    let mut index = Index::new(policy(Styles::ALL));
    index.apply([
        Update::Service(service_id(0), Some(view(0, "2026-01-01T00:00:00Z", 8000))),
        Update::Slice(slice_id(0), Some(ready(0, POD_IPS[0]))),
    ]);
    assert_eq!(index.check(), Ok(()));
    index.all.insert(Mapping {
        guard: Default::default(),
        name: "stray".into(),
        frontend: "198.18.0.10:8001".parse().expect("addr"),
        backend: "10.9.9.9:22".parse().expect("addr"),
    });
    assert_eq!(index.check(), Err(Drift { differing: 1 }));
    assert_eq!(index.mappings(), &index.full().mappings);
    assert_eq!(index.mappings().len(), 1);
}

#[test]
fn a_service_with_a_loopback_backend_is_skipped_and_counted_until_it_is_fixed() {
    let mut index = Index::new(policy(Styles::ALL));
    let raised = index.apply([
        Update::Service(service_id(0), Some(view(0, "2026-01-01T00:00:00Z", 8000))),
        Update::Slice(slice_id(0), Some(ready(0, LOOPBACKS[0]))),
    ]);
    assert!(index.mappings().is_empty());
    assert_eq!(index.invalid_services(), 1);
    assert!(raised.iter().any(|n| matches!(n, Note::Invalid { .. })));
    index.apply([Update::Slice(slice_id(0), Some(ready(0, POD_IPS[0])))]);
    assert_eq!(index.invalid_services(), 0);
    assert_eq!(index.mappings().len(), 1);
}

#[test]
fn over_capacity_the_index_leaves_out_the_newest_and_takes_them_back_when_room_frees() {
    let max = MAX_MAPPINGS as usize;
    let wide = Policy {
        ports: 1..=65535,
        ..policy(Styles::ALL)
    };
    let mut index = Index::new(wide);
    let port = |n: usize| i32::try_from(1000 + n).expect("port");
    let mut updates = Vec::new();
    for n in 0..=max {
        // Ages by the second: service n is older than n + 1.
        let created = format!(
            "2026-01-01T{:02}:{:02}:{:02}Z",
            n / 3600,
            n / 60 % 60,
            n % 60
        );
        updates.push(Update::Service(
            service_id(n),
            Some(view(n, &created, port(n))),
        ));
        updates.push(Update::Slice(slice_id(n), Some(ready(n, POD_IPS[0]))));
    }
    let raised = index.apply(updates);
    assert_eq!(index.mappings().len(), max);
    assert_eq!(index.left_out(), 1);
    let newest = service_id(max).to_string();
    assert!(raised.iter().any(
        |n| matches!(n, Note::OverCapacity { left_out, .. } if *left_out == [newest.clone()])
    ));
    assert!(index.mappings().iter().all(|m| *m.name != *newest));
    assert_eq!(index.mappings(), &index.full().mappings);
    index.take_touched();
    index.apply([Update::Service(service_id(0), None)]);
    assert_eq!(
        index.take_touched(),
        None,
        "a change of the cut may change any mapping"
    );
    assert_eq!(index.left_out(), 0);
    assert_eq!(index.mappings().len(), max);
    assert!(index.mappings().iter().any(|m| *m.name == *newest));
    assert_eq!(index.check(), Ok(()));
}

#[test]
fn an_address_the_node_gains_is_refused_as_a_backend_from_then_on() {
    let mut index = Index::on_node(policy(Styles::ALL), BTreeMap::new());
    index.apply([
        Update::Service(service_id(0), Some(view(0, "2026-01-01T00:00:00Z", 8000))),
        Update::Slice(slice_id(0), Some(ready(0, POD_IPS[0]))),
    ]);
    assert_eq!(index.mappings().len(), 1);
    index.take_touched();
    // The node gets the endpoint's address (a CNI bridge's gateway, say).
    let gained = BTreeMap::from([(ip(POD_IPS[0]), "cni0".to_owned())]);
    let raised = index.set_node_addrs(gained.clone());
    assert!(index.mappings().is_empty());
    assert_eq!(index.invalid_services(), 1);
    assert!(
        raised
            .iter()
            .any(|n| matches!(n, Note::Invalid { problem, .. } if problem.contains("cni0"))),
        "{raised:?}"
    );
    let frontend: SocketAddr = "198.18.0.10:8000".parse().expect("addr");
    assert_eq!(index.take_touched(), Some(BTreeSet::from([frontend])));
    assert_eq!(index.check(), Ok(()));
    // The same addresses again change nothing; losing it maps it again.
    assert!(index.set_node_addrs(gained).is_empty());
    assert_eq!(index.take_touched(), Some(BTreeSet::new()));
    index.set_node_addrs(BTreeMap::new());
    assert_eq!(index.mappings().len(), 1);
    assert_eq!(index.invalid_services(), 0);
    assert_eq!(index.check(), Ok(()));
}

#[test]
fn a_services_name_is_kept_once_whether_its_slice_or_itself_comes_first() {
    for slice_first in [true, false] {
        let service = Update::Service(service_id(0), Some(view(0, "2026-01-01T00:00:00Z", 8000)));
        let slice = Update::Slice(slice_id(0), Some(ready(0, POD_IPS[0])));
        let mut index = Index::new(policy(Styles::ALL));
        if slice_first {
            index.apply([slice, service]);
        } else {
            index.apply([service, slice]);
        }
        let (key, view) = index.services.iter().next().expect("the Service");
        let named = index.slices[&slice_id(0)]
            .service
            .as_ref()
            .expect("its Service");
        assert!(Arc::ptr_eq(key, &view.id), "slice first: {slice_first}");
        assert!(Arc::ptr_eq(key, named), "slice first: {slice_first}");
        assert_eq!(index.mappings().len(), 1);
    }
}

#[test]
fn a_whole_list_packed_equals_the_full_recompute() {
    let services = (0..2 * PACK_AFTER)
        .map(|n| {
            let mut v = view(n, "2026-01-01T00:00:00Z", 8000);
            v.external_ips = vec![ip(SSH_IPS[n % 2])].into();
            v.ports[0].port = 8000 + i32::try_from(n / 2).expect("port");
            v
        })
        .collect();
    let slices = (0..2 * PACK_AFTER)
        .map(|n| (slice_id(n), ready(n, POD_IPS[n % 3])))
        .collect();
    let mut index = Index::new(Policy {
        ports: 8000..=9999,
        ..policy(Styles::ALL)
    });
    index.apply([Update::Services(services), Update::Slices(slices)]);
    assert_eq!(index.mappings().len(), 2 * PACK_AFTER);
    assert_eq!(index.check(), Ok(()));
}
