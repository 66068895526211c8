//! `--selector`, checked by the API server itself at start-up: the agents
//! and the controller watch with it, and a typo should stop them with a
//! message instead of failing every watch retry.

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client, api::ListParams};

/// The API server refused `--selector`.
#[derive(Debug, thiserror::Error)]
#[error(
    "--selector `{selector}` was refused by the API server ({message}); write it as kubectl -l \
     takes it, e.g. service.kubernetes.io/service-proxy-name=ssh-fwd or \
     'app in (a,b),!skip'"
)]
pub struct BadSelector {
    selector: String,
    message: String,
}

/// Asks the API server to parse `selector` (one list of at most one
/// Service). Anything but a 400 Bad Request (the API is down, RBAC) is left
/// to the watchers, which retry: the maps must keep forwarding meanwhile.
pub async fn check(client: &Client, selector: &str) -> Result<(), BadSelector> {
    let services: Api<Service> = Api::all(client.clone());
    match services
        .list_metadata(&ListParams::default().labels(selector).limit(1))
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 400 => Err(BadSelector {
            selector: selector.to_owned(),
            message: status.message.clone(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use ssh_fwd_tests::fake_api::FakeApi;

    use super::*;

    async fn client(api: &FakeApi, dir: &tempfile::TempDir) -> Client {
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, api.kubeconfig()).unwrap();
        crate::k8s::client::connect(Some(&path)).await.unwrap()
    }

    #[tokio::test]
    async fn a_selector_the_api_server_refuses_stops_start_up_with_its_reason() {
        let api = FakeApi::start_on_loopback().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, &dir).await;
        for good in [
            "service.kubernetes.io/service-proxy-name=ssh-fwd",
            "ucloud.dk/rank in (0), !skip",
            "",
        ] {
            assert!(check(&client, good).await.is_ok(), "{good:?}");
        }
        for (bad, reason) in [
            ("app=a b", "found 'b'"),
            ("app in a", "expected: '('"),
            ("a+b=c", "name part"),
        ] {
            let e = check(&client, bad).await.unwrap_err().to_string();
            assert!(e.contains(reason) && e.contains(bad), "{bad:?}: {e}");
        }
    }
}
