//! TLS handshakes paced by a semaphore. A burst of new connections (the
//! API server opening many at once after a restart, or a flood of pod
//! creates) would otherwise run every handshake's key exchange and
//! signature at once: each gets a thin slice of the CPU and all finish
//! late, past any timeout started at accept. With at most [`Handshakes`]
//! permits (twice the cores) the handshakes of a burst finish in the order
//! they came, and each one's timeout starts only once it holds a permit.
//!
//! A permit covers the handshake's CPU work only: it is taken once the
//! client's first bytes (its ClientHello) have arrived, and given back as
//! soon as the handshake waits on the client again ([`Paced`]), so clients
//! that connect and stall, before or in the middle of a handshake, hold no
//! permit and cannot keep the API server's handshakes waiting.

use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use prometheus_client::metrics::counter::Counter;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

/// How long a client may take to send its ClientHello (holding nothing).
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How long a connection may wait for a permit: the API server waits at
/// most 30 s for a webhook (`timeoutSeconds` is at most 30), so past that
/// nobody is waiting for the answer.
const PERMIT_WAIT: Duration = Duration::from_secs(30);
/// How long a handshake may take once it holds a permit.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeouts closer together than this are one burst, warned of once.
const QUIET: Duration = Duration::from_secs(60);

/// The handshakes of one server: the permits, and what their timeouts
/// have been.
pub struct Handshakes {
    permits: Arc<Semaphore>,
    timeout: Duration,
    /// Handshakes given up (no permit within [`PERMIT_WAIT`], or not done
    /// within the timeout after getting one).
    timeouts: Counter,
    /// When the last one was given up.
    last_timeout: Mutex<Option<Instant>>,
}

impl Handshakes {
    /// Twice the cores' worth of permits.
    pub fn new(timeouts: Counter) -> Arc<Self> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with(2 * cores, HANDSHAKE_TIMEOUT, timeouts)
    }

    pub fn with(permits: usize, timeout: Duration, timeouts: Counter) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(permits)),
            timeout,
            timeouts,
            last_timeout: Mutex::new(None),
        })
    }

    /// The handshake of `stream`, paced; `None` when it failed or was
    /// given up (counted, and warned of once per burst).
    pub async fn accept(
        &self,
        acceptor: &TlsAcceptor,
        stream: TcpStream,
    ) -> Option<TlsStream<Paced<TcpStream>>> {
        match tokio::time::timeout(HELLO_WAIT, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a webhook connection failed before its TLS handshake");
                return None;
            }
            Err(_) => {
                tracing::debug!("a webhook connection sent nothing for {HELLO_WAIT:?}; closed");
                return None;
            }
        }
        let permit = self.permits.clone().acquire_owned();
        let Ok(Ok(permit)) = tokio::time::timeout(PERMIT_WAIT, permit).await else {
            self.gave_up("waited too long to start");
            return None;
        };
        let paced = Paced {
            io: stream,
            permit: Some(permit),
        };
        match tokio::time::timeout(self.timeout, acceptor.accept(paced)).await {
            Ok(Ok(mut tls)) => {
                tls.get_mut().0.permit = None;
                Some(tls)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a TLS handshake with the webhook failed");
                None
            }
            Err(_) => {
                self.gave_up("did not finish in time");
                None
            }
        }
    }

    /// A turn held as a handshake holds one, for tests of the waiting.
    #[cfg(test)]
    pub async fn hold_turn(&self) -> OwnedSemaphorePermit {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    fn gave_up(&self, how: &str) {
        self.timeouts.inc();
        let now = Instant::now();
        let mut last = self
            .last_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first_of_burst = last.is_none_or(|at| now.duration_since(at) > QUIET);
        *last = Some(now);
        if first_of_burst {
            tracing::warn!(
                timeout = ?self.timeout,
                "a TLS handshake with the webhook {how}: more new connections at once than this replica's CPU takes, or a client that stalls (the API server then applies the webhook's failurePolicy); later ones in this burst are only counted in ssh_fwd_controller_webhook_handshake_timeouts_total. If this recurs, give the controller more CPU or replicas"
            );
        } else {
            tracing::debug!("a TLS handshake with the webhook {how}");
        }
    }
}

/// A stream whose handshake permit is given back the first time a read
/// has to wait for the peer: from then on the handshake waits, it does not
/// compute.
pub struct Paced<S> {
    io: S,
    permit: Option<OwnedSemaphorePermit>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Paced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if polled.is_pending() {
            self.permit = None;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Paced<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
