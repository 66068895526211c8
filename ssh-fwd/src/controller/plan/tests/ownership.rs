//! The agents and the controller decide who owns a port with one rule
//! (`k8s::ownership::owner`): a grant first, then age, never readiness.

use std::net::SocketAddr;

use super::*;
use crate::source::kubernetes::{
    desired::{self, Policy, Styles},
    objects::{WireService, WireSlice},
};

fn agent_view(svc: &Service) -> crate::source::kubernetes::objects::ServiceView {
    let wire: WireService = serde_json::from_value(serde_json::to_value(svc).unwrap()).unwrap();
    wire.view()
}

#[test]
fn agents_and_controller_agree_that_a_granted_port_beats_an_older_service_without_a_grant() {
    let job = pod("job-1", json!({}));
    let mine = ours(&job, 9000, "2026-02-01T00:00:00Z", true);
    // Older, of a shape the agents honour, listing the same port: someone
    // else's Service, which no grant names.
    let rival = foreign("rival", 9000, "2026-01-01T00:00:00Z");
    let slices: Vec<WireSlice> = [
        json!({"metadata": {"name": "ssh-job-1-x", "namespace": "jobs",
                            "labels": {"kubernetes.io/service-name": "ssh-job-1"}},
               "addressType": "IPv4", "ports": [{"name": "ssh", "port": 22}],
               "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true},
                              "targetRef": {"kind": "Pod", "name": "job-1", "uid": "uid-job-1"}}]}),
        json!({"metadata": {"name": "rival-x", "namespace": "other",
                            "labels": {"kubernetes.io/service-name": "rival"}},
               "addressType": "IPv4", "ports": [{"port": 22}],
               "endpoints": [{"addresses": ["10.244.7.7"], "conditions": {"ready": true}}]}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let policy = Policy {
        guard: Default::default(),
        ssh_ips: [settings().ssh_ips.published()].into(),
        ports: 8000..=16000,
        styles: Styles::ALL,
        capacity: ssh_fwd_common::maps::MAX_MAPPINGS as usize,
    };
    let views = [agent_view(&mine), agent_view(&rival)];
    let slice_views: Vec<_> = slices.iter().map(WireSlice::view).collect();
    let agent = desired::compute(&views, &slice_views, &policy);
    let frontend: SocketAddr = "198.18.0.10:9000".parse().unwrap();
    assert_eq!(
        agent.mappings.get(&frontend).map(|m| m.backend.to_string()),
        Some("10.244.0.5:22".into()),
        "the agents map the granted port to the pod it was granted to"
    );
    assert!(agent.notes.contains(&desired::Note::Conflict {
        frontend,
        winner: "jobs/ssh-job-1".into(),
        loser: "other/rival".into()
    }));
    let actions = run(&[job], &[mine, rival], 8000..=16000);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Delete { .. })),
        "the controller leaves its Service on its port: {actions:?}"
    );
}
