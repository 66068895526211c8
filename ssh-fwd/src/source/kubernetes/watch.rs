//! Watches Services and EndpointSlices into local caches with kube-rs
//! reflectors. Events only say "something changed"; the reconciler always
//! recomputes from the full caches (level-triggered), so a lost event costs
//! nothing and a relist after 410 Gone replaces a cache whole.
//!
//! Both watches carry the `--selector` label selector, so the API server
//! sends only ssh-fwd's Services, and their EndpointSlices, which carry
//! their Service's labels (the EndpointSlice controller copies them; this
//! is how kube-proxy filters on `service.kubernetes.io/service-proxy-name`).

use std::sync::Arc;

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client,
    api::ListParams,
    runtime::{reflector::Store, watcher},
};
use prometheus_client::metrics::counter::Counter;

use super::desired::{self, Desired, Policy};
use crate::k8s::reflector::{Changes, drop_managed_fields, spawn_reflector};

/// Why the agent cannot start watching.
#[derive(Debug, thiserror::Error)]
#[error(
    "--selector `{selector}` was refused by the API server ({message}); write it as kubectl -l \
     takes it, e.g. service.kubernetes.io/service-proxy-name=ssh-fwd or \
     'app in (a,b),!skip'"
)]
pub struct BadSelector {
    selector: String,
    message: String,
}

/// Asks the API server to parse `selector` (one list of at most one
/// Service), so a typo fails at start-up instead of in every watch retry.
/// Anything but a 400 Bad Request (the API is down, RBAC) is left to the
/// watchers, which retry: the maps must keep forwarding meanwhile.
pub async fn check_selector(client: &Client, selector: &str) -> Result<(), BadSelector> {
    let services: Api<Service> = Api::all(client.clone());
    match services
        .list_metadata(&ListParams::default().labels(selector).limit(1))
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 400 => Err(BadSelector {
            selector: selector.to_owned(),
            message: status.message.clone(),
        }),
        _ => Ok(()),
    }
}

/// The caches and what the watchers report about themselves.
#[derive(Clone)]
pub struct KubeSource {
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    /// Woken after every cache change.
    pub changes: Arc<Changes>,
}

impl KubeSource {
    /// Starts both watchers on the runtime; they run until the process ends,
    /// retrying with backoff on any API error while the caches keep their
    /// last good content.
    /// Watch and list failures are counted in `api_errors`.
    pub fn start(client: Client, selector: &str, api_errors: &Counter) -> Self {
        let changes = Changes::new();
        let services = spawn_reflector::<Service>(
            Api::all(client.clone()),
            watcher::Config::default().labels(selector),
            drop_managed_fields,
            "Service",
            &changes,
            api_errors,
        );
        let slices = spawn_reflector::<EndpointSlice>(
            Api::all(client),
            watcher::Config::default().labels(selector),
            drop_managed_fields,
            "EndpointSlice",
            &changes,
            api_errors,
        );
        Self {
            services,
            slices,
            changes,
        }
    }

    /// Resolves once both caches hold a complete first list. Until then the
    /// agent must not remove anything: an empty cache is not "no Services".
    pub async fn wait_until_ready(&self) -> anyhow::Result<()> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        Ok(())
    }

    /// The desired mappings for the current caches.
    pub fn desired(&self, policy: &Policy) -> Desired {
        let services = self.services.state();
        let slices = self.slices.state();
        desired::compute(&services, &slices, policy)
    }
}

#[cfg(test)]
mod tests;
