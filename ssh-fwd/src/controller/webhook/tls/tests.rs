use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::controller::webhook::self_signed;

/// A TLS client of `addr` trusting `ca` (PEM), as the API server is.
fn connector(ca: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("CA PEM"))
        .expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
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
    tokio::spawn(serve(listener, server_config(Swappable::new(key)), router));

    // Two connections: the loop goes on accepting after the first.
    for _ in 0..2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        let mut tls = connector(&pem.ca)
            .connect(name, tcp)
            .await
            .expect("handshake");
        tls.write_all(b"GET /mutate HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut response = String::new();
        // A peer closing without close_notify ends the read with an error
        // after the whole response; what was read is what counts.
        let _ = tls.read_to_string(&mut response).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("admitted"), "{response}");
    }
}
