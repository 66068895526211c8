//! The Warning a pod gets when its port was taken from a quarantine that
//! gave way (every other port of the range taken): the reservation records
//! when the port's previous job ended ([`vocabulary::QUARANTINE_CUT`]),
//! and the pod is told once, when the reservation is made for it (by the
//! leader) or bound to it (made at admission, before the pod existed).

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::runtime::events::EventType;

use super::{Context, event};
use crate::{
    controller::{
        metrics::ReasonLabel,
        pod::PodRef,
        warn::{self, Scope},
    },
    vocabulary::{self, action, reason},
};

/// Tells `pod` that its port's quarantine gave way, if `lease` (its
/// reservation, just made or bound) says so. A failure is logged: the
/// port is the pod's either way.
pub async fn tell(ctx: &Context, pod: &PodRef, lease: &Lease) {
    let Some(since) = (lease.metadata.annotations.as_ref())
        .and_then(|a| a.get(vocabulary::QUARANTINE_CUT))
        .and_then(|t| t.parse::<Timestamp>().ok())
    else {
        return;
    };
    let port = super::lease_port(lease);
    let scope = Scope {
        ssh_ip: ctx.ssh_ips.published(),
        range: &ctx.range,
        namespace: &pod.namespace,
    };
    let note = warn::quarantine_cut(port, since, Timestamp::now(), &scope);
    tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), port, "{note}");
    let reason = reason::PORT_QUARANTINE_CUT;
    let told = event(ctx, pod, EventType::Warning, reason, action::ALLOCATE, note).await;
    match told {
        Ok(()) => {
            let counter = ctx.metrics.warnings.get_or_create(&ReasonLabel { reason });
            counter.inc();
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "telling the pod its port's quarantine gave way failed")
        }
    }
}
