//! A reflector with the conventions both the agent and the controller
//! follow: kube's own watcher backoff on errors, failures counted, a wake-up
//! after every change, and objects trimmed before they are cached.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use futures::{StreamExt as _, TryStreamExt as _};
use kube::{
    Api,
    runtime::{
        WatchStreamExt as _,
        reflector::{self, Lookup, Store},
        watcher,
    },
};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;

/// "Something changed", and since when nothing has handled it: the wake-up
/// the reflectors give their reader. The time is that of the first change
/// not yet taken, so a burst reports its oldest event.
#[derive(Debug, Default)]
pub struct Changes {
    notify: Notify,
    since: Mutex<Option<Instant>>,
}

impl Changes {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records a change and wakes the reader.
    pub fn wake(&self) {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(Instant::now);
        self.notify.notify_one();
    }

    /// Resolves at the next change (at once if one is pending).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// When the oldest change not yet taken happened; clears it.
    pub fn take_since(&self) -> Option<Instant> {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// Keeps a cache of `api` (narrowed by `config`, each object cut down by
/// `keep` to what is read before it is cached) up to date in the
/// background, showing each event to `note` once the cache holds it, then
/// waking `changes`, and counting failures in `errors`. Failures are retried with kube's watcher
/// backoff while the cache keeps its content.
pub fn spawn_reflector<K, S>(
    api: Api<K>,
    config: watcher::Config,
    keep: fn(K) -> S,
    kind: &'static str,
    changes: &Arc<Changes>,
    errors: &Counter,
    note: impl Fn(&watcher::Event<S>) + Send + 'static,
) -> Store<S>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    S: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (reader, task) = reflector_task(api, config, keep, kind, changes, errors, note);
    tokio::spawn(task);
    reader
}

/// [`spawn_reflector`] for an owner that runs the task itself (in a
/// `JoinSet`, say), so that the watch ends when the owner does.
pub fn reflector_task<K, S>(
    api: Api<K>,
    config: watcher::Config,
    keep: fn(K) -> S,
    kind: &'static str,
    changes: &Arc<Changes>,
    errors: &Counter,
    note: impl Fn(&watcher::Event<S>) + Send + 'static,
) -> (Store<S>, impl Future<Output = ()> + Send + 'static)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    S: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let kept = watcher(api, config)
        .default_backoff()
        .map_ok(move |event| kept_event(event, keep));
    let stream = reflector::reflector(writer, kept);
    let changes = changes.clone();
    let errors = errors.clone();
    let task = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(event) = &event {
                note(event);
            }
            match event {
                Ok(watcher::Event::InitDone) => {
                    tracing::debug!(kind, "complete list received");
                    changes.wake();
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => changes.wake(),
                Err(e) => {
                    errors.inc();
                    tracing::warn!(kind, error = %e, "watch failed; keeping the cache as it is and retrying with backoff");
                }
            }
        }
    };
    (reader, task)
}

/// The event with its object cut down by `keep`.
fn kept_event<K, S>(event: watcher::Event<K>, keep: fn(K) -> S) -> watcher::Event<S> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(keep(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(keep(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(keep(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Server-side-apply bookkeeping is often the largest part of an object
/// and nothing here reads it.
pub fn drop_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}
