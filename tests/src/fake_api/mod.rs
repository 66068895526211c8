//! A Kubernetes API server for the objects ssh-fwd touches, just real enough
//! for kube-rs clients: list and chunked watch from a resourceVersion (with
//! label selectors), get, create and replace (the body's namespace checked
//! against the path's, resourceVersion checks), merge patch (other patch
//! types refused with 415), the `/status` subresource and delete (graceful
//! for running pods on a node), answered with the real JSON shapes and
//! `Status` errors. It also plays two controllers Kubernetes runs and the
//! kubelet's last step: EndpointSlices for Services with a selector, garbage
//! collection of objects a deleted object owns, and a terminating pod's
//! removal once its grace is over. Every request is recorded, so tests can
//! check them against RBAC. Its socket lives on loopback, inside a network
//! namespace the test made or the test's own.
//!
//! By default anyone may do anything, and a bearer token is only a label
//! telling clients apart ([`FakeApi::kubeconfig_as`]). A test that turns
//! enforcement on ([`FakeApi::enforce_deploy`], [`FakeApi::enforce`]) gets
//! what kube-apiserver does with a request before it is served:
//! authentication of the token ([`FakeApi::service_account_token`],
//! [`FakeApi::tenant_token`], [`FakeApi::admin_token`]; 401 otherwise),
//! RBAC (`rbac.rs`, 403) and ValidatingAdmissionPolicy (`admission/`).

mod admission;
mod auth;
mod client;
mod clock;
mod cluster;
mod endpoints;
mod http;
mod install;
mod ip_families;
mod paging;
mod rbac;
mod selector;
mod service_status;
mod status;
mod store;
#[cfg(test)]
mod tests;
mod validation;

use std::{
    net::SocketAddr,
    os::fd::AsRawFd as _,
    sync::{Arc, Mutex, MutexGuard},
};

use anyhow::Context as _;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::NetNs;
pub use admission::{Policies, Target};
pub use auth::UserInfo;
pub use cluster::{Cluster, DEPLOY_NAMESPACE, deploy_base};
pub use endpoints::IpFamily;
pub use install::{ApiKind, Installed};
use ip_families::ClusterFamilies;
pub use rbac::Attributes;
pub use selector::{Selector, SelectorError};
use store::Store;
pub use store::{Change, CreateHook, key_of};

#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    EndpointSlice,
    Pod,
    Lease,
    Event,
    Secret,
    ConfigMap,
    /// Cluster-scoped: stored under the namespace "".
    MutatingWebhookConfiguration,
    /// Cluster-scoped.
    Node,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Pod,
        Kind::Lease,
        Kind::Event,
        Kind::Secret,
        Kind::ConfigMap,
        Kind::MutatingWebhookConfiguration,
        Kind::Node,
    ];

    /// The API group ("" for the core group).
    pub fn group(self) -> &'static str {
        match self {
            Kind::Service | Kind::Pod | Kind::Secret | Kind::ConfigMap | Kind::Node => "",
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Lease => "coordination.k8s.io",
            Kind::Event => "events.k8s.io",
            Kind::MutatingWebhookConfiguration => "admissionregistration.k8s.io",
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Pod => "pods",
            Kind::Lease => "leases",
            Kind::Event => "events",
            Kind::Secret => "secrets",
            Kind::ConfigMap => "configmaps",
            Kind::MutatingWebhookConfiguration => "mutatingwebhookconfigurations",
            Kind::Node => "nodes",
        }
    }

    /// Whether the kind has a `/status` subresource (and its main resource
    /// leaves status alone).
    pub fn has_status(self) -> bool {
        matches!(self, Kind::Service | Kind::Pod)
    }

    fn api_version(self) -> String {
        match self.group() {
            "" => "v1".into(),
            group => format!("{group}/v1"),
        }
    }

    fn list_kind(self) -> &'static str {
        match self {
            Kind::Service => "ServiceList",
            Kind::EndpointSlice => "EndpointSliceList",
            Kind::Pod => "PodList",
            Kind::Lease => "LeaseList",
            Kind::Event => "EventList",
            Kind::Secret => "SecretList",
            Kind::ConfigMap => "ConfigMapList",
            Kind::MutatingWebhookConfiguration => "MutatingWebhookConfigurationList",
            Kind::Node => "NodeList",
        }
    }

    fn from_path(group: &str, resource: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.group() == group && k.resource() == resource)
    }
}

