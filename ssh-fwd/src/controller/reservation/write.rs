//! The leader's reservation writes: reserving a port (created only if
//! absent, or after deleting its quarantined reservation), binding one
//! made at admission to its pod, quarantining one whose job ended, and
//! releasing one (each only if it is still the one read).

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{DeleteParams, PostParams, Preconditions},
};

use crate::{
    controller::api_error::{self, Grant},
    vocabulary,
};

/// Whether this call reserved the port (false: it was reserved already).
pub async fn reserve_port(api: &Api<Lease>, lease: &Lease, port: u16) -> anyhow::Result<bool> {
    super::create(api, lease)
        .await
        .map_err(|e| api_error::context(e, format!("reserving port {port}"), Grant::Lease))
}

pub fn lease_port(lease: &Lease) -> u16 {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(vocabulary::PORT))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// Updates a reservation to `lease` (bound to its pod,
/// [`super::binding::bound`]) if it is still the one read: `lease`
/// carries the uid and resourceVersion read. Whether it was bound.
pub async fn bind(api: &Api<Lease>, lease: &Lease) -> anyhow::Result<bool> {
    update(
        api,
        lease,
        "bound the reservation made at admission to its pod",
    )
    .await
}

/// Updates a reservation whose job ended to `lease`, quarantined
/// ([`super::Holder::Quarantined`]), if it is still the one read.
pub async fn quarantine(api: &Api<Lease>, lease: &Lease) -> anyhow::Result<bool> {
    update(api, lease, "quarantined the port of a job that ended").await
}

/// Replaces a reservation with `lease` if it is still the one read;
/// `false` when it was released or changed since (the next pass reads it
/// again).
async fn update(api: &Api<Lease>, lease: &Lease, done: &str) -> anyhow::Result<bool> {
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    let port = lease_port(lease);
    match api.replace(name, &PostParams::default(), lease).await {
        Ok(_) => {
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            tracing::info!(port, reservation = name, holder, "{done}");
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(false),
        Err(e) => Err(api_error::context(
            e,
            format!("updating the reservation {name} of port {port}"),
            Grant::Lease,
        )),
    }
}

/// Deletes the quarantined reservation `r` to take its port
/// ([`super::reclaim`]): whether it is gone.
pub async fn reclaim(api: &Api<Lease>, r: &super::Reservation) -> anyhow::Result<bool> {
    super::reclaim(api, r).await.map_err(|e| {
        let what = format!("taking port {} from its quarantine", r.port);
        api_error::context(e, what, Grant::Lease)
    })
}

/// Deletes a reservation if it is still the one read (uid and version).
pub async fn release(
    api: &Api<Lease>,
    name: &str,
    port: u16,
    uid: Option<String>,
    resource_version: Option<String>,
) -> anyhow::Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(
                port,
                reservation = name,
                "released the reservation of a port no pod or Service uses"
            );
            Ok(())
        }
        // Gone already, or changed since it was read.
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
        Err(e) => Err(api_error::context(
            e,
            format!("releasing the reservation {name}"),
            Grant::Lease,
        )),
    }
}
