//! Port races: two Services holding one port on the SSH IP. The oldest
//! keeps it (then by name; the agents decide the same way), and a younger
//! one of ours is deleted so its pod gets another port.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, DeleteReason, split};
use crate::{controller::service::Claim, k8s::ownership};

/// Deletes our Services that hold a port an older Service holds; returns
/// their `namespace/name`s.
pub fn retire_port_losers(claims: &[Claim], actions: &mut Vec<Action>) -> BTreeSet<String> {
    let losers = port_losers(claims);
    for (service, holder) in &losers {
        let (namespace, name) = split(&service.service);
        actions.push(Action::Delete {
            namespace,
            name,
            uid: service.uid.clone(),
            why: DeleteReason::LostPort {
                port: service.port,
                holder: holder.clone(),
            },
            unpublish: None,
        });
    }
    losers.into_iter().map(|(c, _)| c.service).collect()
}

/// Our Services that hold a port an older Service also holds, each with the
/// holder; the same order the agents use to pick a winner.
fn port_losers(claims: &[Claim]) -> Vec<(Claim, String)> {
    let mut by_port: BTreeMap<u16, Vec<&Claim>> = BTreeMap::new();
    for claim in claims {
        by_port.entry(claim.port).or_default().push(claim);
    }
    let mut losers = Vec::new();
    for (_, holders) in by_port {
        let Some(owner) = ownership::owner(holders.iter().copied()) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        for loser in holders
            .iter()
            .filter(|c| c.service != owner.service && c.managed)
        {
            if seen.insert(&loser.service) {
                losers.push(((*loser).clone(), owner.service.clone()));
            }
        }
    }
    losers
}
