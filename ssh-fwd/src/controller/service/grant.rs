//! The grant on one of our Services' status, as the controller writes it
//! and checks it ([`crate::k8s::grant`] is the format both the agents and
//! the controller read).

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use serde_json::{Value, json};

use super::is_load_balancer;
use crate::{
    controller::ssh_ips::SshIps,
    k8s::grant::{self, Grant},
    vocabulary,
};

/// The merge patch of the `status` subresource that grants `grant` to a
/// Service for `pod` (`namespace/name`): the condition, and on a
/// LoadBalancer one ingress entry per SSH IP listing the port. Conditions
/// are replaced whole: a Service of ours carries no one else's.
pub fn status(
    load_balancer: bool,
    ips: &SshIps,
    grant: &Grant,
    pod: &str,
    now: Timestamp,
) -> Value {
    let condition = json!({
        "type": vocabulary::GRANTED,
        "status": "True",
        "reason": grant::REASON,
        "message": grant.message(pod),
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    let mut status = json!({"conditions": [condition]});
    if load_balancer {
        let ingress: Vec<Value> = (ips.all())
            .map(|ip| json!({"ip": ip.to_string(), "ports": [{"port": grant.port, "protocol": "TCP"}]}))
            .collect();
        status["loadBalancer"] = json!({"ingress": ingress});
    }
    json!({"status": status})
}

/// Whether `svc`'s status holds exactly `grant`: its condition, and on a
/// LoadBalancer one ingress entry for each SSH IP (in any order, any text
/// that parses to it) listing the port and nothing else. A stale, missing
/// or extra entry is written again; fields the API server fills in itself
/// (`ipMode`) do not count.
pub fn holds(svc: &Service, ips: &SshIps, grant: &Grant) -> bool {
    let status = svc.status.as_ref();
    let conditions = (status.and_then(|s| s.conditions.as_ref()))
        .into_iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.message.as_str()));
    if Grant::of(conditions).as_ref() != Some(grant) {
        return false;
    }
    if !is_load_balancer(svc) {
        return true;
    }
    let ingress = (status.and_then(|s| s.load_balancer.as_ref()))
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    let read: BTreeSet<Option<IpAddr>> = (ingress.iter())
        .map(|i| {
            let plain = i.hostname.as_deref().unwrap_or("").is_empty();
            let ports: Vec<(i32, &str)> = (i.ports.iter().flatten())
                .map(|p| (p.port, p.protocol.as_str()))
                .collect();
            let listed = ports == [(i32::from(grant.port), "TCP")];
            (i.ip.as_deref())
                .and_then(|ip| ip.parse().ok())
                .filter(|_| plain && listed)
        })
        .collect();
    let ours: BTreeSet<Option<IpAddr>> = ips.all().map(Some).collect();
    ingress.len() == ours.len() && read == ours
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            port: 8123,
            pod_uid: "u-1".into(),
        }
    }

    fn service(type_: &str, status: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "ssh-job-1", "namespace": "jobs"},
            "spec": {"type": type_},
            "status": status["status"],
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-12-07T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_written_grant_is_held_and_reads_back_as_the_agents_read_it() {
        let ips = SshIps::single("198.18.0.10".parse().unwrap());
        let patch = status(true, &ips, &grant(), "jobs/job-1", now());
        assert_eq!(
            patch["status"]["loadBalancer"],
            json!({"ingress": [{"ip": "198.18.0.10", "ports": [{"port": 8123, "protocol": "TCP"}]}]})
        );
        assert_eq!(
            patch["status"]["conditions"][0]["type"],
            vocabulary::GRANTED
        );
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            "2026-12-07T10:00:00Z"
        );
        let svc = service("LoadBalancer", patch.clone());
        assert!(holds(&svc, &ips, &grant()));
        let view = crate::source::kubernetes::objects::ServiceView::of(&svc);
        assert_eq!(view.grant, Some(grant()));
        let other = Grant {
            port: 8124,
            ..grant()
        };
        assert!(!holds(&svc, &ips, &other));
        let other_pod = Grant {
            pod_uid: "u-2".into(),
            ..grant()
        };
        assert!(!holds(&svc, &ips, &other_pod));
    }

    #[test]
    fn an_external_ips_service_is_granted_by_its_condition_alone() {
        let ips = SshIps::single("198.18.0.10".parse().unwrap());
        let patch = status(false, &ips, &grant(), "jobs/job-1", now());
        assert!(patch["status"]["loadBalancer"].is_null());
        assert!(holds(&service("ClusterIP", patch), &ips, &grant()));
    }

    #[test]
    fn an_ingress_entry_that_lists_another_port_or_more_is_written_again() {
        let ips = SshIps::single("198.18.0.10".parse().unwrap());
        let mut patch = status(true, &ips, &grant(), "jobs/job-1", now());
        for ports in [
            json!([{"port": 8124, "protocol": "TCP"}]),
            json!([{"port": 8123, "protocol": "TCP"}, {"port": 8124, "protocol": "TCP"}]),
            json!([{"port": 8123, "protocol": "UDP"}]),
            json!([]),
        ] {
            patch["status"]["loadBalancer"]["ingress"][0]["ports"] = ports.clone();
            assert!(
                !holds(&service("LoadBalancer", patch.clone()), &ips, &grant()),
                "{ports}"
            );
        }
    }
}
