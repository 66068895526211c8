//! Watches Services and EndpointSlices and keeps the desired state up to
//! date as events arrive ([`KubeSource`]). Each watch reads only the fields
//! the rules use ([`objects`](super::objects)) and hands over small views;
//! the [`Index`] recomputes what an event touches. A relist (the first
//! list, or after a watch expired with 410 Gone) arrives whole and replaces
//! everything of its kind, so a missed delete cannot linger.
//!
//! Both watches carry the `--selector` label selector, so the API server
//! sends only ssh-fwd's Services, and their EndpointSlices, which carry
//! their Service's labels (the EndpointSlice controller copies them; this
//! is how kube-proxy filters on `service.kubernetes.io/service-proxy-name`).
//!
//! Changes are taken as they come: whatever arrived while the agent was
//! busy (writing the maps) is applied together, and nothing waits on a
//! quiet system. Until both kinds are listed completely, updates are only
//! kept: Services without their slices would be computed (and logged as
//! having no endpoint) for nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    time::Instant,
};

use futures::StreamExt as _;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt as _, watcher},
};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use super::{
    desired::{Note, Policy},
    index::{Drift, Index, Update},
    objects::{Id, ServiceView, SliceView, WireService, WireSlice},
};
use crate::mapping::MappingSet;

/// The watchers stopped (only when the runtime shuts down).
#[derive(Debug, thiserror::Error)]
#[error("the Kubernetes watchers stopped")]
pub struct Stopped;

/// The desired state as the watches have it.
pub struct KubeSource {
    updates: mpsc::UnboundedReceiver<(Instant, Update)>,
    index: Index,
    services_listed: bool,
    slices_listed: bool,
    /// When the oldest change not yet returned by [`KubeSource::changed`]
    /// arrived.
    pending: Option<Instant>,
    /// Notes raised and not yet taken.
    raised: Vec<Note>,
    /// A change was returned already: until then the first complete lists
    /// count as one even if they map nothing.
    returned: bool,
    /// Updates not applied yet: those received before both kinds were
    /// listed, which are applied together.
    early: Vec<Update>,
    /// The frontends whose mapping changed since the last change returned
    /// (`None`: any may have).
    touched: Option<BTreeSet<SocketAddr>>,
}

impl KubeSource {
    /// Starts both watchers on the runtime; they run until the process ends,
    /// retrying with kube's watcher backoff on any API error while the
    /// desired state keeps its last good content. Watch and list failures
    /// are counted in `api_errors`. `node_addrs`: every address of this
    /// node, where no backend may be.
    pub fn start(
        client: Client,
        selector: &str,
        policy: Policy,
        node_addrs: BTreeMap<IpAddr, String>,
        api_errors: &Counter,
    ) -> Self {
        let (tx, updates) = mpsc::unbounded_channel();
        let config = watcher::Config::default().labels(selector);
        spawn_watch::<WireService>(Api::all(client.clone()), config.clone(), &tx, api_errors);
        spawn_watch::<WireSlice>(Api::all(client), config, &tx, api_errors);
        Self {
            updates,
            index: Index::on_node(policy, node_addrs),
            services_listed: false,
            slices_listed: false,
            pending: None,
            raised: Vec::new(),
            returned: false,
            early: Vec::new(),
            touched: None,
        }
    }

    /// Both kinds have been listed completely once. Until then the agent
    /// must not remove anything: an empty cache is not "no Services".
    pub fn is_ready(&self) -> bool {
        self.services_listed && self.slices_listed
    }

    /// Resolves once the source is ready.
    pub async fn wait_until_ready(&mut self) -> Result<(), Stopped> {
        while !self.is_ready() {
            self.receive().await?;
        }
        Ok(())
    }

    /// Waits until the source is ready and its mappings have changed since
    /// the last call (the first call: since start); returns when the oldest
    /// of those changes arrived, and the frontends whose mapping changed
    /// (`None`: any may have). Cancel-safe: changes taken in by a cancelled
    /// call are returned by the next.
    pub async fn changed(&mut self) -> Result<(Instant, Option<BTreeSet<SocketAddr>>), Stopped> {
        loop {
            if self.is_ready()
                && let Some(since) = self.pending.take()
            {
                self.returned = true;
                let touched = self.touched.replace(BTreeSet::new());
                return Ok((since, touched));
            }
            self.receive().await?;
        }
    }

    /// Waits for the next update, then takes in everything else already
    /// queued with it.
    async fn receive(&mut self) -> Result<(), Stopped> {
        let first = self.updates.recv().await.ok_or(Stopped)?;
        let mut batch = vec![first];
        while let Ok(more) = self.updates.try_recv() {
            batch.push(more);
        }
        let before = self.index.generation();
        let oldest = batch.iter().map(|(at, _)| *at).min();
        for (_, update) in &batch {
            match update {
                Update::Services(_) => self.services_listed = true,
                Update::Slices(_) => self.slices_listed = true,
                _ => {}
            }
        }
        self.early.extend(batch.into_iter().map(|(_, u)| u));
        let mut noted = false;
        if self.is_ready() {
            let raised = self.index.apply(std::mem::take(&mut self.early));
            noted = !raised.is_empty();
            self.took(raised);
        }
        // A note (a Service skipped, a conflict) is returned as a change
        // too, with nothing touched: the operator hears of it now, not at
        // the next change of the mappings.
        if self.index.generation() != before || !self.returned || noted {
            self.pending_since(oldest);
        }
        Ok(())
    }

