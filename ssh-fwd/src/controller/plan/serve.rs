//! A pod without a Service: the port it gets (its reservation, or a fresh
//! one reserved first), or the Warning that says why it cannot be served.

use rand::Rng;

use super::{Action, Problem};
use crate::controller::{
    plan::upkeep::{self, Choice, Free},
    pod::{PodRef, PodView},
    service::{self, Settings},
    warn::Admission,
    world::World,
};

/// What serving a pod without a Service reads.
pub struct New<'a> {
    pub world: &'a World,
    pub settings: &'a Settings,
    pub variable: Option<&'a str>,
}

/// What gets a pod without a Service one: a create on its reserved or a
/// free port, or a Warning saying why it cannot be served (and one saying
/// it lacks the endpoint variable, when it gets its port only now).
pub fn serve_new(
    pod: &PodView,
    pod_ref: PodRef,
    new: &New<'_>,
    free: &mut Free<'_, impl Rng>,
) -> Vec<Action> {
    let warn = |pod, problem| vec![Action::Warn { pod, problem }];
    let target = match service::target_port(pod) {
        Ok(target) => target,
        Err(bad) => return warn(pod_ref, Problem::InvalidTargetPort { value: bad.0 }),
    };
    let name = service::service_name(&pod_ref.name);
    let key = format!("{}/{name}", pod_ref.namespace);
    match new
        .world
        .service(&key)
        .map(|s| service::served_pod(s).is_some())
    {
        // Ours for an earlier pod of this name: being deleted.
        Some(true) => return Vec::new(),
        Some(false) => return warn(pod_ref, Problem::NameTaken { service: name }),
        None => {}
    }
    let (port, reserve, reclaim, missing) = match upkeep::choose(pod, &pod_ref, new.world, free) {
        Choice::Reserved(port) => (port, None, None, None),
        Choice::Fresh {
            port,
            lease,
            told,
            admitted,
            reclaim,
        } => {
            let missing = new
                .variable
                .filter(|_| !admitted)
                .map(|variable| Problem::EnvMissing {
                    variable: variable.to_owned(),
                    told,
                    admission: Admission::of(&pod.metadata),
                });
            (port, Some(lease), reclaim, missing)
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
        reclaim,
    });
    actions
}
