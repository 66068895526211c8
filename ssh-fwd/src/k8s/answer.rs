//! The answer to a write whose returned object nobody reads. kube's `Api<K>`
//! decodes every answer into `K`; a pod's answer is the whole pod (spec,
//! status, managed fields: tens of KB in a real cluster), decoded field by
//! field for nothing after every patch. `Api<Unread<Pod>>` talks to the same
//! URLs and skips the body's content while parsing it; [`create`] does the
//! same for a create, which kube's `Api<K>` types by the object it sends.

use std::{borrow::Cow, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, api::PostParams};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

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

/// Creates `object` where `api` points, as `api.create` does, without
/// decoding the object the API server sends back. A refusal is the same
/// `kube::Error::Api` (409 AlreadyExists for a name in use).
pub async fn create<K>(api: &Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Serialize + Clone + DeserializeOwned + std::fmt::Debug,
{
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(api.resource_url())
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("create");
    let client = api.clone().into_client();
    client.request::<Unread<K>>(request).await.map(drop)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, Service};
    use kube::Resource as _;
    use ssh_fwd_tests::fake_api::{FakeApi, Kind};

    use super::*;

    #[tokio::test]
    async fn creates_the_object_and_reports_a_name_in_use_as_the_api_server_does() {
        let fake = FakeApi::start_on_loopback().unwrap();
        let client = crate::k8s::client::of_fake(&fake).await;
        let api: Api<Service> = Api::namespaced(client, "jobs");
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ssh-a", "namespace": "jobs", "labels": {"app": "a"}},
            "spec": {"ports": [{"port": 8123, "targetPort": 22}]}
        }))
        .unwrap();
        create(&api, &service).await.unwrap();
        let made = fake.get(Kind::Service, "jobs", "ssh-a").expect("created");
        assert_eq!(made["metadata"]["labels"]["app"], "a");
        assert_eq!(made["spec"]["ports"][0]["port"], 8123);
        match create(&api, &service).await {
            Err(kube::Error::Api(s)) => assert!(s.is_already_exists(), "{s:?}"),
            other => panic!("a second create of ssh-a: {other:?}"),
        }
    }

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