    /// Checks backends against the node's addresses as they are now
    /// ([`Index::set_node_addrs`]); a change of the mappings is returned by
    /// [`KubeSource::changed`] like one from the watches.
    pub fn set_node_addrs(&mut self, node_addrs: BTreeMap<IpAddr, String>) {
        let before = self.index.generation();
        let raised = self.index.set_node_addrs(node_addrs);
        let noted = !raised.is_empty();
        self.took(raised);
        if self.index.generation() != before || noted {
            self.pending_since(Some(Instant::now()));
        }
    }

    /// Keeps the notes an index change raised and the frontends it touched.
    fn took(&mut self, raised: Vec<Note>) {
        self.raised.extend(raised);
        let touched = self.index.take_touched();
        self.touched = match (self.touched.take(), touched) {
            (Some(mut all), Some(more)) => {
                all.extend(more);
                Some(all)
            }
            _ => None,
        };
    }

    /// Notes a change not yet returned, which arrived at `at`.
    fn pending_since(&mut self, at: Option<Instant>) {
        self.pending = match (self.pending, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The desired mappings now.
    pub fn mappings(&self) -> &MappingSet {
        self.index.mappings()
    }

    /// See [`Index::owner_of`].
    pub fn owner_of(
        &self,
        frontend: SocketAddr,
        backend: IpAddr,
    ) -> (Option<&Id>, Option<&std::sync::Arc<str>>) {
        self.index.owner_of(frontend, backend)
    }

    /// How many Services are skipped as dangerous.
    pub fn invalid_services(&self) -> usize {
        self.index.invalid_services()
    }

    /// How many mappings the maps' capacity leaves out.
    pub fn left_out(&self) -> usize {
        self.index.left_out()
    }

    /// The notes raised since the last call, each once while it holds.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.raised)
    }

    /// Compares the incremental state with a full recompute, rebuilding it
    /// if they differ (then any mapping may have changed).
    pub fn check(&mut self) -> Result<(), Drift> {
        let checked = self.index.check();
        if checked.is_err() {
            self.touched = None;
        }
        checked
    }
}

/// What a watch reports of one kind of object.
trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + 'static
{
    const KIND: &'static str;
    type View: Send + 'static;
    fn view(&self) -> (Id, Self::View);
    fn id(&self) -> Id;
    fn one(id: Id, view: Option<Self::View>) -> Update;
    fn all(views: Vec<(Id, Self::View)>) -> Update;
}

impl Watched for WireService {
    const KIND: &'static str = "Service";
    type View = ServiceView;
    fn view(&self) -> (Id, ServiceView) {
        let view = WireService::view(self);
        (view.id.clone(), view)
    }
    fn id(&self) -> Id {
        super::objects::id_of(kube::Resource::meta(self))
    }
    fn one(id: Id, view: Option<ServiceView>) -> Update {
        Update::Service(id, view)
    }
    fn all(views: Vec<(Id, ServiceView)>) -> Update {
        Update::Services(views.into_iter().map(|(_, v)| v).collect())
    }
}

impl Watched for WireSlice {
    const KIND: &'static str = "EndpointSlice";
    type View = SliceView;
    fn view(&self) -> (Id, SliceView) {
        (WireSlice::id(self), WireSlice::view(self))
    }
    fn id(&self) -> Id {
        WireSlice::id(self)
    }
    fn one(id: Id, view: Option<SliceView>) -> Update {
        Update::Slice(id, view)
    }
    fn all(views: Vec<(Id, SliceView)>) -> Update {
        Update::Slices(views)
    }
}

/// Watches `api` in the background and sends each change as an update;
/// a relist is sent whole once complete. Failures are counted, logged and
/// retried with kube's watcher backoff.
fn spawn_watch<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    tx: &mpsc::UnboundedSender<(Instant, Update)>,
    errors: &Counter,
) {
    let (tx, errors) = (tx.clone(), errors.clone());
    tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut relist: Vec<(Id, K::View)> = Vec::new();
        while let Some(event) = stream.next().await {
            let update = match event {
                Ok(watcher::Event::Init) => {
                    relist.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(object)) => {
                    relist.push(object.view());
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    tracing::debug!(
                        kind = K::KIND,
                        objects = relist.len(),
                        "complete list received"
                    );
                    K::all(std::mem::take(&mut relist))
                }
                Ok(watcher::Event::Apply(object)) => {
                    let (id, view) = object.view();
                    K::one(id, Some(view))
                }
                Ok(watcher::Event::Delete(object)) => K::one(object.id(), None),
                Err(e) => {
                    errors.inc();
                    tracing::warn!(kind = K::KIND, error = %e, "watch failed; keeping the desired state as it is and retrying with backoff");
                    continue;
                }
            };
            if tx.send((Instant::now(), update)).is_err() {
                return; // the source is gone
            }
        }
    });
}

#[cfg(test)]
mod tests;
