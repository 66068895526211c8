//! `--host-certs`: the host CA the controller holds, the certificate each
//! SSH pod gets, and the trust it publishes (the pure part is
//! `crate::host_certs`).
//!
//! At start, before anything else is written, every replica checks the
//! flags, reads the CA from `--host-ca-secret` or makes it (`ca_secret`),
//! reads the previous CA of a rotation, and publishes the known_hosts
//! lines (`publish`), again every minute. A CA that is not usable stops
//! the controller with what to do, and nothing is written.
//!
//! The leader issues: for a pod the webhook gave a host key Secret name
//! (the annotation `ssh-fwd.io/host-key-secret`) and whose port is
//! granted, a fresh key and its certificate go into that Secret, made in
//! the pod's namespace, owned by the pod (so it goes with it), and only
//! ever created: a Secret of that name that exists already (a pass the
//! cache had not caught up with, another leader, or the pod's own
//! namespace) is left as it is. The pod is then annotated
//! (`ssh-fwd.io/host-certificate`) so later passes skip it.
//!
//! Who can write what: the annotation naming the Secret is the pod
//! creator's to change; the controller creates only names with
//! [`vocabulary::HOST_KEY_SECRET_PREFIX`], in the pod's own namespace,
//! whose editors may read that Secret anyway. Nothing read from the
//! pod or the Secret is signed: the key is made here.

mod args;
mod ca_secret;
mod publish;

use std::{sync::Arc, time::SystemTime};

use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Pod, Secret},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

pub use args::HostCaArgs;
pub use publish::Trust;

use super::{
    api_error::{self, Grant},
    pod::PodRef,
};
use crate::{
    host_certs::{CERT_FILE, Ca, KEY_FILE, Subject, Validity, issue::issue, trust::Previous},
    k8s::answer::Unread,
    vocabulary,
};

/// How often the published trust is written again.
const REPUBLISH: std::time::Duration = std::time::Duration::from_secs(60);

/// What the leader issues with.
pub struct HostCerts {
    ca: Ca,
    validity: Validity,
    /// The SSH host name, then each SSH IP.
    principals: Vec<String>,
    pub trust: Trust,
}

impl std::fmt::Debug for HostCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCerts")
            .field("ca", &self.ca)
            .field("principals", &self.principals)
            .finish_non_exhaustive()
    }
}

/// Whether `name` is one the controller may create a host key Secret of:
/// the prefix, then what a Secret name takes.
pub fn is_ours(name: &str) -> bool {
    name.strip_prefix(vocabulary::HOST_KEY_SECRET_PREFIX)
        .is_some_and(|rest| {
            !rest.is_empty()
                && name.len() <= 253
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// The CA, its flags checked, and the trust published; the task that
/// publishes it again every minute. `host` is the published host name,
/// `ips` the SSH IPs.
pub async fn start(
    args: &HostCaArgs,
    client: &kube::Client,
    namespace: &str,
    host: &str,
    ips: impl IntoIterator<Item = std::net::IpAddr>,
) -> anyhow::Result<(Arc<HostCerts>, tokio::task::JoinHandle<()>)> {
    let validity = args.validity()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let ca = ca_secret::ensure(&secrets, namespace, &args.host_ca_secret).await?;
    let previous = match (&args.host_ca_previous_secret, args.host_ca_previous_until) {
        (Some(name), Some(until)) => {
            let old = ca_secret::existing(&secrets, namespace, name).await?;
            Some(Previous {
                public: old.public_line(),
                until,
            })
        }
        _ => None,
    };
    let mut principals = vec![host.to_owned()];
    principals.extend(
        ips.into_iter()
            .map(|ip| ip.to_string())
            .filter(|p| p != host),
    );
    let trust = Trust {
        host: host.to_owned(),
        current: ca.public_line(),
        previous,
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = args.host_ca_config_map.clone();
    publish::publish(&config_maps, &name, &trust, SystemTime::now()).await?;
    let certs = Arc::new(HostCerts {
        ca,
        validity,
        principals,
        trust: trust.clone(),
    });
    let follow = tokio::spawn(async move {
        loop {
            tokio::time::sleep(REPUBLISH).await;
            if let Err(e) = publish::publish(&config_maps, &name, &trust, SystemTime::now()).await {
                tracing::warn!(error = %format!("{e:#}"), "publishing the host CA failed; retrying in a minute");
            }
        }
    });
    Ok((certs, follow))
}

impl HostCerts {
    /// Issues `pod`'s host key and certificate into the Secret `secret` of
    /// its namespace (created only if absent), then marks the pod.
    pub async fn issue(
        &self,
        client: &kube::Client,
        pod: &PodRef,
        secret: &str,
        port: u16,
        deadline: Option<super::pod::Deadline>,
    ) -> anyhow::Result<()> {
        let at = format!("{}/{}", pod.namespace, pod.name);
        if !is_ours(secret) {
            tracing::warn!(pod = %at, secret, "the pod's {} names no Secret of ours; no host certificate issued (recreate the pod)", vocabulary::HOST_KEY_SECRET);
            return Ok(());
        }
        let subject = Subject {
            principals: self.principals.clone(),
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            uid: pod.uid.clone(),
            port,
        };
        let now = SystemTime::now();
        let expected_end = deadline.map(|d| d.end(now));
        let issued = issue(&self.ca, &subject, now, expected_end, self.validity)?;
        let object = Secret {
            metadata: ObjectMeta {
                name: Some(secret.to_owned()),
                namespace: Some(pod.namespace.clone()),
                labels: Some(
                    [(
                        vocabulary::MANAGED_BY_LABEL.to_owned(),
                        vocabulary::CONTROLLER.to_owned(),
                    )]
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            type_: Some(vocabulary::HOST_KEY_SECRET_TYPE.into()),
            data: Some(
                [
                    (
                        KEY_FILE.to_owned(),
                        ByteString(issued.key.as_bytes().to_vec()),
                    ),
                    (
                        CERT_FILE.to_owned(),
                        ByteString(format!("{}\n", issued.certificate.trim_end()).into_bytes()),
                    ),
                ]
                .into(),
            ),
            ..Secret::default()
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &pod.namespace);
        let note = match crate::k8s::answer::create(&secrets, &object).await {
            Ok(_) => {
                let until = humantime::format_rfc3339_seconds(issued.valid_before);
                tracing::info!(pod = %at, secret, serial = issued.serial, %until, "issued the pod's host certificate");
                format!("serial {} until {until}, in Secret {secret}", issued.serial)
            }
            Err(kube::Error::Api(s)) if s.is_already_exists() => format!("in Secret {secret}"),
            Err(e) => {
                let what = format!("creating the host key Secret {}/{secret}", pod.namespace);
                return Err(api_error::context(e, what, Grant::Cluster));
            }
        };
        let pods: Api<Unread<Pod>> = Api::namespaced(client.clone(), &pod.namespace);
        // The uid makes the patch fail on a namesake made since.
        let patch = json!({"metadata": {"uid": pod.uid,
                                        "annotations": {vocabulary::HOST_CERTIFICATE: note}}});
        pods.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| api_error::context(e, format!("patching pod {at}"), Grant::Cluster))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_our_making_are_created() {
        assert!(is_ours("ssh-fwd-host-key-abc123"));
        for not in [
            "ssh-fwd-host-key-",
            "db-password",
            "ssh-fwd-host-ca",
            "ssh-fwd-host-key-ABC",
            "ssh-fwd-host-key-a.b",
        ] {
            assert!(!is_ours(not), "{not}");
        }
    }
}
