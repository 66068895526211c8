use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::*;
use crate::k8s::served::{RECEIVES, RENEWED, data_key, rfc3339};

const WAIT: Duration = Duration::from_secs(30);

fn t(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
}

/// The two families' SSH IPs and a pod address of each.
fn ips(v6: bool) -> (IpAddr, IpAddr, IpAddr) {
    if v6 {
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 5).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 6).into(),
        )
    } else {
        (
            Ipv4Addr::new(203, 0, 113, 10).into(),
            Ipv4Addr::new(10, 0, 1, 5).into(),
            Ipv4Addr::new(10, 0, 1, 6).into(),
        )
    }
}

fn report(
    renewed: SystemTime,
    receives: &[IpAddr],
    frontends: &[(IpAddr, u16, IpAddr)],
) -> ConfigMap {
    let mut data: BTreeMap<String, String> = frontends
        .iter()
        .map(|(ip, port, backend)| {
            (
                data_key(*ip, *port),
                std::net::SocketAddr::new(*backend, 22).to_string(),
            )
        })
        .collect();
    let receives: Vec<String> = receives.iter().map(ToString::to_string).collect();
    data.insert(RECEIVES.into(), receives.join(","));
    data.insert(RENEWED.into(), rfc3339(renewed));
    ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    }
}

fn pod(ip: IpAddr, ready_at: Option<SystemTime>) -> PodView {
    let conditions = match ready_at {
        Some(at) => json!([{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(at)}]),
        None => json!([{"type": "Ready", "status": "False"}]),
    };
    serde_json::from_value(json!({
        "metadata": {"name": "job-0", "namespace": "jobs", "uid": "u-0"},
        "status": {"phase": "Running", "podIPs": [{"ip": ip.to_string()}], "conditions": conditions}
    }))
    .unwrap()
}

fn gate(served: &Served, now: SystemTime) -> Gate<'_> {
    Gate {
        when: PublishWhen::Served,
        wait: WAIT,
        served,
        now,
    }
}

