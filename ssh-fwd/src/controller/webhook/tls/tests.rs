use prometheus_client::metrics::counter::Counter;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::controller::webhook::self_signed;

/// A TLS client trusting `ca` (PEM), as the API server is.
fn client_config(ca: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("CA PEM"))
        .expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

fn connector(ca: &str) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(client_config(ca))
}

/// One GET /mutate over a new connection to `addr`: the response.
async fn get(addr: std::net::SocketAddr, ca: &str) -> String {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let mut tls = connector(ca).connect(name, tcp).await.expect("handshake");
    tls.write_all(b"GET /mutate HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut response = String::new();
    // A peer closing without close_notify ends the read with an error
    // after the whole response; what was read is what counts.
    let _ = tls.read_to_string(&mut response).await;
    response
}

#[tokio::test]
async fn the_webhook_answers_over_tls_through_the_shared_accept_loop() {
    let (pem, _, _) =
        self_signed::generate(&["localhost".to_owned()], time::OffsetDateTime::now_utc())
            .expect("certificates");
    let key = certified_key(pem.cert.as_bytes(), pem.key.as_bytes(), "test").expect("pair");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = axum::Router::new().route("/mutate", axum::routing::get(|| async { "admitted" }));
    let handshakes = Handshakes::new(Counter::default());
    tokio::spawn(serve(
        listener,
        server_config(Swappable::new(key), None),
        router,
        handshakes,
    ));

    // Two connections: the loop goes on accepting after the first.
    for _ in 0..2 {
        let response = get(addr, &pem.ca).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("admitted"), "{response}");
    }
}

#[tokio::test]
async fn clients_stalled_in_their_handshake_hold_no_turn_and_their_timeouts_are_counted() {
    let (pem, _, _) =
        self_signed::generate(&["localhost".to_owned()], time::OffsetDateTime::now_utc())
            .expect("certificates");
    let key = certified_key(pem.cert.as_bytes(), pem.key.as_bytes(), "test").expect("pair");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = axum::Router::new().route("/mutate", axum::routing::get(|| async { "admitted" }));
    // One turn at a time, so a stalled client holding it would block all.
    let timeout = Duration::from_secs(3);
    let timeouts = Counter::default();
    let handshakes = Handshakes::with(1, timeout, timeouts.clone());
    let config = server_config(Swappable::new(key), None);
    tokio::spawn(serve(listener, config, router, handshakes));
    // Three clients send their ClientHello and never answer the server's.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let name = ServerName::try_from("localhost").expect("name");
        let mut hello =
            rustls::ClientConnection::new(client_config(&pem.ca), name).expect("client");
        let mut bytes = Vec::new();
        hello.write_tls(&mut bytes).expect("ClientHello");
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(&bytes).await.expect("send");
        // The server's first flight: it took a turn for this handshake,
        // did its part, and now waits for the client.
        let mut flight = [0u8; 1024];
        let read = tokio::time::timeout(2 * timeout, tcp.read(&mut flight)).await;
        assert!(
            matches!(read, Ok(Ok(n)) if n > 0),
            "the server answered no ClientHello: {read:?}"
        );
        stalled.push(tcp);
    }
    let started = tokio::time::Instant::now();
    let response = get(addr, &pem.ca).await;
    assert!(response.ends_with("admitted"), "{response}");
    assert!(
        started.elapsed() < timeout - Duration::from_millis(500),
        "waited {:?} behind the stalled handshakes",
        started.elapsed()
    );
    // Each stalled handshake is given up once its time is over.
    while timeouts.get() < 3 {
        assert!(
            started.elapsed() < 2 * timeout,
            "{} timeouts",
            timeouts.get()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(timeouts.get(), 3);
}

#[test]
fn a_client_ca_file_that_is_missing_or_holds_no_certificate_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.crt");
    let error = client_verifier(&missing).expect_err("missing");
    assert!(error.to_string().contains("missing.crt"), "{error}");
    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate").expect("write");
    let error = client_verifier(&garbage).expect_err("garbage");
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    let (pem, _, _) =
        self_signed::generate(&["localhost".to_owned()], time::OffsetDateTime::now_utc())
            .expect("pair");
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, pem.ca).expect("write");
    assert!(client_verifier(&ca).is_ok());
}
