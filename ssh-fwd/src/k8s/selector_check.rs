//! `--selector`, checked by the API server itself at start-up: the agents
//! and the controller watch with it, and a typo should stop them with a
//! message instead of failing every watch retry. The first call to the API
//! server, so it also finds one that does not answer.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client, api::ListParams};

/// How long the start-up check waits for an answer: a list of one Service
/// takes milliseconds; the client has no read timeout (see
/// [`super::client`]), so without this a stalled server would hold start-up
/// for ever, with nothing logged.
pub const START_UP_DEADLINE: Duration = Duration::from_secs(10);

/// Why start-up cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(
        "--selector `{selector}` was refused by the API server ({message}); write it as kubectl \
         -l takes it, e.g. service.kubernetes.io/service-proxy-name=ssh-fwd or \
         'app in (a,b),!skip'"
    )]
    BadSelector { selector: String, message: String },
    #[error(
        "the API server did not answer within {} s (a list of one Service, checking \
         --selector); make sure it is up and reachable from here (its address in the \
         kubeconfig, a firewall or proxy between), then start again",
        .0.as_secs()
    )]
    NoAnswer(Duration),
}

/// Asks the API server to parse `selector` (one list of at most one
/// Service), waiting at most [`START_UP_DEADLINE`]. Any other error (the API
/// refuses connections, RBAC) is left to the watchers, which retry and log:
/// the maps must keep forwarding meanwhile.
pub async fn check(client: &Client, selector: &str) -> Result<(), CheckError> {
    check_within(client, selector, START_UP_DEADLINE).await
}

async fn check_within(
    client: &Client,
    selector: &str,
    deadline: Duration,
) -> Result<(), CheckError> {
    let services: Api<Service> = Api::all(client.clone());
    let params = ListParams::default().labels(selector).limit(1);
    match tokio::time::timeout(deadline, services.list_metadata(&params)).await {
        Err(_) => Err(CheckError::NoAnswer(deadline)),
        Ok(Err(kube::Error::Api(status))) if status.code == 400 => Err(CheckError::BadSelector {
            selector: selector.to_owned(),
            message: status.message.clone(),
        }),
        Ok(Err(e)) => {
            tracing::warn!(
                error = %e,
                "cannot check --selector with the API server; the watches retry"
            );
            Ok(())
        }
        Ok(Ok(_)) => Ok(()),
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

    #[tokio::test]
    async fn a_stalled_api_server_fails_the_check_at_its_deadline() {
        let api = FakeApi::start_on_loopback().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, &dir).await;
        api.stall();
        let deadline = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let e = check_within(&client, "app=x", deadline).await.unwrap_err();
        assert!(matches!(e, CheckError::NoAnswer(d) if d == deadline), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("reachable from here"), "{e}");
        // Answered again once the server is.
        api.resume();
        assert!(check(&client, "app=x").await.is_ok());
    }
}
