use std::sync::Arc;

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::util::intstr::IntOrString};
use serde_json::{Value, json};

use super::*;
use crate::{
    args::ServiceStyle,
    controller::{
        service::{self, Settings},
        world::policy_for,
    },
    k8s::activity::{config_map_name, data_key},
};

const IP4: std::net::Ipv4Addr = std::net::Ipv4Addr::new(198, 18, 0, 10);
const IP: IpAddr = IpAddr::V4(IP4);
const MINUTE: Duration = Duration::from_secs(60);
const INTERVAL: Duration = Duration::from_secs(300);
/// The Service's creation; reports are after it unless said otherwise.
const CREATED: u64 = 1_780_000_000;

fn at(second: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(CREATED + second)
}

fn pod(annotations: Value) -> Arc<PodView> {
    let value = json!({
        "metadata": {"name": "job", "namespace": "jobs", "uid": "uid-job",
                     "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED},
                     "annotations": annotations},
        "status": {"phase": "Running"},
    });
    Arc::new(serde_json::from_value(value).unwrap())
}

fn ours(pod: &PodView, port: u16) -> Arc<Service> {
    let settings = Settings {
        ssh_ips: crate::controller::ssh_ips::SshIps::single(IP),
        style: ServiceStyle::Loadbalancer,
    };
    let svc = service::build(pod, port, IntOrString::Int(22), &settings);
    let mut value = serde_json::to_value(&svc).unwrap();
    value["metadata"]["creationTimestamp"] = json!(rfc3339(at(0)));
    value["status"] = crate::k8s::grant::status_json(&["198.18.0.10"], port, "uid-job");
    Arc::new(serde_json::from_value(value).unwrap())
}

fn world(pod: Arc<PodView>, port: u16) -> World {
    let svc = ours(&pod, port);
    World::of(policy_for(IP), IP, &[pod], &[svc], &[])
}

/// A node's ConfigMap reporting `(port, last second, open)`.
fn node(name: &str, reports: &[(u16, u64, u64)]) -> ConfigMap {
    let data = reports
        .iter()
        .map(|&(port, second, open)| {
            let report = Report::new(Some(at(second)), open);
            (data_key(IP, port), serde_json::to_string(&report).unwrap())
        })
        .collect();
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(config_map_name(name)),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// The controller's clock in these tests: an hour after the Service was
/// made.
fn now() -> SystemTime {
    at(3600)
}

fn merged(reports: &[(u16, u64, u64)]) -> BTreeMap<u16, Merged> {
    merge(&[node("a", reports)], IP, now()).ports
}

#[test]
fn a_report_ahead_of_the_clock_by_more_than_the_skew_is_ignored_and_named() {
    // Node b's agent (or whoever can write its ConfigMap) says its last
    // packet is an hour from now: believed, it would keep the pod "active"
    // for an hour after the session ended, and never go back.
    let merge = merge(
        &[
            node("a", &[(9000, 100, 1)]),
            node("b", &[(9000, 3600 + 3600, 5), (9001, 3600 + 10, 1)]),
        ],
        IP,
        now(),
    );
    assert_eq!(
        merge.ports[&9000],
        Merged {
            last: Some(at(100)),
            open: 1
        },
        "b's report of 9000 is ignored, its connections too"
    );
    // Within the skew: a clock a little ahead is believed.
    assert_eq!(merge.ports[&9001].last, Some(at(3600 + 10)));
    assert_eq!(merge.ahead, [(config_map_name("b"), 1)].into());
    assert!(CLOCK_SKEW >= Duration::from_secs(10) && CLOCK_SKEW < Duration::from_secs(300));
}

#[test]
fn a_config_map_ahead_of_the_clock_is_warned_of_once() {
    let mut mirror = Mirror::new(INTERVAL);
    let ahead = |n| BTreeMap::from([(config_map_name("b"), n)]);
    assert_eq!(mirror.note_ahead(&ahead(2)), vec![config_map_name("b")]);
    assert!(mirror.note_ahead(&ahead(1)).is_empty(), "told once");
    assert_eq!(mirror.reports_ahead(), 3, "every ignored report counted");
}

#[test]
fn an_ipv6_ssh_ips_reports_merge_apart_from_the_ipv4_ones() {
    let ip6 = IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10));
    let mut a = node("a", &[(9000, 100, 1)]);
    a.data.as_mut().unwrap().insert(
        data_key(ip6, 9000),
        serde_json::to_string(&Report::new(Some(at(50)), 4)).unwrap(),
    );
    let v6 = merge(&[a.clone()], ip6, now()).ports;
    assert_eq!(
        v6,
        [(
            9000,
            Merged {
                last: Some(at(50)),
                open: 4
            }
        )]
        .into()
    );
    assert_eq!(merge(&[a], IP, now()).ports[&9000].open, 1);
}

