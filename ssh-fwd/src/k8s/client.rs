//! The Kubernetes client both the agent and the controller use.

use std::path::Path;

use anyhow::Context as _;

/// A client from `kubeconfig`, else KUBECONFIG or ~/.kube/config, else the
/// in-cluster config (kube's inference order). Errors, and the log line on
/// success, name the configuration in use.
pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
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
    kube::Client::try_from(config)
        .with_context(|| format!("building the Kubernetes client from {source}"))
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
