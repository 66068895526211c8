//! What the caches keep of a reservation's Lease: its identity, creation
//! time (the grace clock, [`super::FirstSeen`]) and the annotations
//! [`super::read`] reads. Its label only served the server-side selection
//! and its spec only `kubectl`; a whole Lease with its annotation map was
//! 1.6 KB, for as many reservations as there are SSH pods.

use k8s_openapi::{api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::Time};

use crate::{
    k8s::kept::Kept,
    vocabulary::{NAMESPACE, POD_UID, PORT, QUARANTINE_CUT, RELEASED_AT, TOKEN},
};

/// The Lease annotations anything in the controller reads.
const ANNOTATIONS: &[&str] = &[PORT, TOKEN, NAMESPACE, POD_UID, RELEASED_AT, QUARANTINE_CUT];

#[derive(Clone, Debug, Default)]
pub struct LeaseView {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub creation_timestamp: Option<Time>,
    annotations: Kept,
}

impl LeaseView {
    /// The annotation `key`, one of those kept ([`ANNOTATIONS`]).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        debug_assert!(
            ANNOTATIONS.contains(&key),
            "Lease annotation {key} is not kept"
        );
        self.annotations.get(key)
    }
}

impl From<Lease> for LeaseView {
    fn from(lease: Lease) -> Self {
        let meta = lease.metadata;
        Self {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            annotations: Kept::pick(meta.annotations, ANNOTATIONS),
        }
    }
}

crate::k8s::kept::lookup_as!(LeaseView, Lease);
