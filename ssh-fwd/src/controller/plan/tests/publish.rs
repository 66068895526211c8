//! Telling a pod its endpoint: only once its Service holds the port and,
//! for a LoadBalancer, once the cache shows exactly our ingress address.

use super::*;
use crate::vocabulary;

fn job_1() -> PodRef {
    PodRef {
        namespace: "jobs".into(),
        name: "job-1".into(),
        uid: "uid-job-1".into(),
    }
}

fn with_ingress(svc: &Service, ingress: Value) -> Arc<Service> {
    let mut value = serde_json::to_value(svc).unwrap();
    value["status"] = json!({"loadBalancer": {"ingress": ingress}});
    Arc::new(serde_json::from_value(value).unwrap())
}

#[test]
fn a_load_balancer_endpoint_is_announced_only_once_its_ingress_is_seen() {
    let p = pod("job-1", json!({}));
    let fresh = ours(&p, 8123, "2026-11-01T00:00:00Z", false);
    let actions = run(
        std::slice::from_ref(&p),
        std::slice::from_ref(&fresh),
        8000..=16000,
    );
    assert_eq!(
        actions,
        [Action::SetIngress {
            namespace: "jobs".into(),
            name: "ssh-job-1".into()
        }],
        "no announcement before the address is written"
    );
    // The next pass, with the status in the cache (the API server adds
    // ipMode itself).
    let written = with_ingress(&fresh, json!([{"ip": "198.18.0.10", "ipMode": "VIP"}]));
    let actions = run(&[p], &[written], 8000..=16000);
    assert_eq!(
        actions,
        [Action::Publish {
            pod: job_1(),
            service: "ssh-job-1".into(),
            port: 8123,
            announce: true,
        }]
    );
}

#[test]
fn a_stale_or_extra_ingress_address_is_rewritten_before_anything_is_announced() {
    let p = pod("job-1", json!({}));
    let svc = ours(&p, 8123, "2026-11-01T00:00:00Z", false);
    for wrong in [
        json!([{"ip": "198.18.0.99"}]),
        json!([{"ip": "198.18.0.10"}, {"ip": "198.18.0.99"}]),
        json!([{"hostname": "lb.example.org"}]),
        json!([{"ip": "198.18.0.10", "hostname": "lb.example.org"}]),
        json!([]),
    ] {
        let stale = with_ingress(&svc, wrong.clone());
        let actions = run(std::slice::from_ref(&p), &[stale], 8000..=16000);
        assert_eq!(
            actions,
            [Action::SetIngress {
                namespace: "jobs".into(),
                name: "ssh-job-1".into()
            }],
            "{wrong}"
        );
    }
}

#[test]
fn an_externalips_service_needs_no_ingress_before_the_endpoint_is_published() {
    let p = pod("job-1", json!({}));
    let style = Settings {
        style: ServiceStyle::Externalips,
        ..settings()
    };
    let svc = Arc::new(service::build(&p, 8123, IntOrString::Int(22), &style));
    let world = World::of(
        crate::controller::world::policy_for(style.ssh_ip),
        std::slice::from_ref(&p),
        &[svc],
        &[],
    );
    let pass = Pass {
        world: &world,
        scope: &Scope::All,
        expected: &Expectations::default(),
        variable: None,
    };
    let actions = compute(
        &pass,
        &style,
        &(8000..=16000),
        HOST,
        &mut StdRng::seed_from_u64(1),
    );
    assert!(
        matches!(actions.as_slice(), [Action::Publish { announce: true, .. }]),
        "{actions:?}"
    );
}

#[test]
fn a_published_pod_needs_nothing_more() {
    let p = pod(
        "job-1",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job-1"},
                            "annotations": {vocabulary::ENDPOINT: format!("{HOST}:8123")}}}),
    );
    let actions = run(
        std::slice::from_ref(&p),
        &[ours(&p, 8123, "2026-11-01T00:00:00Z", true)],
        8000..=16000,
    );
    assert_eq!(actions, []);
}

#[test]
fn a_lost_selector_label_is_restored_without_a_second_event() {
    let p = pod(
        "job-1",
        json!({"metadata": {"annotations": {vocabulary::ENDPOINT: format!("{HOST}:8123")}}}),
    );
    let actions = run(
        std::slice::from_ref(&p),
        &[ours(&p, 8123, "2026-11-01T00:00:00Z", true)],
        8000..=16000,
    );
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Publish {
                announce: false,
                ..
            }]
        ),
        "{actions:?}"
    );
}