/// One request as RBAC sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    /// The bearer token the client sent ([`FakeApi::kubeconfig_as`]); empty
    /// when it sent none.
    pub user: String,
    /// Who the token authenticates as ([`FakeApi::service_account_token`]
    /// and the like); empty for a token the server did not issue.
    pub username: String,
    /// get, list, watch, create, update, patch or delete.
    pub verb: &'static str,
    pub group: String,
    /// With the subresource, e.g. `services/status`.
    pub resource: String,
    /// The `labelSelector` of a list or watch, as sent (empty for none).
    pub selector: String,
    /// When it arrived, before any stall or delay.
    pub at: std::time::Instant,
    /// When the server acted on it (a write took effect, a read was
    /// answered, a watch started), after any stall or delay; `None` while it
    /// waits and for one dropped unhandled (see [`FakeApi::stall`]).
    pub handled: Option<std::time::Instant>,
    /// When the client closed the connection before an answer (it gave the
    /// request up), if it did while the request waited on a stall or delay.
    pub given_up: Option<std::time::Instant>,
    /// The status code answered (`None` before the answer, and for one
    /// never answered).
    pub code: Option<u16>,
}

/// Whose requests and watch events wait ([`FakeApi::stall`]).
#[derive(Debug, Default)]
struct Stall {
    all: bool,
    users: std::collections::BTreeSet<String>,
    /// A user whose stall starts with its first request of a kind and verb.
    armed: Vec<(String, Kind, &'static str)>,
}

impl Stall {
    fn holds(&self, user: &str) -> bool {
        self.all || self.users.contains(user)
    }
}

/// Who may do what: the tokens issued, and the cluster's RBAC and
/// policies once enforced.
#[derive(Default)]
struct Auth {
    tokens: auth::Tokens,
    /// `Some` while enforcing.
    cluster: Option<Arc<Cluster>>,
    /// RoleBindings the test made (a tenant's), kept across
    /// [`FakeApi::enforce`].
    bindings: Vec<(String, String, String)>,
}

struct Shared {
    store: Mutex<Store>,
    auth: Mutex<Auth>,
    /// Every change; `None` cuts open watches.
    changes: broadcast::Sender<Option<Change>>,
    requests: Mutex<Vec<Request>>,
    /// Whose requests and watch events wait.
    stalled: tokio::sync::watch::Sender<Stall>,
    /// The server's runtime, for the kubelet's part in pod deletion.
    runtime: tokio::runtime::Handle,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn auth(&self) -> MutexGuard<'_, Auth> {
        self.auth.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the API stalls for `user` (a bearer token).
    fn stalls(&self, user: &str) -> bool {
        self.stalled.borrow().holds(user)
    }

    /// Resolves once the API does not stall for `user` (at once if it does
    /// not).
    async fn unstalled(&self, user: &str) {
        let mut stalled = self.stalled.subscribe();
        let _ = stalled.wait_for(|s| !s.holds(user)).await;
    }

    /// Starts the stall armed for `user` if this request is its trigger.
    fn trigger_stall(&self, user: &str, kind: Kind, verb: &str) {
        self.stalled.send_if_modified(|stall| {
            let before = stall.armed.len();
            stall
                .armed
                .retain(|(u, k, v)| !(u == user && *k == kind && *v == verb));
            let fired = stall.armed.len() < before;
            if fired {
                stall.users.insert(user.to_owned());
            }
            fired
        });
    }

