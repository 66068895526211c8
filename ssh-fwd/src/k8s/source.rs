//! Watches Services and EndpointSlices into local caches with kube-rs
//! reflectors. Events only say "something changed"; the reconciler always
//! recomputes from the full caches (level-triggered), so a lost event costs
//! nothing and a relist after 410 Gone replaces a cache whole.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use futures::StreamExt as _;
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client,
    runtime::{
        WatchStreamExt as _,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::Notify;

use super::desired::{self, Desired, Policy};

/// The caches and what the watchers report about themselves.
#[derive(Clone)]
pub struct KubeSource {
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    /// Signalled after every cache change.
    pub changed: Arc<Notify>,
    /// Watch or list failures so far (each is retried with backoff).
    pub api_errors: Arc<AtomicU64>,
}

impl KubeSource {
    /// Starts both watchers on the runtime; they run until the process ends,
    /// retrying with backoff on any API error while the caches keep their
    /// last good content.
    pub fn start(client: Client) -> Self {
        let changed = Arc::new(Notify::new());
        let api_errors = Arc::new(AtomicU64::new(0));
        let services = spawn_reflector::<Service>(
            Api::all(client.clone()),
            watcher::Config::default(),
            drop_managed_fields,
            "Service",
            &changed,
            &api_errors,
        );
        let slices = spawn_reflector::<EndpointSlice>(
            Api::all(client),
            watcher::Config::default(),
            drop_managed_fields,
            "EndpointSlice",
            &changed,
            &api_errors,
        );
        Self {
            services,
            slices,
            changed,
            api_errors,
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

/// Keeps a cache of `api` (narrowed by `config`, each object trimmed by
/// `prune` to what is read) up to date in the background, signalling
/// `changed` after each change and counting failures, which are retried with
/// backoff while the cache keeps its content.
pub fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    prune: fn(&mut K),
    kind: &'static str,
    changed: &Arc<Notify>,
    errors: &Arc<AtomicU64>,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff().modify(prune));
    let changed = changed.clone();
    let errors = errors.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    tracing::debug!(kind, "complete list received");
                    changed.notify_one();
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => changed.notify_one(),
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(kind, error = %e, "watch failed; keeping the cache as it is and retrying with backoff");
                }
            }
        }
    });
    reader
}

/// Server-side-apply bookkeeping is often the largest part of an object
/// and nothing here reads it.
pub fn drop_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests;
