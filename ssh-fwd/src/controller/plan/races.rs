//! Port races: two Services holding one port on the SSH IP. The oldest
//! keeps it (then by name; the agents decide the same way), and a younger
//! one of ours is deleted so its pod gets another port.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;

use super::{Action, DeleteReason, split};
use crate::{
    controller::{service::Claim, world::World},
    k8s::ownership,
};

/// Deletes our Services that hold one of `ports` that an older Service
/// holds.
pub fn retire_port_losers(
    world: &World,
    ports: impl Iterator<Item = u16>,
    actions: &mut Vec<Action>,
) {
    for port in ports {
        let claims = world.claims_on(port);
        for (loser, holder) in port_losers(claims) {
            let (namespace, name) = split(&loser.service);
            actions.push(Action::Delete {
                namespace,
                name,
                uid: loser.uid.clone(),
                why: DeleteReason::LostPort {
                    port: loser.port,
                    holder: holder.to_owned(),
                },
                unpublish: None,
            });
        }
    }
}

/// Of one port's claimants, ours that are not its owner, each with the
/// owner; the same order the agents use to pick a winner.
fn port_losers(claims: &[Claim]) -> Vec<(&Claim, &str)> {
    let Some(owner) = ownership::owner(claims) else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    claims
        .iter()
        .filter(|c| c.service != owner.service && c.managed)
        .filter(|c| seen.insert(&c.service))
        .map(|c| (c, owner.service.as_str()))
        .collect()
}

/// Whether `svc` (one of ours) lost one of its ports to an older Service.
pub fn lost(world: &World, svc: &Service) -> bool {
    let key = super::full_name(svc);
    crate::controller::service::claims(svc, world.policy())
        .iter()
        .any(|claim| {
            port_losers(world.claims_on(claim.port))
                .iter()
                .any(|(loser, _)| loser.service == key)
        })
}
