//! The userspace side of the benchmark: the pod's echo server and the
//! node's proxy, the shape of frp or an Envoy CONNECT tunnel - every byte is
//! read into the process and written out again.

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")
}

/// Runs until killed (the bed owns the process).
pub fn echo(listen: SocketAddr) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        loop {
            let (mut conn, _) = listener.accept().await?;
            tokio::spawn(async move {
                let _ = conn.set_nodelay(true);
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}

/// One forwarder per route; runs until killed.
pub fn proxy(routes: &[(SocketAddr, SocketAddr)]) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for &(listen, target) in routes {
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            tasks.spawn(forward_all(listener, target));
        }
        match tasks.join_next().await {
            Some(result) => result.context("proxy task")?,
            None => Ok(()),
        }
    })
}

async fn forward_all(listener: TcpListener, target: SocketAddr) -> anyhow::Result<()> {
    loop {
        let (mut inbound, _) = listener.accept().await?;
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}
