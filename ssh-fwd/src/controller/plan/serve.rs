//! A pod without a Service: the port it gets (its reservation, or a fresh
//! one reserved first), or the Warning that says why it cannot be served.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

use super::{
    Action, PodRef, Problem,
    reservations::{self, Book, Choice},
};
use crate::controller::{
    pod::PodView,
    service::{self, Settings},
    warn::Admission,
};

/// What serving a pod without a Service reads.
pub struct New<'a> {
    /// By `(namespace, name)`.
    pub names: &'a BTreeMap<(&'a str, &'a str), bool>,
    pub settings: &'a Settings,
    pub book: &'a Book,
    pub variable: Option<&'a str>,
}

/// What gets a pod without a Service one: a create on its reserved or a
/// free port, or a Warning saying why it cannot be served (and one saying
/// it lacks the endpoint variable, when it gets its port only now).
pub fn serve_new(
    pod: &PodView,
    pod_ref: PodRef,
    new: &New<'_>,
    free: &mut reservations::Free<'_, impl Rng>,
    handed: &mut BTreeSet<u16>,
) -> Vec<Action> {
    let warn = |pod, problem| vec![Action::Warn { pod, problem }];
    let target = match service::target_port(pod) {
        Ok(target) => target,
        Err(bad) => return warn(pod_ref, Problem::InvalidTargetPort { value: bad.0 }),
    };
    let name = service::service_name(&pod_ref.name);
    match new.names.get(&(pod_ref.namespace.as_str(), name.as_str())) {
        // Ours for an earlier pod of this name: being deleted.
        Some(true) => return Vec::new(),
        Some(false) => return warn(pod_ref, Problem::NameTaken { service: name }),
        None => {}
    }
    let ip = new.settings.ssh_ip;
    let (port, reserve, missing) =
        match reservations::choose(pod, &pod_ref, new.book, ip, free, handed) {
            Choice::Reserved(port) => (port, None, None),
            Choice::Fresh {
                port,
                lease,
                told,
                admitted,
            } => {
                let missing =
                    new.variable
                        .filter(|_| !admitted)
                        .map(|variable| Problem::EnvMissing {
                            variable: variable.to_owned(),
                            told,
                            admission: Admission::of(&pod.metadata),
                        });
                (port, Some(lease), missing)
            }
            Choice::Full => return warn(pod_ref, Problem::NoFreePort),
        };
    let mut actions = Vec::new();
    if let Some(problem) = missing {
        actions.push(Action::Warn {
            pod: pod_ref.clone(),
            problem,
        });
    }
    actions.push(Action::Create {
        service: Box::new(service::build(pod, port, target, new.settings)),
        pod: pod_ref,
        port,
        reserve,
    });
    actions
}