    /// Notes on request `id` what happened to it since it arrived.
    fn note(&self, id: usize, what: impl FnOnce(&mut Request)) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(request) = requests.get_mut(id) {
            what(request);
        }
    }

    /// Plays the kubelet for a pod marked for deletion: once its `grace`
    /// is over, it is removed if it is still the one with `uid`.
    fn finish_later(self: &Arc<Self>, kind: Kind, key: String, uid: String, grace: u64) {
        let shared = self.clone();
        self.runtime.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(grace)).await;
            let mut store = shared.store();
            let changes = store.finish_terminating(kind, &key, &uid);
            shared.publish(&store, changes);
        });
    }

    /// Sends `changes` to the watches; call it with the store still locked
    /// (`_written`), so changes go out in the order of their
    /// resourceVersions: a watch drops one older than what it has sent.
    fn publish(&self, _written: &MutexGuard<'_, Store>, changes: Vec<Change>) {
        for change in changes {
            let _ = self.changes.send(Some(change));
        }
    }
}

pub struct FakeApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    /// The network namespace it listens in (`/run/netns/...`), for
    /// [`FakeApi::call`]; `None`: the caller's own.
    netns: Option<String>,
}

impl FakeApi {
    /// Listens on 127.0.0.1 inside `ns`.
    pub fn start(ns: &NetNs) -> anyhow::Result<Self> {
        Self::start_at(ns, "127.0.0.1")
    }

    /// Listens on `ip` (an address of `ns`) inside `ns`, for clients in
    /// other namespaces that reach it.
    pub fn start_at(ns: &NetNs, ip: &str) -> anyhow::Result<Self> {
        let bind = format!("{ip}:0");
        let path = ns.path();
        // A socket belongs to the network namespace of the thread that
        // created it; make it in a thread that joined `ns`.
        let listener = std::thread::spawn(move || -> anyhow::Result<std::net::TcpListener> {
            let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            // SAFETY: setns on this thread only, with a valid namespace fd.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error()).context("setns");
            }
            Ok(std::net::TcpListener::bind(&bind)?)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("listener thread panicked"))??;
        let mut api = Self::serve(listener)?;
        api.netns = Some(ns.path());
        Ok(api)
    }

    /// Listens on 127.0.0.1 in the caller's own network namespace.
    pub fn start_on_loopback() -> anyhow::Result<Self> {
        Self::serve(std::net::TcpListener::bind("127.0.0.1:0")?)
    }

