//! `ssh-fwd known-hosts`: prints the line users put in
//! `~/.ssh/known_hosts` to trust every job's host certificate
//! (`@cert-authority [HOST]:* ssh-ed25519 AAAA...`, two lines during a
//! rotation), read from the ConfigMap the controller publishes, which
//! every authenticated user may read; with `--ssh-config`, also an
//! `ssh_config` block for the host that refuses what the line does not
//! vouch for.

use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::{host_certs::trust, k8s, vocabulary};

#[derive(Debug, clap::Args)]
pub struct KnownHostsArgs {
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then
    /// in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The controller's namespace.
    #[arg(long, value_name = "NAMESPACE", default_value = "ssh-fwd")]
    pub namespace: String,

    /// The ConfigMap the controller publishes the host CA in
    /// (its --host-ca-config-map).
    #[arg(long, value_name = "NAME", default_value = vocabulary::HOST_CA_CONFIG_MAP)]
    pub config_map: String,

    /// Also print an ssh_config block for the host (StrictHostKeyChecking
    /// yes), for ~/.ssh/config.
    #[arg(long)]
    pub ssh_config: bool,
}

/// What the command prints, from the published ConfigMap's data.
pub fn render(
    data: &std::collections::BTreeMap<String, String>,
    ssh_config: bool,
    what: &str,
) -> anyhow::Result<String> {
    let lines = data
        .get(trust::KNOWN_HOSTS_KEY)
        .filter(|l| l.starts_with("@cert-authority "))
        .with_context(|| {
            format!(
                "{what} has no {} line; is the controller running with --host-certs?",
                trust::KNOWN_HOSTS_KEY
            )
        })?;
    let mut out = lines.clone();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if ssh_config {
        let host = data
            .get(trust::HOST_KEY)
            .with_context(|| format!("{what} has no {}", trust::HOST_KEY))?;
        out.push('\n');
        out += &trust::ssh_config(host);
    }
    Ok(out)
}

pub async fn run(args: KnownHostsArgs) -> anyhow::Result<()> {
    let client = k8s::client::connect(args.kubeconfig.as_deref()).await?;
    let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
    let what = format!("ConfigMap {}/{}", args.namespace, args.config_map);
    let found = api
        .get_opt(&args.config_map)
        .await
        .with_context(|| format!("reading {what}"))?
        .with_context(|| {
            format!("no {what}: the controller publishes it with --host-certs; check --namespace")
        })?;
    let data = found.data.unwrap_or_default();
    print!("{}", render(&data, args.ssh_config, &what)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_the_lines_and_on_request_a_strict_block_for_the_host() {
        let data = [
            (
                trust::KNOWN_HOSTS_KEY.to_owned(),
                trust::line("ssh.example.org", "ssh-ed25519 AAAA") + "\n",
            ),
            (trust::HOST_KEY.to_owned(), "ssh.example.org".to_owned()),
        ]
        .into();
        assert_eq!(
            render(&data, false, "cm").unwrap(),
            "@cert-authority [ssh.example.org]:* ssh-ed25519 AAAA\n"
        );
        assert_eq!(
            render(&data, true, "cm").unwrap(),
            "@cert-authority [ssh.example.org]:* ssh-ed25519 AAAA\n\nHost ssh.example.org\n    StrictHostKeyChecking yes\n"
        );
        let error = render(&Default::default(), false, "ConfigMap a/b").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("ConfigMap a/b has no known_hosts"),
            "{error}"
        );
    }
}
