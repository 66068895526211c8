//! A minimal HTTP/1.1 responder for `/metrics`, `/healthz` and `/readyz`:
//! enough for Prometheus and kubelet probes, one request per connection.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

/// Answers a path with a status line (`200 OK`) and a text body.
pub type Responder = Arc<dyn Fn(&str) -> (&'static str, String) + Send + Sync>;

/// Binds `addr` (failing at once if it cannot) and serves in the background.
pub async fn serve(addr: SocketAddr, respond: Responder) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-addr {addr}; is the port in use?"))?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let respond = respond.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    answer(stream, &respond),
                )
                .await;
            });
        }
    });
    Ok(())
}

async fn answer(mut stream: TcpStream, respond: &Responder) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = respond(path);
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
