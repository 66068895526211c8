//! `/metrics`, `/healthz` and `/readyz` over HTTP/1.1, served by axum.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;

use super::{
    accept::{Accepting, Server},
    metrics::CONTENT_TYPE,
};

/// What the endpoints answer with.
#[derive(Clone)]
pub struct Endpoints {
    /// The `/metrics` body. It may block (it can read BPF maps), so it runs
    /// on the blocking pool, never on the runtime's workers.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// `Ok` once ready; else why not, for the `/readyz` body.
    pub ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

/// Binds `addr` (failing at once if it cannot) and serves in the background.
pub async fn serve(addr: SocketAddr, endpoints: Endpoints) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-addr {addr}; is the port in use?"))?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    let app = router(endpoints);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(Accepting::new(listener, Server::Metrics), app).await {
            tracing::error!(%addr, error = %e, "the metrics endpoint stopped");
        }
    });
    Ok(())
}

/// The routes, for [`serve`] and for tests.
pub fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics, /healthz or /readyz\n") })
        .with_state(endpoints)
}

async fn metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    match tokio::task::spawn_blocking(move || (endpoints.metrics)()).await {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            format!("rendering the metrics failed: {e}\n"),
        ),
    }
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    match (endpoints.ready)() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    #[tokio::test]
    async fn endpoints_answer_with_status_and_body() {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let endpoints = Endpoints {
            metrics: Arc::new(|| "up 1\n# EOF\n".to_owned()),
            ready: Arc::new(move || {
                if flag.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("waiting for the first reconcile".into())
                }
            }),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, router(endpoints)).await });
        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".into()));
        assert_eq!(
            get(addr, "/readyz").await,
            (503, "waiting for the first reconcile\n".into())
        );
        ready.store(true, Ordering::Relaxed);
        assert_eq!(get(addr, "/readyz").await, (200, "ready\n".into()));
        assert_eq!(get(addr, "/metrics").await, (200, "up 1\n# EOF\n".into()));
        assert_eq!(get(addr, "/nope").await.0, 404);
    }
}
