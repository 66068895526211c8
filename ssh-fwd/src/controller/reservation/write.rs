//! The leader's reservation writes: reserving a port (created only if
//! absent) and releasing one (only if it is still the one read).

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{DeleteParams, Preconditions},
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
