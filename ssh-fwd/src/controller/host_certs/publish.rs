//! The published trust: the ConfigMap `--host-ca-config-map` in the
//! controller's namespace, with the known_hosts lines (the current CA's,
//! and during a rotation the previous one's until its date), the host
//! they are for, and the current CA's public key. deploy/ lets every
//! authenticated user read it, and only the controller write it.
//!
//! Every replica writes it at start and again every minute (a rotation's
//! date passes while the controller runs); a write is made only when the
//! content differs, and an update only over the version read, so two
//! replicas never undo each other.

use std::{collections::BTreeMap, time::SystemTime};

use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{Api, api::PostParams};

use crate::{
    controller::api_error::{self, Grant},
    host_certs::trust::{self, Previous},
    vocabulary,
};

/// What is published.
#[derive(Clone, Debug)]
pub struct Trust {
    pub host: String,
    pub current: String,
    pub previous: Option<Previous>,
}

impl Trust {
    /// The ConfigMap's data at `now`.
    pub fn data(&self, now: SystemTime) -> BTreeMap<String, String> {
        let lines = trust::known_hosts(&self.host, &self.current, self.previous.as_ref(), now);
        [
            (trust::KNOWN_HOSTS_KEY.to_owned(), lines),
            (trust::HOST_KEY.to_owned(), self.host.clone()),
            (trust::CA_KEY.to_owned(), self.current.clone() + "\n"),
        ]
        .into()
    }

    /// The known_hosts line for the SSHReady event: the current CA's.
    pub fn line(&self) -> String {
        trust::line(&self.host, &self.current)
    }
}

/// Writes `trust` as of `now` into the ConfigMap `name`, made if absent.
pub async fn publish(
    api: &Api<ConfigMap>,
    name: &str,
    trust: &Trust,
    now: SystemTime,
) -> anyhow::Result<()> {
    let data = trust.data(now);
    let doing = |verb: &str| format!("{verb} the host CA ConfigMap {name}");
    let found = api
        .get_opt(name)
        .await
        .map_err(|e| api_error::context(e, doing("reading"), Grant::Lease))?;
    let Some(mut found) = found else {
        let made = ConfigMap {
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
            data: Some(data),
            ..ConfigMap::default()
        };
        return match api.create(&PostParams::default(), &made).await {
            Ok(_) => {
                tracing::info!(config_map = name, "published the host CA");
                Ok(())
            }
            // Another replica's, with the same content: the next round
            // checks it.
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(api_error::context(e, doing("creating"), Grant::Lease)),
        };
    };
    if found.data.as_ref() == Some(&data) {
        return Ok(());
    }
    found.data = Some(data);
    match api.replace(name, &PostParams::default(), &found).await {
        Ok(_) => {
            tracing::info!(config_map = name, "published the host CA");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(()),
        Err(e) => Err(api_error::context(e, doing("updating"), Grant::Lease)),
    }
}
