//! `--webhook-self-signed`: the controller makes its own CA and serving
//! certificate (rcgen), keeps them in a Secret in its namespace (so every
//! replica serves the same one, and a restart keeps it), and writes the CA
//! into the MutatingWebhookConfiguration's `caBundle`, which is how the API
//! server learns to trust it. The first replica to create the Secret wins
//! (create-if-absent); the others read it. The serving certificate is
//! renewed with the same CA when under [`RENEW_BEFORE`] is left.
//!
//! The CA joins what `caBundle` holds instead of replacing it, so a CA
//! someone else put there stays trusted; and a configuration whose
//! `caBundle` cert-manager's cainjector keeps (the annotations of
//! [`CA_INJECTOR_ANNOTATIONS`], as in `deploy/overlays/cert-manager`) is
//! left alone, so replicas of the self-signed mode still running during a
//! rollout to cert-manager do not fight cainjector over it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::{admissionregistration::v1::MutatingWebhookConfiguration, core::v1::Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, api::PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, pem::PemObject as _};
use time::OffsetDateTime;

use super::tls::{Swappable, certified_key};
use crate::controller::api_error::{self, Grant};
use crate::vocabulary;

const CA_NAME: &str = "ssh-fwd webhook CA";
const CA_DAYS: i64 = 3650;
const SERVING_DAYS: i64 = 365;
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);
/// The annotations by which cert-manager's cainjector writes a
/// configuration's `caBundle` itself.
pub const CA_INJECTOR_ANNOTATIONS: [&str; 3] = [
    "cert-manager.io/inject-ca-from",
    "cert-manager.io/inject-ca-from-secret",
    "cert-manager.io/inject-apiserver-ca",
];

/// Where the pair lives and who must trust it.
pub struct SelfSigned {
    pub secrets: Api<Secret>,
    pub configurations: Api<MutatingWebhookConfiguration>,
    pub secret: String,
    pub configuration: String,
    /// The names the API server uses to reach the webhook Service.
    pub dns_names: Vec<String>,
    /// Whether the configuration was last found in cainjector's hands
    /// (said once, not every round).
    pub injected_by_cert_manager: AtomicBool,
}

/// `bundle` (PEM certificates) with `ca` added, or `None` when it holds
/// `ca` already. The certificates are compared as DER, so a bundle that
/// differs only in line breaks counts as holding it. A bundle without a
/// certificate (empty, or not PEM, which the API server could not use
/// either) is replaced.
fn with_ca(bundle: Option<&[u8]>, ca: &str) -> Option<Vec<u8>> {
    let bundle = bundle.unwrap_or_default();
    let ours: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(ca.as_bytes())
        .filter_map(Result::ok)
        .collect();
    let held: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(bundle)
        .filter_map(Result::ok)
        .collect();
    if !ours.is_empty() && ours.iter().all(|c| held.contains(c)) {
        return None;
    }
    if held.is_empty() {
        return Some(ca.as_bytes().to_vec());
    }
    let mut merged = bundle.to_vec();
    if !merged.ends_with(b"\n") {
        merged.push(b'\n');
    }
    merged.extend_from_slice(ca.as_bytes());
    Some(merged)
}

/// The PEM texts of a pair and its CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

fn days(n: i64) -> time::Duration {
    time::Duration::days(n)
}

fn ca_params(now: OffsetDateTime) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + days(CA_DAYS);
    Ok(params)
}

/// A serving certificate for `dns_names` signed by the CA key; returns the
/// certificate, its key and its expiry.
fn serving(
    dns_names: &[String],
    ca_key: &KeyPair,
    now: OffsetDateTime,
) -> Result<(String, String, OffsetDateTime), rcgen::Error> {
    let issuer = Issuer::new(ca_params(now)?, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    if let Some(first) = dns_names.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.as_str());
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + days(SERVING_DAYS);
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), params.not_after))
}

/// A new CA and a serving certificate it signed, as Secret data.
pub fn generate(
    dns_names: &[String],
    now: OffsetDateTime,
) -> Result<(Pem, String, OffsetDateTime), rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let ca = ca_params(now)?.self_signed(&ca_key)?;
    let (cert, key, not_after) = serving(dns_names, &ca_key, now)?;
    let pem = Pem {
        cert,
        key,
        ca: ca.pem(),
    };
    Ok((pem, ca_key.serialize_pem(), not_after))
}