#[test]
fn reports_merge_by_port_with_the_latest_packet_and_every_nodes_connections() {
    let other_ip = data_key(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)), 9000);
    let mut b = node("b", &[(9000, 50, 2), (9001, 5, 0)]);
    let data = b.data.as_mut().unwrap();
    data.insert(other_ip, r#"{"openConnections":7}"#.into());
    data.insert("junk".into(), "{}".into());
    data.insert(data_key(IP, 9002), "not json".into());
    let merged = merge(&[node("a", &[(9000, 100, 1)]), b], IP, now()).ports;
    assert_eq!(
        merged,
        [
            (
                9000,
                Merged {
                    last: Some(at(100)),
                    open: 3
                }
            ),
            (
                9001,
                Merged {
                    last: Some(at(5)),
                    open: 0
                }
            ),
        ]
        .into()
    );
}

#[test]
fn a_pod_is_annotated_at_once_then_at_most_once_per_interval() {
    let world = world(pod(json!({})), 9000);
    let mut mirror = Mirror::new(INTERVAL);
    let t0 = Instant::now();
    let writes = mirror.due(&world, &merged(&[(9000, 100, 1)]), t0);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].0.uid, "uid-job");
    assert_eq!(
        writes[0].1,
        Annotation {
            last: at(100),
            open: 1
        }
    );
    // A minute on, newer activity waits for the interval.
    let newer = merged(&[(9000, 160, 2)]);
    assert!(mirror.due(&world, &newer, t0 + MINUTE).is_empty());
    assert_eq!(mirror.until_due(t0 + MINUTE), Some(INTERVAL - MINUTE));
    let writes = mirror.due(&world, &newer, t0 + INTERVAL);
    assert_eq!(
        writes[0].1,
        Annotation {
            last: at(160),
            open: 2
        }
    );
    // Nothing new: nothing written, however long after.
    assert!(mirror.due(&world, &newer, t0 + 3 * INTERVAL).is_empty());
    assert_eq!(mirror.until_due(t0 + 3 * INTERVAL), None);
}

#[test]
fn a_new_leader_takes_the_annotation_as_just_written() {
    let annotated = json!({
        vocabulary::LAST_ACTIVITY: rfc3339(at(100)),
        vocabulary::SSH_CONNECTIONS: "1",
    });
    let world = world(pod(annotated), 9000);
    let mut mirror = Mirror::new(INTERVAL);
    let t0 = Instant::now();
    assert!(
        mirror
            .due(&world, &merged(&[(9000, 200, 1)]), t0)
            .is_empty()
    );
    let writes = mirror.due(&world, &merged(&[(9000, 200, 1)]), t0 + INTERVAL);
    assert_eq!(
        writes[0].1,
        Annotation {
            last: at(200),
            open: 1
        }
    );
}

#[test]
fn the_time_never_goes_back_and_a_failed_write_is_tried_again() {
    let annotated = json!({vocabulary::LAST_ACTIVITY: rfc3339(at(500))});
    let world = world(pod(annotated), 9000);
    let mut mirror = Mirror::new(INTERVAL);
    let t0 = Instant::now();
    // An agent that restarted reports an older packet, and a connection.
    mirror.due(&world, &merged(&[(9000, 100, 1)]), t0);
    let writes = mirror.due(&world, &merged(&[(9000, 100, 1)]), t0 + INTERVAL);
    assert_eq!(
        writes[0].1,
        Annotation {
            last: at(500),
            open: 1
        }
    );
    mirror.failed("uid-job", t0 + INTERVAL);
    assert_eq!(mirror.until_due(t0 + INTERVAL), Some(RETRY));
    let again = mirror.due(&world, &merged(&[(9000, 100, 1)]), t0 + INTERVAL + RETRY);
    assert_eq!(again.len(), 1, "the pod's annotation still says 0");
}

#[test]
fn activity_from_before_the_service_or_on_a_port_nobody_serves_is_ignored() {
    let world = world(pod(json!({})), 9000);
    let mut mirror = Mirror::new(INTERVAL);
    let before = merge(&[node("a", &[])], IP, now())
        .ports
        .into_iter()
        .chain([(
            9000,
            Merged {
                last: Some(at(0) - MINUTE),
                open: 0,
            },
        )]);
    assert!(
        mirror
            .due(&world, &before.collect(), Instant::now())
            .is_empty()
    );
    assert!(
        mirror
            .due(&world, &merged(&[(9001, 100, 1)]), Instant::now())
            .is_empty()
    );
}

/// Activity goes to the pod the port's owner serves, as the agents judge
/// it: someone else's Service leads to no pod; one that lists a granted
/// port, however old, takes nothing from the grant's pod.
#[test]
fn a_foreign_service_leads_to_no_pod_and_takes_no_granted_ports_activity() {
    let pod = pod(json!({}));
    let foreign: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "other",
                         "creationTimestamp": rfc3339(at(0) - MINUTE)},
            "spec": {"externalIPs": [IP.to_string()], "ports": [{"port": 9000}, {"port": 9001}]},
        }))
        .unwrap(),
    );
    let world = World::of(
        policy_for(IP),
        IP,
        std::slice::from_ref(&pod),
        &[ours(&pod, 9000), foreign],
        &[],
    );
    let mut mirror = Mirror::new(INTERVAL);
    assert!(
        mirror
            .due(&world, &merged(&[(9001, 100, 1)]), Instant::now())
            .is_empty()
    );
    assert_eq!(
        mirror
            .due(&world, &merged(&[(9000, 100, 1)]), Instant::now())
            .len(),
        1
    );
}
