//! A pod as the controller keeps it: its metadata and phase, all the plan
//! reads. The watch decodes only these: k8s-openapi's `Pod` holds room for
//! a whole spec and status inline even when they are empty (about 4.8 KB a
//! pod), which at thousands of pods was the controller's largest memory
//! cost.

use std::borrow::Cow;

use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use serde::{Deserialize, Serialize};

/// What the controller reads of a pod.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodView {
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodPhase>,
}

/// Of a pod's status, its phase.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodPhase {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

impl kube::Resource for PodView {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
