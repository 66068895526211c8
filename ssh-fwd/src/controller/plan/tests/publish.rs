//! Telling a pod its endpoint: only once the cache shows the grant of its
//! port on its Service: the condition, and for a LoadBalancer exactly one
//! ingress entry per SSH IP listing the port.

use super::*;
use crate::vocabulary;

fn job_1() -> PodRef {
    PodRef {
        namespace: "jobs".into(),
        name: "job-1".into(),
        uid: "uid-job-1".into(),
    }
}

/// `svc` with the grant of port 8123 to job-1 in its status, and
/// `ingress` as its load-balancer ingress.
fn with_ingress(svc: &Service, ingress: Value) -> Arc<Service> {
    let grant = Grant {
        port: 8123,
        pod_uid: "uid-job-1".into(),
    };
    let now = "2026-01-01T00:00:00Z".parse().unwrap();
    let mut value = serde_json::to_value(svc).unwrap();
    value["status"] = service::grant::status(false, &settings().ssh_ips, &grant, "jobs/job-1", now)
        ["status"]
        .clone();
    value["status"]["loadBalancer"] = json!({"ingress": ingress});
    Arc::new(serde_json::from_value(value).unwrap())
}

fn set_grant() -> Action {
    Action::SetGrant {
        pod: job_1(),
        name: "ssh-job-1".into(),
        port: 8123,
    }
}

/// An ingress entry of `ip` listing port 8123.
fn listing(ip: &str) -> Value {
    json!({"ip": ip, "ports": [{"port": 8123, "protocol": "TCP"}]})
}

#[test]
fn a_load_balancer_endpoint_is_announced_only_once_its_grant_is_seen() {
    let p = pod("job-1", json!({}));
    let fresh = ours(&p, 8123, "2026-11-01T00:00:00Z", false);
    let actions = run(
        std::slice::from_ref(&p),
        std::slice::from_ref(&fresh),
        8000..=16000,
    );
    assert_eq!(
        actions,
        [set_grant()],
        "no announcement before the grant is written"
    );
    // The next pass, with the status in the cache (the API server adds
    // ipMode itself).
    let mut entry = listing("198.18.0.10");
    entry["ipMode"] = json!("VIP");
    let written = with_ingress(&fresh, json!([entry]));
    let actions = run(&[p], &[written], 8000..=16000);
    assert_eq!(
        actions,
        [Action::Publish {
            pod: job_1(),
            service: "ssh-job-1".into(),
            port: 8123,
            announce: true,
            unconfirmed: None,
        }]
    );
}

#[test]
fn a_stale_or_extra_ingress_address_is_rewritten_before_anything_is_announced() {
    let p = pod("job-1", json!({}));
    let svc = ours(&p, 8123, "2026-11-01T00:00:00Z", false);
    for wrong in [
        json!([listing("198.18.0.99")]),
        json!([listing("198.18.0.10"), listing("198.18.0.99")]),
        json!([{"hostname": "lb.example.org"}]),
        json!([{"ip": "198.18.0.10", "hostname": "lb.example.org",
                "ports": [{"port": 8123, "protocol": "TCP"}]}]),
        json!([{"ip": "198.18.0.10"}]),
        json!([{"ip": "198.18.0.10", "ports": [{"port": 8124, "protocol": "TCP"}]}]),
        json!([]),
    ] {
        let stale = with_ingress(&svc, wrong.clone());
        let actions = run(std::slice::from_ref(&p), &[stale], 8000..=16000);
        assert_eq!(actions, [set_grant()], "{wrong}");
    }
}