    fn serve(listener: std::net::TcpListener) -> anyhow::Result<Self> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        // Two workers: the API server serves connections in parallel (the
        // store's lock orders the writes). On one, a client's benchmark
        // measured the fake's queue.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (changes, _) = broadcast::channel(65_536);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            auth: Mutex::default(),
            changes,
            requests: Mutex::default(),
            stalled: tokio::sync::watch::Sender::new(Stall::default()),
            runtime: runtime.handle().clone(),
        });
        let s = shared.clone();
        runtime.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                // As the API server's sockets (Go sets TCP_NODELAY on every
                // connection): a watch writes one event after another, and
                // Nagle would hold each small write behind the last one's
                // ACK, which the client may delay by 40 ms.
                let _ = stream.set_nodelay(true);
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = http::serve(stream, s).await;
                });
            }
        });
        Ok(Self {
            shared,
            addr,
            runtime: Some(runtime),
            netns: None,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig pointing at this server.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_with_user("{}".to_owned())
    }

    /// A kubeconfig whose client sends `user` as its bearer token, so
    /// [`Request::user`] tells this client's requests from others'.
    pub fn kubeconfig_as(&self, user: &str) -> String {
        self.kubeconfig_with_user(format!("{{token: \"{user}\"}}"))
    }

    /// Turns on authentication, RBAC and validating admission with the
    /// roles, bindings and policies of `cluster` (and the RoleBindings of
    /// the tenants made so far): from now on a request needs a token this
    /// server issued (401 otherwise), RBAC's leave (403) and every policy's
    /// (as the policy says). The test's own calls (`apply`, `patch`, ...)
    /// are not checked.
    pub fn enforce(&self, mut cluster: Cluster) {
        let mut auth = self.shared.auth();
        for (namespace, user, role) in &auth.bindings {
            if let Err(e) = cluster.bind_in(namespace, user, role) {
                panic!("binding {user} to {role} in {namespace}: {e}");
            }
        }
        auth.cluster = Some(Arc::new(cluster));
    }

    /// [`FakeApi::enforce`] with what a cluster running deploy/base has:
    /// Kubernetes' bootstrap roles (cluster-admin, admin, edit, view),
    /// deploy/base's RBAC and its ValidatingAdmissionPolicies.
    ///
    /// # Panics
    ///
    /// If deploy/ does not load (a policy that does not compile names
    /// itself).
    pub fn enforce_deploy(&self) {
        match Cluster::deploy() {
            Ok(cluster) => self.enforce(cluster),
            Err(e) => panic!("deploy/base does not load: {e}"),
        }
    }

    /// A token of service account `namespace/name`, as its pod's projected
    /// token authenticates: `system:serviceaccount:NS:NAME`, its groups,
    /// and for a pod on `node` the extra a pod-bound token carries
    /// (`authentication.kubernetes.io/node-name`, node-uid, pod-name,
    /// pod-uid, credential-id).
    pub fn service_account_token(&self, namespace: &str, name: &str, node: Option<&str>) -> String {
        let mut auth = self.shared.auth();
        let serial = auth.tokens.issued();
        let token = format!("sa.{namespace}.{name}.{}.{serial}", node.unwrap_or("-"));
        let user = UserInfo::service_account(namespace, name, node, serial);
        auth.tokens.issue(token, user)
    }

    /// A token of a tenant of `namespace`: user `tenant:NS`, bound to the
    /// built-in `edit` ClusterRole by a RoleBinding in that namespace, as a
    /// platform gives a tenant its namespace.
    pub fn tenant_token(&self, namespace: &str) -> String {
        let user = format!("tenant:{namespace}");
        let mut auth = self.shared.auth();
        auth.bindings
            .push((namespace.to_owned(), user.clone(), "edit".to_owned()));
        if let Some(cluster) = auth.cluster.as_mut()
            && let Err(e) = Arc::make_mut(cluster).bind_in(namespace, &user, "edit")
        {
            panic!("binding {user} to edit in {namespace}: {e}");
        }
        auth.tokens
            .issue(format!("tenant.{namespace}"), UserInfo::person(&user, &[]))
    }

    /// A token of the cluster's administrator (group `system:masters`,
    /// bound to `cluster-admin`): the test driver's.
    pub fn admin_token(&self) -> String {
        let user = UserInfo::person("kubernetes-admin", &[auth::MASTERS]);
        self.shared.auth().tokens.issue("admin".to_owned(), user)
    }

    /// The agent's arguments for Kubernetes mode against this server, the
    /// SSH IP `ssh_ip`; the kubeconfig is written into `dir`.
    pub fn agent_args(&self, dir: &std::path::Path, ssh_ip: &str) -> Vec<String> {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, self.kubeconfig()).expect("writing the kubeconfig");
        vec![
            "--kubernetes".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--ssh-ip".into(),
            ssh_ip.into(),
        ]
    }

    fn kubeconfig_with_user(&self, user: String) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: fake\n  user: {user}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        )
    }

    /// Creates or replaces an object (metadata.namespace/name identify it),
    /// keeping the metadata it is given.
    pub fn apply(&self, kind: Kind, object: Value) {
        let mut store = self.shared.store();
        let changes = store.put(kind, object);
        self.shared.publish(&store, changes);
    }

    /// Creates an object as a client's POST does: a name from
    /// generateName, validation (422 with the API server's message), a
    /// uid and creationTimestamp. The stored object, or the status code
    /// and message of the refusal.
    pub fn create(&self, kind: Kind, object: Value) -> Result<Value, (u16, String)> {
        let mut store = self.shared.store();
        let (created, changes) = store
            .create(kind, object)
            .map_err(|e| (e.code, e.message))?;
        self.shared.publish(&store, changes);
        Ok(Value::clone(&created))
    }

    /// Removes an object at once, as a delete with no grace does (a pod
    /// too: see [`FakeApi::delete_pod`] for a graceful one).
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) {
        let mut store = self.shared.store();
        let removed = store.remove(kind, &format!("{namespace}/{name}"), &Value::Null);
        if let Ok((_, changes)) = removed {
            self.shared.publish(&store, changes);
        }
    }

    /// Deletes a pod as a client's DELETE does (`kubectl delete pod`):
    /// one on a node that has not finished is marked and stays for
    /// `grace` seconds (default: its terminationGracePeriodSeconds, else
    /// 30), then goes, as the kubelet ends it.
    pub fn delete_pod(&self, namespace: &str, name: &str, grace: Option<u64>) {
        let key = format!("{namespace}/{name}");
        let mut store = self.shared.store();
        let Ok((_, changes, deleted)) = store.delete(Kind::Pod, &key, &Value::Null, grace) else {
            return;
        };
        self.shared.publish(&store, changes);
        drop(store);
        if let store::Deleted::Terminating { uid, grace } = deleted {
            self.shared.finish_later(Kind::Pod, key, uid, grace);
        }
    }

    /// Applies an RFC 7386 merge patch to an object, if it exists.
    pub fn patch(&self, kind: Kind, namespace: &str, name: &str, patch: &Value) {
        let mut store = self.shared.store();
        let patched = store.merge_patch(kind, &format!("{namespace}/{name}"), patch, false);
        if let Ok((_, changes)) = patched {
            self.shared.publish(&store, changes);
        }
    }

    /// Applies an RFC 7386 merge patch to an object's status (as the
    /// kubelet writes a pod's).
    ///
    /// # Panics
    ///
    /// If the object does not exist or the patch is refused (a test that
    /// writes a status expects it written).
    pub fn patch_status(&self, kind: Kind, namespace: &str, name: &str, patch: &Value) {
        let mut store = self.shared.store();
        let key = format!("{namespace}/{name}");
        match store.merge_patch(kind, &key, patch, true) {
            Ok((_, changes)) => self.shared.publish(&store, changes),
            Err(e) => {
                drop(store);
                panic!(
                    "the status patch of {kind:?} {key} is refused ({}): {}",
                    e.code, e.message
                );
            }
        }
    }

    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .store()
            .get(kind, &format!("{namespace}/{name}"))
            .cloned()
    }

    pub fn list(&self, kind: Kind) -> Vec<Value> {
        self.shared.store().list(kind, None, &Selector::default())
    }

    /// How many objects of `kind` satisfy `check` (without copying them).
    pub fn count(&self, kind: Kind, check: impl Fn(&Value) -> bool) -> usize {
        self.shared.store().count(kind, check)
    }

    /// The changes to objects of `kind` after resourceVersion `after`, in
    /// order, and the resourceVersion they reach: a benchmark follows the
    /// state from them without scanning every object each time.
    pub fn changes_after(&self, kind: Kind, after: u64) -> (Vec<Change>, u64) {
        let store = self.shared.store();
        let start = store.log.partition_point(|c| c.rv <= after);
        let changes = store.log[start..]
            .iter()
            .filter(|c| c.kind == kind)
            .cloned()
            .collect();
        (changes, store.rv().max(after))
    }

    /// Every request received so far (a stalled one included, see
    /// [`Request::handled`]).
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `hook` before each Service create that arrives over HTTP; what
    /// it returns is stored first, as another client's Service.
    pub fn before_service_create(&self, hook: CreateHook) {
        self.shared.store().before_service_create = Some(hook);
    }

    /// Stops playing the EndpointSlice controller (for benchmarks of
    /// clients that never read slices).
    pub fn without_endpoint_slices(&self) {
        self.shared.store().without_endpoint_slices = true;
    }

    /// Plays an IPv6-only cluster (a Service created without `ipFamilies`
    /// gets IPv6, and IPv6 endpoints only; one asking for IPv4 is refused).
    pub fn ipv6_only(&self) {
        self.shared.store().service_families = ClusterFamilies::single(IpFamily::Ipv6);
    }

    /// Plays a dual-stack cluster whose primary family is `primary`: a
    /// Service of `PreferDualStack` or `RequireDualStack` gets both
    /// families, and a slice of each.
    pub fn dual_stack(&self, primary: IpFamily) {
        self.shared.store().service_families = ClusterFamilies::dual(primary);
    }

    /// Answers the next creates of `kind` with these status codes.
    pub fn fail_creates(&self, kind: Kind, codes: &[u16]) {
        self.fail_next(kind, "create", codes);
    }

    /// Answers the next patches of `kind` (status included) with these
    /// status codes.
    pub fn fail_patches(&self, kind: Kind, codes: &[u16]) {
        self.fail_next(kind, "patch", codes);
    }

    /// Answers the next updates (PUT) of `kind` with these status codes.
    pub fn fail_updates(&self, kind: Kind, codes: &[u16]) {
        self.fail_next(kind, "update", codes);
    }

    /// How many injected failures of `kind` and `verb` are still to come.
    pub fn failures_left(&self, kind: Kind, verb: &'static str) -> usize {
        self.shared
            .store()
            .failures
            .get(&(kind, verb))
            .map_or(0, Vec::len)
    }

    fn fail_next(&self, kind: Kind, verb: &'static str, codes: &[u16]) {
        let mut codes = codes.to_vec();
        codes.reverse();
        self.shared.store().failures.insert((kind, verb), codes);
    }

    /// Answers requests of `kind` and `verb` only after `by` (a slow API
    /// server; zero ends it). One whose client gives up meanwhile is still
    /// carried out: the API server has received it.
    pub fn delay(&self, kind: Kind, verb: &'static str, by: std::time::Duration) {
        self.shared.store().delays.insert((kind, verb), by);
    }

    /// Cuts the API off: open watches end and new requests get no answer
    /// (connections are closed at once).
    pub fn cut(&self) {
        self.shared.store().cut = true;
        let _ = self.shared.changes.send(None);
    }

    /// Stalls the API, as a connection that stops answering: requests are
    /// read (and recorded as they arrive) but not handled, and open watches
    /// deliver nothing, until [`FakeApi::resume`]. A request whose client
    /// gives up (closes the connection) meanwhile is dropped unhandled, as
    /// it never reached the API server; one still waited for is handled.
    pub fn stall(&self) {
        self.shared.stalled.send_modify(|s| s.all = true);
    }

    /// [`FakeApi::stall`] for one client only (its bearer token: see
    /// [`FakeApi::kubeconfig_as`]), as when its own connection stops
    /// answering, while the others are served; from the moment its next
    /// request of `kind` and `verb` arrives, that request included: a stall
    /// that catches the client with that call in flight.
    pub fn stall_user_at(&self, user: &str, kind: Kind, verb: &'static str) {
        self.shared
            .stalled
            .send_modify(|s| s.armed.push((user.to_owned(), kind, verb)));
    }

    /// Ends every stall (and disarms those not started).
    pub fn resume(&self) {
        self.shared.stalled.send_replace(Stall::default());
    }

    /// Brings the API back after [`FakeApi::cut`].
    pub fn restore(&self) {
        self.shared.store().cut = false;
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
