//! `ssh-fwd controller`: gives each pod that asks for SSH a port and a
//! Service, and tells the user how to connect.
//!
//! This file is one replica: every replica serves the admission webhook
//! ([`webhook`]) and stands for election (`lease`); the one elected leads
//! (`leader`) until its term ends, then stands again. The leader is
//! level-triggered: a pass computes the writes from the caches (`plan`, one
//! function of the `world`), for the part of the world the watches' changes
//! touched, and for all of it at start, on a relist, on the periodic resync
//! and after a failed write, so a missed event or a restart costs nothing
//! and a change costs work in proportion to what it touched. Port
//! reservations, which the webhook and the leader both make, are
//! `reservation`.

mod activity;
mod api_error;
mod apply;
pub mod args;
mod election;
mod expect;
mod host_certs;
mod leader;
mod metrics;
mod plan;
mod pod;
mod ports;
mod reservation;
mod retry;
mod served;
mod service;
mod ssh_ips;
mod warn;
pub mod webhook;
mod world;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use anyhow::Context as _;
use kube::Api;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    k8s::{self, reflector::Changes},
    source::kubernetes::desired::{Policy, Styles},
    telemetry, vocabulary,
};
use apply::Context;
pub use args::ControllerArgs;
use election::Elector;
use leader::Leadership;
use metrics::ControllerMetrics;
use plan::upkeep::Upkeep;
use world::dirty::DirtyLog;

pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let host = args::check(&args)?;
    let ssh_ips = args::ssh_ips(&args)?;
    let published = ssh_ips.published();
    args.admission.check()?;
    let identity = match &args.identity {
        Some(id) => id.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .context(
                "no --identity or POD_NAME, and the host name is unreadable; pass --identity",
            )?,
    };
    // Refused before anything is read or written.
    if args.admission.host_certs {
        args.host_ca.validity()?;
    }
    let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
    k8s::selector_check::check(&client, &args.selector).await?;
    if args.admission.host_certs && args.admission.webhook_addr.is_none() {
        tracing::warn!(
            "--host-certs without --webhook-addr: the CA is published, but no pod is given a host key Secret to issue into (the webhook names it); serve the webhook too"
        );
    }
    // The host CA before the webhook admits a pod that would need it.
    let (host_certs, _republish) = if args.admission.host_certs {
        let ips = ssh_ips.all().collect::<Vec<_>>();
        let namespace = &args.lease_namespace;
        let (certs, task) = host_certs::start(&args.host_ca, &client, namespace, &host, ips)
            .await
            .context("--host-certs")?;
        (Some(certs), Some(AbortOnDrop(task)))
    } else {
        (None, None)
    };
    let metrics = ControllerMetrics::new();
    metrics
        .port_range_size
        .set(i64::from(args.port_range.end() - args.port_range.start()) + 1);
    let term = Arc::new(election::Term::default());
    let namespace = args.lease_namespace.clone();
    let changes = Changes::new();
    let dirty = Arc::new(DirtyLog::default());
    // When this process first saw each reservation, kept from one term to
    // the next: a term that starts anew does not restart their grace.
    let first_seen = Arc::new(reservation::FirstSeen::new(
        args.admission.reservation_grace,
    ));
    let watch_reservations = || {
        reservation::watch::watch(
            &client,
            &namespace,
            published,
            &changes,
            &dirty,
            &first_seen,
            &metrics,
        )
    };
    // Every replica's webhook reads the reservations (which ports to try),
    // and so knows how long each has waited when it comes to lead; without
    // a webhook only the leader needs them.
    let early = args.admission.webhook_addr.map(|_| watch_reservations());
    let _webhook = match &early {
        Some(store) => {
            let shared = webhook::Shared {
                client: client.clone(),
                namespace: namespace.clone(),
                ssh_ip: published,
                host: host.clone(),
                range: args.port_range.clone(),
                reuse_after: args.port_reuse_after,
                store: store.clone(),
                metrics: metrics.admission.clone(),
            };
            Some(webhook::start(&args.admission, shared).await?)
        }
        None => None,
    };
    if args
        .service_styles
        .contains(&crate::args::ServiceStyle::Externalips)
    {
        tracing::warn!(
            "--honour-styles honours externalips: someone else's externalIPs Service holds the ports it lists that were granted to nobody, and those are handed out to no pod; granted ports stay with their pods"
        );
    }
    let ctx = Arc::new(Context {
        reservations: Api::namespaced(client.clone(), &namespace),
        reporter: kube::runtime::events::Reporter {
            controller: vocabulary::CONTROLLER.into(),
            instance: Some(identity.clone()),
        },
        client: client.clone(),
        style: args.service_style,
        policy: Policy {
            ssh_ips: ssh_ips.all().collect(),
            ports: args.port_range.clone(),
            styles: Styles::of(&args.service_styles),
            // The controller leaves nothing out: capacity is the agents'.
            capacity: usize::MAX,
            // The controller weighs claims, never guards.
            guard: Default::default(),
        },
        ssh_ips,
        host,
        user: args.ssh_user.clone(),
        range: args.port_range.clone(),
        metrics: metrics.clone(),
        term: term.clone(),
        host_certs,
    });
    if let Some(addr) = args.metrics_addr {
        telemetry::http::serve(addr, metrics.endpoints()).await?;
    }
    let elector = Arc::new(Elector {
        api: Api::namespaced(client.clone(), &args.lease_namespace),
        name: args.lease_name.clone(),
        me: identity,
        duration: args.lease_duration,
        observed: std::sync::Mutex::default(),
        term,
        renewal_errors: metrics.lease_renewal_errors.clone(),
    });
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    // Kept from one term to the next once made (a standby without a
    // webhook never needs them).
    let mut reservations = early;
    let mut upkeep = Upkeep::new(args.admission.reservation_grace, Some(first_seen.clone()))
        .quarantine_for(args.port_reuse_after);
    upkeep.count_lapses_in(metrics.reservations_lapsed.clone());
    loop {
        tokio::select! {
            acquired = elector.acquire() => acquired?,
            _ = terminate.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
        }
        metrics.leader.set(1);
        let leadership = Leadership {
            args: &args,
            ctx: ctx.clone(),
            client: client.clone(),
            changes: changes.clone(),
            dirty: dirty.clone(),
            reservations: reservations.get_or_insert_with(watch_reservations).clone(),
        };
        let mut holding = AbortOnDrop({
            let elector = elector.clone();
            tokio::spawn(async move { elector.hold().await })
        });
        // Losing the Lease ends `lead` (its writes and its watches) but not
        // the process: this replica's webhook goes on admitting, and it
        // stands for election again.
        let result = tokio::select! {
            result = leadership.lead(&mut upkeep) => result,
            lost = &mut holding.0 => {
                let why = lost.unwrap_or_else(|e| anyhow::anyhow!("the Lease task ended: {e}"));
                tracing::error!(
                    error = %format!("{why:#}"),
                    "stopped leading: another replica may lead now; admitting as before and standing for election again"
                );
                metrics.leader.set(0);
                continue;
            }
            _ = terminate.recv() => { tracing::info!("SIGTERM received"); Ok(()) }
            _ = interrupt.recv() => { tracing::info!("SIGINT received"); Ok(()) }
        };
        metrics.leader.set(0);
        if result.is_ok() {
            elector.release().await;
        }
        return result;
    }
}

/// Renewal must stop when leading stops, also when `run` is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
