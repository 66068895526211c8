//! The writes that make a port a Service's: the grant on its status, and
//! its spec put back where someone else changed it.

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::events::EventType,
};

use super::{Context, event};
use crate::{
    controller::{
        api_error::{self, Grant as Needs},
        pod::PodRef,
        service::grant,
    },
    k8s::{answer::Unread, grant::Grant},
    vocabulary::{action, reason},
};

/// Writes the grant of `port` to the pod's Service `name` on its status.
pub async fn set_grant(ctx: &Context, pod: &PodRef, name: &str, port: u16) -> anyhow::Result<()> {
    let api: Api<Unread<Service>> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let grant = Grant {
        port,
        pod_uid: pod.uid.as_str().into(),
    };
    let load_balancer = ctx.style == crate::args::ServiceStyle::Loadbalancer;
    let shown = format!("{}/{}", pod.namespace, pod.name);
    let status = grant::status(
        load_balancer,
        &ctx.ssh_ips,
        &grant,
        &shown,
        Timestamp::now(),
    );
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(drop)
        .map_err(|e| {
            let what = format!(
                "writing the grant of port {port} to Service {}/{name} (its status)",
                pod.namespace
            );
            api_error::context(e, what, Needs::Cluster)
        })?;
    tracing::debug!(service = %format!("{}/{name}", pod.namespace), port, "granted the port");
    Ok(())
}

/// Puts the pod's Service `name` back with `patch`, then tells the pod
/// which `fields` someone else had changed.
pub async fn restore(
    ctx: &Context,
    pod: &PodRef,
    name: &str,
    fields: &[&str],
    patch: &serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<Unread<Service>> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let service = format!("{}/{name}", pod.namespace);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        // Gone, or a namesake made since (the uid in the patch).
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => return Ok(()),
        Err(e) => {
            let what = format!("putting Service {service} back as ssh-fwd made it");
            return Err(api_error::context(e, what, Needs::Cluster));
        }
    }
    let changed = fields.join(", ");
    let note = format!(
        "Service {service} was changed by someone other than ssh-fwd ({changed}) and has been put back: the port on the SSH IP and the pod it reaches are given by ssh-fwd, and a change to the Service does not move them. To give the job other settings, change the pod's ssh-fwd.io annotations."
    );
    tracing::warn!(service, changed, "put back a Service someone else changed");
    event(
        ctx,
        pod,
        EventType::Warning,
        reason::SERVICE_RESTORED,
        action::RESTORE_SERVICE,
        note,
    )
    .await?;
    ctx.metrics
        .warnings
        .get_or_create(&crate::controller::metrics::ReasonLabel {
            reason: reason::SERVICE_RESTORED,
        })
        .inc();
    Ok(())
}
