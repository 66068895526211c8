//! HTTPS for the webhook: rustls (on the ring provider kube's client already
//! uses) with a certificate resolver whose key pair is swapped in place when
//! new files or a renewed Secret arrive, so a renewal needs no restart and
//! drops no connection. With `--webhook-client-ca`, only clients with a
//! certificate one of its CAs signed (the API server, when an
//! AdmissionConfiguration gives it one) complete the handshake. The accept loop is the few lines hyper's own
//! examples have, on the accept loop `/metrics` uses too: axum-server would
//! do it as well, but its rustls feature brings a second crypto provider
//! (aws-lc) into the build. Handshakes take turns (`pacing`), so a burst of
//! new connections does not starve them all.

use std::{
    cell::Cell,
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::{counter::Counter, family::Family};
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier, danger::ClientCertVerifier},
    sign::CertifiedKey,
};
use tokio::net::TcpListener;

pub use self::pacing::Handshakes;
use super::metrics::{Reload, ReloadLabel};
use crate::telemetry::accept::{Accepting, Server};

mod pacing;

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} holds no PEM certificate")]
    NoCertificate { what: String },
    #[error("{what} holds no PEM private key: {detail}")]
    NoKey { what: String, detail: String },
    #[error("the key does not fit the certificate in {what}: {source}")]
    Mismatch {
        what: String,
        #[source]
        source: rustls::Error,
    },
    #[error("{what} holds no CA certificate rustls takes: {detail}")]
    ClientCa { what: String, detail: String },
}

/// A certificate chain and key from PEM, checked to belong together.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::NoKey {
        what: what.to_owned(),
        detail: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(|source| TlsError::Mismatch {
        what: what.to_owned(),
        source,
    })
}

/// The key pair being served, swappable while serving.
#[derive(Debug)]
pub struct Swappable(RwLock<Arc<CertifiedKey>>);

impl Swappable {
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self(RwLock::new(Arc::new(key))))
    }

    pub fn swap(&self, key: CertifiedKey) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
    }
}

impl ResolvesServerCert for Swappable {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The server's TLS configuration: its key pair from `certs`, and, when
/// `clients` is given, a client certificate it accepts required of every
/// client.
pub fn server_config(
    certs: Arc<Swappable>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // The ring provider supports the safe default protocol versions.
    let builder = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|_| ServerConfig::builder());
    let builder = match clients {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A verifier of client certificates signed by one of the CAs in the PEM
/// file `path` (`--webhook-client-ca`): a client without one is refused
/// in the handshake, before anything it sends is read.
pub fn client_verifier(path: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let what = path.display().to_string();
    let pem = CertDir::read(path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok) {
        roots.add(cert).map_err(|e| TlsError::ClientCa {
            what: what.clone(),
            detail: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate { what });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::ClientCa {
            what,
            detail: e.to_string(),
        })
}

/// `tls.crt` and `tls.key` in `dir`, as cert-manager's Secret has them.
pub struct CertDir {
    pub dir: PathBuf,
}

impl CertDir {
    fn files(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("tls.crt"), self.dir.join("tls.key"))
    }

    fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    }

    /// The files' bytes, read now.
    pub fn contents(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        let (cert, key) = self.files();
        Ok((Self::read(&cert)?, Self::read(&key)?))
    }

    pub fn load(&self) -> Result<CertifiedKey, TlsError> {
        let (cert, key) = self.contents()?;
        certified_key(
            &cert,
            &key,
            &self.dir.join("tls.{crt,key}").display().to_string(),
        )
    }

    /// Re-reads the files every `interval` and swaps in a pair that changed
    /// and is valid; a pair that is not (a half-done copy) is logged and the
    /// served one kept, until the next read finds it whole. Each read that
    /// finds the files changed or unreadable is counted in `reloads`.
    pub async fn follow(
        self,
        certs: Arc<Swappable>,
        interval: Duration,
        reloads: Family<ReloadLabel, Counter>,
    ) {
        let count = |outcome| reloads.get_or_create(&ReloadLabel { outcome }).inc();
        let mut served = self.contents().ok();
        loop {
            tokio::time::sleep(interval).await;
            let Ok(now) = self.contents() else {
                tracing::warn!(dir = %self.dir.display(), "cannot read the webhook certificate files; serving the last good ones");
                count(Reload::Unreadable);
                continue;
            };
            if served.as_ref() == Some(&now) {
                continue;
            }
            match certified_key(&now.0, &now.1, &self.dir.display().to_string()) {
                Ok(key) => {
                    certs.swap(key);
                    tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded");
                    served = Some(now);
                    count(Reload::Reloaded);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the new webhook certificate files are not usable (yet); serving the last good ones");
                    count(Reload::Unusable);
                }
            }
        }
    }
}

/// When a request's time started as its client counts it (a request
/// extension): when its head was read, less, for the first request on a
/// connection, the time the connection's TLS handshake took from its
/// accept (waiting for a turn of [`Handshakes`] included), which the API
/// server's `timeoutSeconds` covers too. A connection opened ahead and
/// left idle is not charged for the idling.
#[derive(Clone, Copy, Debug)]
pub struct Arrived(pub Instant);

type Incoming = hyper::Request<hyper::body::Incoming>;
type Routed = TowerToHyperService<axum::Router>;

/// `router` as one connection's service: each request stamped [`Arrived`].
struct Stamped {
    router: Routed,
    /// How long the handshake took, until the first request takes it.
    handshake: Cell<Option<Duration>>,
}

impl hyper::service::Service<Incoming> for Stamped {
    type Response = <Routed as hyper::service::Service<Incoming>>::Response;
    type Error = <Routed as hyper::service::Service<Incoming>>::Error;
    type Future = <Routed as hyper::service::Service<Incoming>>::Future;

    fn call(&self, mut request: Incoming) -> Self::Future {
        let now = Instant::now();
        let handshake = self.handshake.take().unwrap_or_default();
        let arrived = now.checked_sub(handshake).unwrap_or(now);
        request.extensions_mut().insert(Arrived(arrived));
        self.router.call(request)
    }
}

/// Serves `router` over TLS on `listener`, one HTTP/1.1 connection per
/// accepted stream, kept open for the client's next requests. A failed
/// accept (file descriptors exhausted) backs off and is reported once
/// (`telemetry::accept`); the handshakes are paced by `handshakes`.
pub async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    router: axum::Router,
    handshakes: Arc<Handshakes>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let mut listener = Accepting::new(listener, Server::Webhook);
    loop {
        let (stream, _) = listener.next().await;
        let accepted = Instant::now();
        let acceptor = acceptor.clone();
        let handshakes = handshakes.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let Some(tls) = handshakes.accept(&acceptor, stream).await else {
                return;
            };
            let service = Stamped {
                router: TowerToHyperService::new(router),
                handshake: Cell::new(Some(accepted.elapsed())),
            };
            let io = hyper_util::rt::TokioIo::new(tls);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "a webhook connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests;