#[test]
fn under_l2_only_the_node_answering_for_the_ssh_ip_must_serve() {
    for v6 in [false, true] {
        let (ssh_ip, pod_ip, _) = ips(v6);
        let mut served = Served::default();
        served.set(
            "ssh-fwd-served-a",
            Some(&report(t(0), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
        );
        // The standby has not installed it yet: it receives nothing.
        served.set("ssh-fwd-served-b", Some(&report(t(0), &[], &[])));
        let p = pod(pod_ip, Some(t(0)));
        assert_eq!(
            gate(&served, t(1)).verdict(&p, ssh_ip, 20123),
            Verdict::Open,
            "v6 {v6}"
        );
    }
}

#[test]
fn where_every_node_receives_each_must_serve_and_the_late_ones_are_named() {
    for v6 in [false, true] {
        let (ssh_ip, pod_ip, _) = ips(v6);
        let mut served = Served::default();
        served.set(
            "ssh-fwd-served-a",
            Some(&report(t(0), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
        );
        served.set("ssh-fwd-served-b", Some(&report(t(0), &[ssh_ip], &[])));
        let p = pod(pod_ip, Some(t(0)));
        assert_eq!(
            gate(&served, t(1)).verdict(&p, ssh_ip, 20123),
            Verdict::Wait(Wait::Missing(vec!["b".into()])),
            "v6 {v6}"
        );
        served.set(
            "ssh-fwd-served-b",
            Some(&report(t(2), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
        );
        assert_eq!(
            gate(&served, t(3)).verdict(&p, ssh_ip, 20123),
            Verdict::Open
        );
    }
}

#[test]
fn a_mapping_to_another_pods_address_is_not_this_pods() {
    for v6 in [false, true] {
        let (ssh_ip, pod_ip, previous) = ips(v6);
        let mut served = Served::default();
        // The port's previous job, still installed.
        served.set(
            "ssh-fwd-served-a",
            Some(&report(t(0), &[ssh_ip], &[(ssh_ip, 20123, previous)])),
        );
        let p = pod(pod_ip, Some(t(0)));
        assert_eq!(
            gate(&served, t(1)).verdict(&p, ssh_ip, 20123),
            Verdict::Wait(Wait::Missing(vec!["a".into()]))
        );
    }
}

#[test]
fn a_dead_agents_report_and_one_from_the_future_are_not_believed() {
    let (ssh_ip, pod_ip, _) = ips(false);
    let mut served = Served::default();
    // Renewed too long ago: that agent is gone; its node does not block.
    served.set("ssh-fwd-served-dead", Some(&report(t(0), &[ssh_ip], &[])));
    served.set(
        "ssh-fwd-served-a",
        Some(&report(t(100), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
    );
    let p = pod(pod_ip, Some(t(100)));
    assert_eq!(
        gate(&served, t(101)).verdict(&p, ssh_ip, 20123),
        Verdict::Open
    );
    // A report renewed far ahead of the clock serves nothing.
    let mut served = Served::default();
    served.set(
        "ssh-fwd-served-a",
        Some(&report(t(1000), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
    );
    assert_eq!(
        gate(&served, t(101)).verdict(&p, ssh_ip, 20123),
        Verdict::Wait(Wait::NoReceiver)
    );
}

#[test]
fn a_pod_that_is_not_ready_waits_whatever_the_agents_say() {
    let (ssh_ip, pod_ip, _) = ips(false);
    let mut served = Served::default();
    served.set(
        "ssh-fwd-served-a",
        Some(&report(t(0), &[ssh_ip], &[(ssh_ip, 20123, pod_ip)])),
    );
    let p = pod(pod_ip, None);
    for when in [PublishWhen::Ready, PublishWhen::Served] {
        let g = Gate {
            when,
            ..gate(&served, t(1))
        };
        assert_eq!(g.verdict(&p, ssh_ip, 20123), Verdict::Wait(Wait::NotReady));
    }
    let granted = Gate {
        when: PublishWhen::Granted,
        ..gate(&served, t(1))
    };
    assert_eq!(granted.verdict(&p, ssh_ip, 20123), Verdict::Open);
    let ready = Gate {
        when: PublishWhen::Ready,
        ..gate(&NONE, t(1))
    };
    assert_eq!(
        ready.verdict(&pod(pod_ip, Some(t(0))), ssh_ip, 20123),
        Verdict::Open
    );
}

#[test]
fn past_the_wait_a_ready_pod_is_published_with_the_reason() {
    let (ssh_ip, pod_ip, _) = ips(false);
    let p = pod(pod_ip, Some(t(0)));
    assert_eq!(
        gate(&NONE, t(29)).verdict(&p, ssh_ip, 20123),
        Verdict::Wait(Wait::NoReceiver)
    );
    assert_eq!(
        gate(&NONE, t(30)).verdict(&p, ssh_ip, 20123),
        Verdict::Late(Wait::NoReceiver)
    );
    let text = Wait::Missing(vec!["a".into(), "b".into()]).text(ssh_ip, 20123);
    assert!(
        text.contains("node(s) a, b") && text.contains("port 20123"),
        "{text}"
    );
}

#[test]
fn a_report_removed_stops_counting() {
    let (ssh_ip, pod_ip, _) = ips(false);
    let mut served = Served::default();
    served.set("ssh-fwd-served-a", Some(&report(t(0), &[ssh_ip], &[])));
    let p = pod(pod_ip, Some(t(0)));
    assert_eq!(
        gate(&served, t(1)).verdict(&p, ssh_ip, 20123),
        Verdict::Wait(Wait::Missing(vec!["a".into()]))
    );
    served.set("ssh-fwd-served-a", None);
    assert_eq!(
        gate(&served, t(1)).verdict(&p, ssh_ip, 20123),
        Verdict::Wait(Wait::NoReceiver)
    );
}
