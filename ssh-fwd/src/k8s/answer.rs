//! The answer to a write whose returned object nobody reads. kube's `Api<K>`
//! decodes every answer into `K`; a pod's answer is the whole pod (spec,
//! status, managed fields: tens of KB in a real cluster), decoded field by
//! field for nothing after every patch. `Api<Unread<Pod>>` talks to the same
//! URLs and skips the body's content while parsing it.

use std::{borrow::Cow, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// An answer of kind `K`, not decoded: its metadata is always empty.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Unread<K> {
    #[serde(skip)]
    metadata: ObjectMeta,
    #[serde(skip)]
    kind: PhantomData<K>,
}

impl<K: kube::Resource<DynamicType = ()>> kube::Resource for Unread<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Resource as _;

    use super::*;

    #[test]
    fn names_the_same_resource_and_reads_nothing_of_the_answer() {
        assert_eq!(
            Unread::<Pod>::url_path(&(), Some("jobs")),
            Pod::url_path(&(), Some("jobs"))
        );
        let answer: Unread<Pod> = serde_json::from_str(
            r#"{"kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}"#,
        )
        .unwrap();
        assert_eq!(answer.metadata, ObjectMeta::default());
    }
}
