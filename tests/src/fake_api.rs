//! A Kubernetes API server for Services and EndpointSlices, just real enough
//! for kube-rs watchers: list with a resourceVersion, watch streamed as
//! chunked JSON lines from a resourceVersion, and a switch that cuts it off.
//! Its socket lives in a network namespace the test made, so only processes
//! in that namespace reach it.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    os::fd::AsRawFd as _,
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::broadcast,
};

use crate::NetNs;

#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
pub enum Kind {
    Service,
    EndpointSlice,
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<(Kind, String), Value>,
    /// Every change, for watches that start from an older resourceVersion.
    log: Vec<(u64, Kind, Value)>,
    cut: bool,
}

pub struct FakeApi {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<(u64, Kind, Value)>,
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FakeApi {
    /// Listens on 127.0.0.1 inside `ns`.
    pub fn start(ns: &NetNs) -> anyhow::Result<Self> {
        let path = ns.path();
        // A socket belongs to the network namespace of the thread that
        // created it; make it in a thread that joined `ns`.
        let listener = std::thread::spawn(move || -> anyhow::Result<std::net::TcpListener> {
            let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            // SAFETY: setns on this thread only, with a valid namespace fd.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error()).context("setns");
            }
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("listener thread panicked"))??;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let state = Arc::new(Mutex::new(State {
            rv: 1,
            ..State::default()
        }));
        let (events, _) = broadcast::channel(65_536);
        let (s, e) = (state.clone(), events.clone());
        runtime.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, e) = (s.clone(), e.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, s, e).await;
                });
            }
        });
        Ok(Self {
            state,
            events,
            addr,
            runtime: Some(runtime),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig pointing at this server.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        )
    }

    /// Creates or replaces an object (metadata.namespace/name identify it).
    pub fn apply(&self, kind: Kind, mut object: Value) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.rv += 1;
        let rv = s.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (kind, key_of(&object));
        let verb = if s.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.objects.insert(key, object.clone());
        let event = json!({"type": verb, "object": object});
        s.log.push((rv, kind, event.clone()));
        let _ = self.events.send((rv, kind, event));
    }

    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut object) = s.objects.remove(&(kind, format!("{namespace}/{name}"))) else {
            return;
        };
        s.rv += 1;
        let rv = s.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let event = json!({"type": "DELETED", "object": object});
        s.log.push((rv, kind, event.clone()));
        let _ = self.events.send((rv, kind, event));
    }

    /// Cuts the API off: open watches end and new requests get no answer
    /// (connections are closed at once).
    pub fn cut(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).cut = true;
        let _ = self.events.send((0, Kind::Service, Value::Null));
        let _ = self.events.send((0, Kind::EndpointSlice, Value::Null));
    }
}

impl FakeApi {
    /// Brings the API back after [`FakeApi::cut`].
    pub fn restore(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).cut = false;
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn key_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

async fn serve(
    mut stream: TcpStream,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<(u64, Kind, Value)>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut len = 0;
    // One request per connection is enough for the client's use here;
    // `Connection: close` tells it so.
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]).into_owned();
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let kind = if target.contains("/endpointslices") {
        Kind::EndpointSlice
    } else {
        Kind::Service
    };
    let query: BTreeMap<&str, &str> = target
        .split_once('?')
        .map(|(_, q)| q.split('&').filter_map(|kv| kv.split_once('=')).collect())
        .unwrap_or_default();
    if state.lock().unwrap_or_else(|p| p.into_inner()).cut {
        return Ok(()); // drop the connection: the API is unreachable
    }
    if query.get("watch") == Some(&"true") {
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut rx = events.subscribe();
        let backlog: Vec<(u64, Value)> = {
            let s = state.lock().unwrap_or_else(|p| p.into_inner());
            s.log
                .iter()
                .filter(|(rv, k, _)| *k == kind && *rv > from)
                .map(|(rv, _, e)| (*rv, e.clone()))
                .collect()
        };
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").await?;
        let mut sent = from;
        for (rv, event) in backlog {
            chunk(&mut stream, &event).await?;
            sent = rv;
        }
        while let Ok((rv, k, event)) = rx.recv().await {
            if event.is_null() && k == kind {
                return Ok(()); // cut
            }
            if k == kind && rv > sent {
                chunk(&mut stream, &event).await?;
                sent = rv;
            }
        }
        return Ok(());
    }
    let body = {
        let s = state.lock().unwrap_or_else(|p| p.into_inner());
        let items: Vec<&Value> = s
            .objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, v)| v)
            .collect();
        let (api_version, list_kind) = match kind {
            Kind::Service => ("v1", "ServiceList"),
            Kind::EndpointSlice => ("discovery.k8s.io/v1", "EndpointSliceList"),
        };
        json!({"apiVersion": api_version, "kind": list_kind, "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}).to_string()
    };
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

async fn chunk(stream: &mut TcpStream, event: &Value) -> std::io::Result<()> {
    let mut line = event.to_string();
    line.push('\n');
    stream
        .write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
        .await?;
    stream.flush().await
}
