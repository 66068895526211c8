//! The one accept loop of every server the processes run (`/metrics` and
//! the webhook). A failed accept that is not about one connection (the
//! process or the system out of file descriptors, the kernel out of socket
//! memory) fails again at once until something is freed: retrying at once
//! spins a core and logging every failure floods the log. So the loop backs
//! off (10 ms doubling to 1 s), warns once per episode with the fix, says
//! once when accepting works again, and counts every failure in
//! `ssh_fwd_accept_errors_total`. While descriptors are scarce, accepts
//! alternate between failing and succeeding (each connection that ends
//! frees one): an episode ends only at an accept [`SETTLE`] after the last
//! failure, so one shortage is reported once, not once per connection.
//! axum's own loop for `TcpListener` sleeps a fixed second per failure and,
//! without its `tracing` feature, says nothing; hyper has no loop of its
//! own: hence this one, as an `axum::serve::Listener` both servers use.

use std::{fmt::Write as _, future::Future, io, net::SocketAddr, sync::LazyLock, time::Duration};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder},
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    time::Instant,
};

/// The first pause after a failed accept; it doubles up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(10);
/// The longest pause: what a recovered server may take to notice.
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// How long accepting must have worked before an episode is over.
pub const SETTLE: Duration = Duration::from_secs(2);

/// Which server failed to accept, the label of the counter.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Server {
    /// `/metrics`, `/healthz`, `/readyz`.
    Metrics,
    /// The controller's admission webhook.
    Webhook,
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Self::Metrics => "metrics",
            Self::Webhook => "webhook",
        }
    }
}

impl EncodeLabelValue for Server {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.name())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: Server,
}

/// Failed accepts, by server. One per process, as the file descriptors
/// they run out of are.
static ACCEPT_ERRORS: LazyLock<Family<ServerLabel, Counter>> = LazyLock::new(Family::default);

/// The process's own figures, for [`super::metrics::render`] to add to
/// whichever registry a command serves.
pub fn process_registry() -> Registry {
    let mut r = Registry::with_prefix("ssh_fwd");
    r.register(
        "accept_errors",
        "Connections a server could not accept (file descriptors or socket memory exhausted), by server",
        ACCEPT_ERRORS.clone(),
    );
    r
}

/// What [`Accepting`] needs of a listener: tokio's `TcpListener`, or a
/// scripted one in tests.
pub trait RawAccept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, SocketAddr)>> + Send;
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl RawAccept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, SocketAddr)>> + Send {
        tokio::net::TcpListener::accept(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::TcpListener::local_addr(self)
    }
}

/// A listener whose accept never fails: it retries, backing off and
/// reporting as the module says.
pub struct Accepting<L> {
    inner: L,
    server: Server,
    errors: Counter,
    episode: Option<Episode>,
}

/// Accepts failing since `since`: how many, the last one, and the next
/// pause.
struct Episode {
    since: Instant,
    errors: u64,
    last_error: Instant,
    delay: Duration,
}

impl<L: RawAccept> Accepting<L> {
    pub fn new(inner: L, server: Server) -> Self {
        let errors = ACCEPT_ERRORS.get_or_create(&ServerLabel { server }).clone();
        Self::with_counter(inner, server, errors)
    }

    /// As [`Accepting::new`], counting into `errors` (tests).
    pub fn with_counter(inner: L, server: Server, errors: Counter) -> Self {
        Self {
            inner,
            server,
            errors,
            episode: None,
        }
    }

    /// The next connection, however long the failures last.
    pub async fn next(&mut self) -> (L::Io, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok(conn) => {
                    self.recovered();
                    return conn;
                }
                // The connection went away before it was accepted; the
                // next one is waiting.
                Err(e) if is_per_connection(&e) => {
                    tracing::debug!(server = self.server.name(), error = %e, "a connection failed before it was accepted");
                }
                Err(e) => {
                    let pause = self.failed(&e);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Counts a failure, warns if it starts an episode, and returns the
    /// pause before the next try.
    fn failed(&mut self, e: &io::Error) -> Duration {
        self.errors.inc();
        let episode = self.episode.get_or_insert_with(|| {
            let addr = self.inner.local_addr().map(|a| a.to_string()).unwrap_or_default();
            tracing::warn!(
                server = self.server.name(),
                %addr,
                error = %e,
                "cannot accept connections: {}; retrying with backoff (up to {MAX_DELAY:?}), logged once until accepting works again",
                fix(e),
            );
            Episode {
                since: Instant::now(),
                errors: 0,
                last_error: Instant::now(),
                delay: FIRST_DELAY,
            }
        });
        episode.errors += 1;
        episode.last_error = Instant::now();
        let pause = episode.delay;
        episode.delay = (episode.delay * 2).min(MAX_DELAY);
        pause
    }

    /// An accept worked: the episode is over if none failed for
    /// [`SETTLE`]; until then the next failure pauses briefly again (a
    /// connection was freed, more may follow).
    fn recovered(&mut self) {
        let Some(episode) = self.episode.as_mut() else {
            return;
        };
        if episode.last_error.elapsed() < SETTLE {
            episode.delay = FIRST_DELAY;
            return;
        }
        tracing::info!(
            server = self.server.name(),
            failed_accepts = episode.errors,
            lasted = ?episode.last_error.duration_since(episode.since),
            "accepting connections again",
        );
        self.episode = None;
    }
}

impl<L: RawAccept> axum::serve::Listener for Accepting<L> {
    type Io = L::Io;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        self.next()
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Errors about the one pending connection (accept(2): "Linux passes
/// already-pending network errors on the new socket as an error code"),
/// to be retried at once.
fn is_per_connection(e: &io::Error) -> bool {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return true;
    }
    matches!(
        e.raw_os_error(),
        Some(
            libc::EPROTO
                | libc::ENOPROTOOPT
                | libc::ENETDOWN
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::EHOSTUNREACH
                | libc::ENONET
                | libc::EOPNOTSUPP
        )
    )
}

/// What the operator can do about `e`.
fn fix(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => format!(
            "the process has run out of file descriptors (open-file limit {}): raise it with `ulimit -n`, systemd's LimitNOFILE= or the container runtime's nofile ulimit",
            nofile_limit().map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        ),
        Some(libc::ENFILE) => {
            "the system has run out of file descriptors: raise fs.file-max (sysctl) or find what holds them".to_owned()
        }
        Some(libc::ENOBUFS | libc::ENOMEM) => {
            "the kernel is out of memory for sockets: check the node's memory and net.core/net.ipv4 tcp_mem limits".to_owned()
        }
        _ => "an unexpected accept error".to_owned(),
    }
}

/// The soft RLIMIT_NOFILE of this process.
fn nofile_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    ok.then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests;
