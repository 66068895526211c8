//! The agents and the controller decide who owns a port with one rule
//! (`k8s::ownership::owner`): age alone, not readiness.

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
fn agents_and_controller_agree_that_a_not_ready_older_service_keeps_its_port() {
    let job = pod("job-1", json!({}));
    let mine = ours(&job, 9000, "2026-02-01T00:00:00Z", true);
    // Older, honoured by the agents, and its pod is restarting: no ready
    // endpoint (no slice at all, or one with nothing ready).
    let rival = foreign("rival", 9000, "2026-01-01T00:00:00Z");
    let slices: Vec<WireSlice> = [
        json!({"metadata": {"name": "ssh-job-1-x", "namespace": "jobs",
                            "labels": {"kubernetes.io/service-name": "ssh-job-1"}},
               "addressType": "IPv4", "ports": [{"name": "ssh", "port": 22}],
               "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}}]}),
        json!({"metadata": {"name": "rival-x", "namespace": "other",
                            "labels": {"kubernetes.io/service-name": "rival"}},
               "addressType": "IPv4", "ports": [{"port": 22}],
               "endpoints": [{"addresses": ["10.244.7.7"], "conditions": {"ready": false}}]}),
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
        agent.mappings.get(&frontend),
        None,
        "the agents keep the port closed for its not-ready owner"
    );
    assert!(agent.notes.contains(&desired::Note::Conflict {
        frontend,
        winner: "other/rival".into(),
        loser: "jobs/ssh-job-1".into()
    }));
    let actions = run(&[job], &[mine, rival], 8000..=16000);
    assert!(
        actions.iter().any(|a| matches!(a,
            Action::Delete { why: DeleteReason::LostPort { port: 9000, holder }, .. }
                if holder == "other/rival")),
        "the controller moves its Service off the owner's port: {actions:?}"
    );
}
