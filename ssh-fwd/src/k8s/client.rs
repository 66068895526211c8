//! The Kubernetes client both the agent and the controller use.

use std::path::Path;

use anyhow::Context as _;

/// A client from `kubeconfig`, else the in-cluster config, KUBECONFIG or
/// ~/.kube/config.
pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration: not in a cluster, no KUBECONFIG, no ~/.kube/config; pass --kubeconfig",
        )?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}
