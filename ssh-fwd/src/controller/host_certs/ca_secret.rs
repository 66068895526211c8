//! The host CA's Secret: read, or made by the first replica when absent.
//! Two replicas starting together both find none and both create; the API
//! server takes the first create and answers the second 409
//! AlreadyExists, whose replica then reads the winner's key. A Secret that
//! exists is never written: an operator's own key, or one that is not
//! usable, is left as it is (the latter refused with what to do).

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, api::PostParams};

use crate::{
    controller::api_error::{self, Grant},
    host_certs::Ca,
    vocabulary,
};

fn what(namespace: &str, name: &str) -> String {
    format!(
        "Secret {namespace}/{name}, key {}",
        vocabulary::HOST_CA_SECRET_KEY
    )
}

/// The CA in `secret`: `Ok(None)` when it has none yet.
fn read(found: &Secret, namespace: &str, name: &str) -> anyhow::Result<Ca> {
    let key = (found.data.as_ref())
        .and_then(|d| d.get(vocabulary::HOST_CA_SECRET_KEY))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} is missing: put the host CA's private key there (`ssh-keygen -t ed25519 -N '' -f host_ca`, then kubectl -n {namespace} create secret generic {name} --from-file={}=host_ca), or delete the Secret and the controller makes a new CA",
                what(namespace, name),
                vocabulary::HOST_CA_SECRET_KEY
            )
        })?;
    Ok(Ca::from_openssh(&key.0, &what(namespace, name))?)
}

fn secret_object(name: &str, ca: &Ca) -> anyhow::Result<Secret> {
    let private = ca.to_openssh()?;
    let public = ca.public_line() + "\n";
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [(
                    vocabulary::MANAGED_BY_LABEL.to_owned(),
                    vocabulary::CONTROLLER.to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            [
                (
                    vocabulary::HOST_CA_SECRET_KEY.to_owned(),
                    ByteString(private.as_bytes().to_vec()),
                ),
                (
                    format!("{}.pub", vocabulary::HOST_CA_SECRET_KEY),
                    ByteString(public.into_bytes()),
                ),
            ]
            .into(),
        ),
        ..Secret::default()
    })
}

/// The CA of `name`, made first if there is none.
pub async fn ensure(secrets: &Api<Secret>, namespace: &str, name: &str) -> anyhow::Result<Ca> {
    let doing = |verb: &str| format!("{verb} the host CA Secret {namespace}/{name}");
    let found = secrets
        .get_opt(name)
        .await
        .map_err(|e| api_error::context(e, doing("reading"), Grant::Lease))?;
    if let Some(found) = found {
        return read(&found, namespace, name);
    }
    let ca = Ca::generate("ssh-fwd host CA")?;
    match secrets
        .create(&PostParams::default(), &secret_object(name, &ca)?)
        .await
    {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), ca = %ca.public_line(), "created the host CA");
            Ok(ca)
        }
        // Another replica made it first: use that one.
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            let found = secrets
                .get(name)
                .await
                .map_err(|e| api_error::context(e, doing("reading"), Grant::Lease))?;
            read(&found, namespace, name)
        }
        Err(e) => Err(api_error::context(e, doing("creating"), Grant::Lease)),
    }
}

/// The CA of `name`, which must exist (the previous CA of a rotation).
pub async fn existing(secrets: &Api<Secret>, namespace: &str, name: &str) -> anyhow::Result<Ca> {
    let found = secrets.get_opt(name).await.map_err(|e| {
        api_error::context(
            e,
            format!("reading the previous host CA Secret {namespace}/{name}"),
            Grant::Lease,
        )
    })?;
    let found = found.ok_or_else(|| {
        anyhow::anyhow!(
            "--host-ca-previous-secret {name}: no Secret {namespace}/{name}; name the Secret of the CA being replaced, or leave both --host-ca-previous-* flags out"
        )
    })?;
    read(&found, namespace, name)
}
