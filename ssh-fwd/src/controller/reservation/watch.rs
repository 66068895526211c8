//! The watch of the port reservations, which every replica with the
//! webhook runs (which ports to try) and the leader too. It also notes
//! when this process first saw each one ([`FirstSeen`]), so that the grace
//! outlives terms.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    runtime::{reflector::Store, watcher},
};

use super::{FirstSeen, LeaseView};
use crate::{
    controller::{metrics::ControllerMetrics, world::dirty::DirtyLog},
    k8s::{self, reflector::Changes},
};

/// The port reservations on the SSH IP, in the controller's namespace;
/// each event is also noted in `first_seen`.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    ip: std::net::IpAddr,
    changes: &Arc<Changes>,
    dirty: &Arc<DirtyLog>,
    first_seen: &Arc<FirstSeen>,
    metrics: &ControllerMetrics,
) -> Store<LeaseView> {
    let dirty = dirty.clone();
    let first_seen = first_seen.clone();
    k8s::reflector::spawn_reflector(
        Api::<Lease>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&super::selector(ip)),
        LeaseView::from,
        "Lease",
        changes,
        &metrics.api_errors,
        move |event| {
            first_seen.note(event);
            dirty.lease(event);
        },
    )
}