fn secret_object(name: &str, pem: &Pem, ca_key: &str, not_after: OffsetDateTime) -> Secret {
    let data = [
        ("tls.crt", &pem.cert),
        ("tls.key", &pem.key),
        ("ca.crt", &pem.ca),
        ("ca.key", &ca_key.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(
                [(
                    vocabulary::NOT_AFTER.to_owned(),
                    not_after.unix_timestamp().to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn field(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn pem_of(secret: &Secret) -> Option<Pem> {
    Some(Pem {
        cert: field(secret, "tls.crt")?,
        key: field(secret, "tls.key")?,
        ca: field(secret, "ca.crt")?,
    })
}

fn expires(secret: &Secret) -> Option<OffsetDateTime> {
    let seconds: i64 = secret
        .metadata
        .annotations
        .as_ref()?
        .get(vocabulary::NOT_AFTER)?
        .parse()
        .ok()?;
    OffsetDateTime::from_unix_timestamp(seconds).ok()
}

impl SelfSigned {
    /// The pair to serve: the Secret's, made first if there is none,
    /// renewed first if it expires soon.
    pub async fn ensure(&self) -> anyhow::Result<Pem> {
        let now = OffsetDateTime::now_utc();
        let what = |verb: &str| format!("{verb} the webhook certificate Secret {}", self.secret);
        let found = self
            .secrets
            .get_opt(&self.secret)
            .await
            .map_err(|e| api_error::context(e, what("reading"), Grant::Lease))?;
        let Some(current) = found else {
            let (pem, ca_key, not_after) = generate(&self.dns_names, now)?;
            let secret = secret_object(&self.secret, &pem, &ca_key, not_after);
            return match self.secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %self.secret, "created the webhook CA and serving certificate");
                    Ok(pem)
                }
                // Another replica made it first: serve that one.
                Err(kube::Error::Api(s)) if s.is_already_exists() => Box::pin(self.ensure()).await,
                Err(e) => Err(api_error::context(e, what("creating"), Grant::Lease)),
            };
        };
        let pem = pem_of(&current).ok_or_else(|| anyhow::anyhow!("the Secret {} lacks tls.crt, tls.key or ca.crt; delete it and the controller makes a new one", self.secret))?;
        let due = expires(&current)
            .is_none_or(|at| at - now < time::Duration::try_from(RENEW_BEFORE).unwrap_or(days(30)));
        if !due {
            return Ok(pem);
        }
        self.renew(current, pem, now).await
    }

    /// A new serving certificate from the same CA, written over the old one
    /// only if nobody changed the Secret since it was read.
    async fn renew(
        &self,
        mut current: Secret,
        pem: Pem,
        now: OffsetDateTime,
    ) -> anyhow::Result<Pem> {
        let ca_key = field(&current, "ca.key").ok_or_else(|| {
            anyhow::anyhow!(
                "the Secret {} lacks ca.key; delete it and the controller makes a new CA",
                self.secret
            )
        })?;
        let ca_key = KeyPair::from_pem(&ca_key)?;
        let (cert, key, not_after) = serving(&self.dns_names, &ca_key, now)?;
        let renewed = Pem {
            cert,
            key,
            ca: pem.ca.clone(),
        };
        let fresh = secret_object(&self.secret, &renewed, &ca_key.serialize_pem(), not_after);
        current.data = fresh.data;
        current.metadata.annotations = fresh.metadata.annotations;
        match self
            .secrets
            .replace(&self.secret, &PostParams::default(), &current)
            .await
        {
            Ok(_) => {
                tracing::info!(secret = %self.secret, "renewed the webhook serving certificate");
                Ok(renewed)
            }
            // Renewed by another replica meanwhile: serve the old one until
            // the next refresh reads theirs.
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(pem),
            Err(e) => Err(api_error::context(
                e,
                format!("renewing the webhook certificate Secret {}", self.secret),
                Grant::Lease,
            )),
        }
    }

    /// Adds `ca` to every webhook's caBundle of the configuration that
    /// lacks it, unless cert-manager injects it. A missing configuration is
    /// reported, not fatal: the webhook cannot be called before it exists
    /// anyway.
    pub async fn inject_ca(&self, ca: &str) -> anyhow::Result<()> {
        let what = format!(
            "writing the CA into MutatingWebhookConfiguration {}",
            self.configuration
        );
        let Some(mut config) = self
            .configurations
            .get_opt(&self.configuration)
            .await
            .map_err(|e| api_error::context(e, what.clone(), Grant::Cluster))?
        else {
            tracing::warn!(configuration = %self.configuration, "no MutatingWebhookConfiguration of this name; apply deploy/base/webhook.yaml, or set --webhook-configuration");
            return Ok(());
        };
        let annotations = config.metadata.annotations.as_ref();
        let injector = CA_INJECTOR_ANNOTATIONS
            .into_iter()
            .find(|a| annotations.is_some_and(|all| all.contains_key(*a)));
        let was = self
            .injected_by_cert_manager
            .swap(injector.is_some(), Ordering::Relaxed);
        if let Some(annotation) = injector {
            if !was {
                tracing::info!(configuration = %self.configuration, annotation, "the MutatingWebhookConfiguration's caBundle is cert-manager's (cainjector): leaving it alone. A rollout to deploy/overlays/cert-manager is under way, or this replica should run with --webhook-cert-dir instead of --webhook-self-signed");
            }
            return Ok(());
        }
        let mut changed = false;
        for webhook in config.webhooks.iter_mut().flatten() {
            let held = webhook.client_config.ca_bundle.as_ref();
            if let Some(merged) = with_ca(held.map(|b| b.0.as_slice()), ca) {
                webhook.client_config.ca_bundle = Some(ByteString(merged));
                changed = true;
            }
        }
        if changed {
            self.configurations
                .replace(&self.configuration, &PostParams::default(), &config)
                .await
                .map_err(|e| api_error::context(e, what, Grant::Cluster))?;
            tracing::info!(configuration = %self.configuration, "wrote the webhook CA into caBundle");
        }
        Ok(())
    }

    /// Every `interval`: reads the Secret (renewing when due), swaps in a
    /// pair that changed, and puts the CA back into caBundle if it was
    /// changed. Failures are logged and retried at the next round.
    pub async fn follow(self, certs: Arc<Swappable>, mut served: Pem, interval: Duration) {
        loop {
            tokio::time::sleep(interval).await;
            let pem = match self.ensure().await {
                Ok(pem) => pem,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "refreshing the webhook certificate failed; retrying");
                    continue;
                }
            };
            if pem != served {
                match certified_key(
                    pem.cert.as_bytes(),
                    pem.key.as_bytes(),
                    &format!("Secret {}", self.secret),
                ) {
                    Ok(key) => {
                        certs.swap(key);
                        tracing::info!(secret = %self.secret, "webhook certificate reloaded from its Secret");
                        served = pem.clone();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the webhook certificate Secret is not usable; serving the last good pair")
                    }
                }
            }
            if let Err(e) = self.inject_ca(&pem.ca).await {
                tracing::warn!(error = %format!("{e:#}"), "writing caBundle failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_pair_is_one_rustls_accepts_and_is_signed_by_its_ca() {
        let names = vec!["ssh-fwd-webhook.ssh-fwd.svc".to_owned()];
        let (pem, _, not_after) = generate(&names, OffsetDateTime::now_utc()).unwrap();
        certified_key(pem.cert.as_bytes(), pem.key.as_bytes(), "test").unwrap();
        assert!(not_after - OffsetDateTime::now_utc() > days(360));
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(pem.ca.as_bytes()).unwrap();
        roots.add(ca).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(pem.cert.as_bytes()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("ssh-fwd-webhook.ssh-fwd.svc").unwrap();
        use rustls::client::danger::ServerCertVerifier as _;
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
    }

    #[test]
    fn our_ca_is_added_to_a_bundle_once_and_other_cas_are_kept() {
        let ca = |name: &str| {
            let names = [name.to_owned()];
            generate(&names, OffsetDateTime::now_utc()).unwrap().0.ca
        };
        let (ours, theirs) = (ca("a.example"), ca("b.example"));
        assert_eq!(with_ca(None, &ours).unwrap(), ours.as_bytes());
        assert_eq!(with_ca(Some(b""), &ours).unwrap(), ours.as_bytes());
        assert_eq!(with_ca(Some(b"garbage"), &ours).unwrap(), ours.as_bytes());
        let both = with_ca(Some(theirs.trim_end().as_bytes()), &ours).unwrap();
        assert_eq!(both, format!("{}\n{ours}", theirs.trim_end()).as_bytes());
        assert_eq!(with_ca(Some(&both), &ours), None, "held already");
        // Held with other line breaks: the same certificate.
        let crlf = both.iter().flat_map(|&b| {
            if b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![b]
            }
        });
        assert_eq!(with_ca(Some(&crlf.collect::<Vec<u8>>()), &ours), None);
    }
}
