//! Which pod a reservation is for: the one rule the leader's plan and
//! upkeep both read.
//!
//! A reservation made at admission is **provisional**: the webhook never
//! sees the pod's uid, nor, with `generateName`, its name (both are set
//! after mutating admission), so it is made for a random token the pod
//! carries in the annotation [`vocabulary::RESERVATION`]. That annotation
//! is readable, and writable on a new pod, by every tenant of the pod's
//! namespace: a token proves nothing once its pod exists. So of the pods
//! of that namespace carrying one token, the **oldest** (creationTimestamp,
//! then name) is the one it was made for (a copy can only be made from a
//! pod that exists, so it is younger, or of the same second); and the
//! leader then **binds** the reservation to that pod's uid, after which
//! the token counts for nothing: only that pod uses the reservation, holds
//! it, or gets its port.
//!
//! A reservation made by the leader for a pod is bound from the start; one
//! made for a Service's port is the Service's; a quarantined one is for
//! nobody.
//!
//! Trust boundary: the token, the endpoint annotation and a pod's name are
//! the pod creator's to write; the uid and creationTimestamp are the API
//! server's.

use std::net::IpAddr;

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};

use super::{Holder, Reservation};
use crate::{
    controller::{
        pod::{PodView, asks_for_ssh},
        world::World,
    },
    vocabulary,
};

/// Where a reservation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage<'a> {
    /// Made at admission; not yet bound to the pod carrying `token`.
    Provisional { token: &'a str },
    /// For the pod with this uid, and no other.
    Bound { uid: &'a str },
    /// For a Service's port.
    Service,
    /// For nobody: its job ended at `since` ([`Holder::Quarantined`]).
    Quarantined { since: Timestamp },
}

impl Reservation {
    pub fn stage(&self) -> Stage<'_> {
        if let Some(since) = self.released_at {
            return Stage::Quarantined { since };
        }
        match (&self.pod_uid, &self.token) {
            (Some(uid), _) => Stage::Bound { uid },
            (None, Some(token)) => Stage::Provisional { token },
            (None, None) => Stage::Service,
        }
    }
}

/// Of the pods carrying one token, the one it was made for: the oldest by
/// creationTimestamp (one without comes last), then by name.
pub fn first_carrier<'a>(carriers: impl IntoIterator<Item = &'a PodView>) -> Option<&'a PodView> {
    carriers.into_iter().min_by_key(|pod| {
        let created = pod.metadata.creation_timestamp.as_ref();
        (created.is_none(), created, pod.metadata.name.as_deref())
    })
}

/// The pod `r` is for, if it exists and asks for SSH: the one with its
/// uid (bound), or its token's first carrier (provisional), in the
/// reservation's namespace. A copy of the token on a younger pod never
/// stands in for a first carrier that finished or is being deleted.
pub fn pod_of<'w>(world: &'w World, r: &Reservation) -> Option<&'w PodView> {
    let namespace = r.namespace.as_deref();
    let pod = match r.stage() {
        Stage::Bound { uid } => world
            .pod(uid)
            .filter(|p| p.metadata.namespace.as_deref() == namespace)?,
        Stage::Provisional { token } => first_carrier(world.pods_with_token(namespace, token))?,
        Stage::Service | Stage::Quarantined { .. } => return None,
    };
    asks_for_ssh(pod).then_some(pod)
}

/// The reservation made for `pod` (by its token or its uid), of those
/// [`pod_of`] says are its; the first by name when there are several.
pub fn reservation_of<'w>(world: &'w World, pod: &PodView) -> Option<&'w Reservation> {
    let uid = pod.metadata.uid.as_deref()?;
    world
        .book()
        .all_of_pod(pod)
        .filter(|r| pod_of(world, r).and_then(|p| p.metadata.uid.as_deref()) == Some(uid))
        .min_by(|a, b| a.name.cmp(&b.name))
}

/// The provisional reservation `r` bound to `pod`, as the Lease to update
/// it with: the same name, port and token, the pod's uid, and `r`'s uid
/// and resourceVersion, so that the update fails (409) on a reservation
/// changed or made anew since it was read; a quarantine cut short for it
/// stays recorded. `None` for one that is not provisional.
pub fn bound(ip: IpAddr, r: &Reservation, pod: &PodView) -> Option<Lease> {
    let Stage::Provisional { token } = r.stage() else {
        return None;
    };
    let holder = Holder::Pod {
        namespace: r.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone()?,
        token: Some(token.to_owned()),
    };
    let mut lease = super::build(ip, r.port, &holder);
    if let Some(since) = r.quarantine_cut {
        (lease.metadata.annotations.get_or_insert_default())
            .insert(vocabulary::QUARANTINE_CUT.into(), since.to_string());
    }
    lease.metadata.uid = r.uid.clone();
    lease.metadata.resource_version = r.resource_version.clone();
    Some(lease)
}

#[cfg(test)]
mod tests;
