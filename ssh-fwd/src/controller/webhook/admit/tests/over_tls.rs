//! The admission deadline as the API server sees it: its `timeoutSeconds`
//! covers the whole call, from the connection to the answer, so the
//! webhook's clock starts when the connection is accepted, not once its
//! TLS handshake and body are done, and a shorter `?timeout=` is honoured.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::controller::webhook::{router, self_signed, tls};
use crate::vocabulary;

/// Connects to `addr` as the API server would (trusting `ca`) and POSTs
/// `body` to `path`; the answer's JSON.
async fn call(addr: std::net::SocketAddr, ca: &str, path: &str, body: &Value) -> Value {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // A peer closing without close_notify ends the read with an error
    // after the whole response.
    let _ = tls.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    let (_, json) = response.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(json).unwrap()
}

#[tokio::test]
async fn a_shorter_api_server_timeout_shortens_the_deadline_less_a_margin_to_answer_in() {
    let api = FakeApi::start_on_loopback().unwrap();
    let admitter = admitter(&api, 9000..=9099, Duration::from_secs(4)).await;
    let secs = Duration::from_secs_f64;
    assert_eq!(admitter.budget(None), secs(4.0));
    assert_eq!(admitter.budget(Some(secs(5.0))), secs(4.0));
    assert_eq!(admitter.budget(Some(secs(30.0))), secs(4.0));
    assert_eq!(admitter.budget(Some(secs(3.0))), secs(2.4));
    assert_eq!(admitter.budget(Some(secs(1.0))), secs(0.5));
    assert_eq!(admitter.budget(Some(secs(0.2))), secs(0.0));
}

#[tokio::test]
async fn the_deadline_counts_from_the_accept_and_a_shorter_api_server_timeout_is_kept() {
    let api = FakeApi::start_on_loopback().unwrap();
    api.delay(Kind::Lease, "create", Duration::from_secs(10));
    let admitter = Arc::new(admitter(&api, 9000..=9099, Duration::from_secs(4)).await);
    let (pem, _, _) =
        self_signed::generate(&["localhost".to_owned()], time::OffsetDateTime::now_utc()).unwrap();
    let key = tls::certified_key(pem.cert.as_bytes(), pem.key.as_bytes(), "test").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // One handshake at a time, and another connection's holds the turn
    // for 1.5 s: ours waits for it.
    let handshakes = tls::Handshakes::with(1, Duration::from_secs(10), Counter::default());
    let turn = handshakes.hold_turn().await;
    let config = tls::server_config(tls::Swappable::new(key), None);
    tokio::spawn(tls::serve(listener, config, router(admitter), handshakes));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(turn);
    });
    let pod = job_pod();
    let connected = Instant::now();
    // The API server's timeoutSeconds is 3 here.
    let answer = call(
        addr,
        &pem.ca,
        "/mutate?timeout=3s",
        &review_of("u-1", &pod, false),
    )
    .await;
    let took = connected.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "answered {took:?} after the connection: the API server gave up at 3 s"
    );
    let (response, patched) = outcome(&answer, &pod);
    assert_eq!(response["allowed"], true);
    let why = patched["metadata"]["annotations"][vocabulary::ADMISSION]
        .as_str()
        .unwrap();
    assert!(why.contains("did not answer within"), "{why}");
}
