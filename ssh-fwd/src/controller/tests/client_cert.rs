//! `--webhook-client-ca`: the API server proves itself with a client
//! certificate (an AdmissionConfiguration's kubeConfigFile names it), and
//! a review from anyone without one signed by that CA is refused before
//! it is read.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};

use super::{
    webhook::{Connection, free_port, patched, reservation_count, review, told_port, write_pair},
    *,
};
use crate::controller::webhook::mutate::tests::job_pod;

/// A CA, and a client certificate it signed (PEM: CA, certificate, key).
fn client_pair(name: &str) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.clone().self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, name);
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = client.signed_by(&key, &issuer).unwrap();
    (ca_pem, cert.pem(), key.serialize_pem())
}

/// A TLS client trusting `server_ca`, presenting `client` (certificate
/// and key PEM) when given.
fn client_config(server_ca: &str, client: Option<(&str, &str)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server_ca.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// One review over a new connection with `config`: its answer, or why
/// there was none.
async fn post_with(port: u16, config: Arc<rustls::ClientConfig>) -> anyhow::Result<(u16, Value)> {
    let mut connection = Connection::open(port, "localhost", config).await?;
    connection.review(&review("u-1", &job_pod())).await
}

#[tokio::test]
async fn with_a_client_ca_only_reviews_from_a_client_it_signed_are_served() {
    let bed = Bed::new();
    let certs = tempfile::tempdir().unwrap();
    let server_ca = write_pair(certs.path());
    let (client_ca, cert, key) = client_pair("kube-apiserver");
    let (_, stranger_cert, stranger_key) = client_pair("a pod");
    let ca_file = certs.path().join("client-ca.crt");
    std::fs::write(&ca_file, &client_ca).unwrap();
    let port = free_port();
    let (addr, dir) = (
        format!("127.0.0.1:{port}"),
        certs.path().display().to_string(),
    );
    let ca_path = ca_file.display().to_string();
    let argv = [
        "--webhook-addr",
        &addr,
        "--webhook-cert-dir",
        &dir,
        "--webhook-client-ca",
        &ca_path,
        "--image",
        "ssh-fwd:test",
    ];
    let controller = bed.controller("a", &argv);
    let api_server = client_config(&server_ca, Some((&cert, &key)));
    let start = tokio::time::Instant::now();
    let (status, answer) = loop {
        match post_with(port, api_server.clone()).await {
            Ok(answered) => break answered,
            Err(e) => assert!(start.elapsed() < LIMIT, "never served: {e:#}"),
        }
        // The poll's pace; the deadline is the assertion above.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200);
    assert!(
        told_port(&patched(&answer, &job_pod())).is_some(),
        "{answer}"
    );
    assert_eq!(reservation_count(&bed), 1);
    // No certificate, or one of another CA: no answer, nothing reserved.
    for (who, config) in [
        ("no certificate", client_config(&server_ca, None)),
        (
            "another CA's certificate",
            client_config(&server_ca, Some((&stranger_cert, &stranger_key))),
        ),
    ] {
        let refused = post_with(port, config).await;
        assert!(
            refused.is_err(),
            "a client with {who} was served: {refused:?}"
        );
    }
    assert_eq!(reservation_count(&bed), 1);
    bed.assert_requests_listed();
    controller.abort();
}
