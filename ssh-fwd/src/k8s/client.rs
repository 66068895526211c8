//! The Kubernetes client both the agent and the controller use.

use std::path::Path;

use anyhow::Context as _;

/// A client, and the API server it talks to (for messages).
pub struct Api {
    pub client: kube::Client,
    /// The server's URL.
    pub server: String,
}

/// A client from `kubeconfig`, else KUBECONFIG or ~/.kube/config, else the
/// in-cluster config (kube's inference order). Errors, and the log line on
/// success, name the configuration in use.
///
/// No read timeout: kube applies none by default (5.0), and one on the
/// connection would also end a quiet watch, which waits for events as long
/// as its server-side `timeoutSeconds` (kube's watcher: 290 s, with its own
/// idle timeout just above). Calls that must not wait for ever carry their
/// own deadline ([`super::selector_check::check`] at start-up, the controller's
/// calls under leadership).
pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(open(kubeconfig).await?.client)
}

/// [`connect`], keeping the server's URL.
pub async fn open(kubeconfig: Option<&Path>) -> anyhow::Result<Api> {
    let source = describe(kubeconfig);
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {source}"))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading the Kubernetes configuration from {source}"))?
        }
        None => kube::Config::infer().await.with_context(|| {
            format!("no usable Kubernetes configuration (tried {source}); pass --kubeconfig FILE")
        })?,
    };
    tracing::info!(server = %config.cluster_url, config = %source, "Kubernetes API");
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .with_context(|| format!("building the Kubernetes client from {source}"))?;
    Ok(Api { client, server })
}

/// Where the configuration comes from, as a user would look for it.
fn describe(kubeconfig: Option<&Path>) -> String {
    if let Some(path) = kubeconfig {
        return format!("--kubeconfig {}", path.display());
    }
    if let Some(env) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return format!("KUBECONFIG={}", env.to_string_lossy());
    }
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube/config"));
    match home.filter(|p| p.exists()) {
        Some(path) => path.display().to_string(),
        None => "~/.kube/config (absent), then the in-cluster service account".to_owned(),
    }
}

/// A client of the fake API server of the tests.
#[cfg(test)]
pub async fn of_fake(api: &ssh_fwd_tests::fake_api::FakeApi) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&api.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_used_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let error = format!("{:#}", connect(Some(&missing)).await.err().unwrap());
        assert!(error.contains(&missing.display().to_string()), "{error}");
        let broken = dir.path().join("broken");
        std::fs::write(
            &broken,
            "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n",
        )
        .unwrap();
        let error = format!("{:#}", connect(Some(&broken)).await.err().unwrap());
        assert!(
            error.contains(&format!("--kubeconfig {}", broken.display())),
            "{error}"
        );
    }
}