#[test]
fn an_externalips_service_needs_its_grant_condition_and_no_ingress() {
    let p = pod("job-1", json!({}));
    let style = Settings {
        style: ServiceStyle::Externalips,
        ..settings()
    };
    let made = Arc::new(service::build(&p, 8123, IntOrString::Int(22), &style));
    let plan = |svc: &Arc<Service>| {
        let services = std::slice::from_ref(svc);
        let world = World::of(
            crate::controller::world::policy_for(style.ssh_ips.published()),
            style.ssh_ips.published(),
            std::slice::from_ref(&p),
            services,
            &reservations_of(services),
        );
        let pass = Pass {
            quarantine: crate::controller::ports::Quarantine::off(),
            world: &world,
            scope: &Scope::All,
            expected: &Expectations::default(),
            variable: None,
            gate: crate::controller::served::Gate::granted(),
        };
        let mut rng = StdRng::seed_from_u64(1);
        compute(&pass, &style, &(8000..=16000), HOST, &mut rng)
    };
    assert_eq!(plan(&made), [set_grant()]);
    let mut granted = serde_json::to_value(&*with_ingress(&made, json!([]))).unwrap();
    granted["status"]["loadBalancer"] = Value::Null;
    let granted = Arc::new(serde_json::from_value(granted).unwrap());
    let actions = plan(&granted);
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

/// The plan for `pods` and `services` of a controller on `ips` (the first
/// published), showing `host`.
fn run_on(
    ips: &[&str],
    host: &str,
    pods: &[Arc<PodView>],
    services: &[Arc<Service>],
) -> Vec<Action> {
    use crate::controller::ssh_ips::SshIps;
    let ips: Vec<std::net::IpAddr> = ips.iter().map(|ip| ip.parse().unwrap()).collect();
    let ssh_ips = SshIps::new(&ips).unwrap();
    let settings = Settings {
        ssh_ips: ssh_ips.clone(),
        ..settings()
    };
    let mut policy = crate::controller::world::policy_for(ssh_ips.published());
    policy.ssh_ips = ssh_ips.all().collect();
    let world = World::of(
        policy,
        ssh_ips.published(),
        pods,
        services,
        &reservations_on(ssh_ips.published(), services),
    );
    let pass = Pass {
        quarantine: crate::controller::ports::Quarantine::off(),
        world: &world,
        scope: &Scope::All,
        expected: &Expectations::default(),
        variable: None,
        gate: crate::controller::served::Gate::granted(),
    };
    compute(
        &pass,
        &settings,
        &(8000..=16000),
        host,
        &mut StdRng::seed_from_u64(1),
    )
}

#[test]
fn a_dual_stack_load_balancer_is_announced_only_once_both_addresses_are_in_its_status() {
    let ips = ["2001:db8::10", "198.18.0.10"];
    let p = pod("job-1", json!({}));
    let svc = ours(&p, 8123, "2026-11-01T00:00:00Z", false);
    for partial in [
        json!([listing("198.18.0.10")]),
        json!([listing("2001:db8::10")]),
        json!([listing("2001:db8::10"), listing("2001:db8::10")]),
    ] {
        let actions = run_on(
            &ips,
            HOST,
            std::slice::from_ref(&p),
            &[with_ingress(&svc, partial.clone())],
        );
        assert!(
            matches!(actions.as_slice(), [Action::SetGrant { .. }]),
            "{partial}: {actions:?}"
        );
    }
    // Either order, and any text of the address, will do.
    let both = json!([listing("198.18.0.10"), listing("2001:0db8::0010")]);
    let actions = run_on(
        &ips,
        HOST,
        std::slice::from_ref(&p),
        &[with_ingress(&svc, both)],
    );
    assert!(
        matches!(actions.as_slice(), [Action::Publish { announce: true, .. }]),
        "{actions:?}"
    );
}

#[test]
fn an_ipv6_endpoint_is_published_in_brackets() {
    let host = "2001:db8::10";
    let p = pod(
        "job-1",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job-1"},
                            "annotations": {vocabulary::ENDPOINT: "[2001:db8::10]:8123"}}}),
    );
    let svc = with_ingress(
        &ours(&p, 8123, "2026-11-01T00:00:00Z", true),
        json!([listing(host)]),
    );
    let actions = run_on(
        &[host],
        host,
        std::slice::from_ref(&p),
        std::slice::from_ref(&svc),
    );
    assert_eq!(actions, [], "the bracketed endpoint is the one published");
    let unbracketed = pod(
        "job-1",
        json!({"metadata": {"labels": {vocabulary::SERVICE: "ssh-job-1"},
                            "annotations": {vocabulary::ENDPOINT: "2001:db8::10:8123"}}}),
    );
    let actions = run_on(&[host], host, &[unbracketed], &[svc]);
    assert!(
        matches!(actions.as_slice(), [Action::Publish { .. }]),
        "{actions:?}"
    );
}
