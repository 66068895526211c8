//! deploy/uninstall: a DaemonSet that runs `ssh-fwd teardown` on every
//! node the agents ran on, on the agents' bpffs, with the agents' image.
//! What teardown removes is tests/tests/agent_lifecycle.rs's
//! `teardown_removes_the_data_path`.

use std::path::Path;

use clap::Parser as _;
use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::PodSpec};

use super::{DEPLOY, agent_cli, base, check_kind, find, render, typed};
use ssh_fwd::cli::{Cli, Command};

fn pod(ds: &DaemonSet) -> &PodSpec {
    ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

/// The host path mounted at `mount_path` in `pod`'s container `container`.
fn host_path_at(
    pod: &PodSpec,
    container: &k8s_openapi::api::core::v1::Container,
    mount_path: &Path,
) -> String {
    let mount = (container.volume_mounts.iter().flatten())
        .filter(|m| mount_path.starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("nothing mounted at {}", mount_path.display()));
    let volume = (pod.volumes.iter().flatten())
        .find(|v| v.name == mount.name)
        .unwrap();
    let host = volume.host_path.as_ref().expect("a hostPath volume");
    let below = mount_path.strip_prefix(&mount.mount_path).unwrap();
    Path::new(&host.path).join(below).display().to_string()
}

#[test]
fn the_uninstall_daemonset_tears_down_what_every_agent_pinned() {
    let docs = render("uninstall");
    for doc in &docs {
        check_kind(doc)
            .unwrap_or_else(|e| panic!("{} {}: {e}", doc["kind"], doc["metadata"]["name"]));
    }
    let namespace = find(&docs, "Namespace", "ssh-fwd-uninstall");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let teardown: DaemonSet = typed(find(&docs, "DaemonSet", "ssh-fwd-teardown")).unwrap();
    let teardown_pod = pod(&teardown);
    let [init] = teardown_pod.init_containers.as_deref().unwrap() else {
        panic!("one init container: the teardown")
    };
    let argv = std::iter::once("ssh-fwd".to_owned()).chain(init.args.iter().flatten().cloned());
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
    let Command::Teardown(args) = cli.command else {
        panic!("the init container must run `ssh-fwd teardown`")
    };
    assert!(!args.force, "never under a running agent");

    let base_docs = base();
    let (agent, ds) = agent_cli(&base_docs);
    let agent_pod = pod(&ds);
    // The same directory of the host's bpffs.
    assert_eq!(
        host_path_at(teardown_pod, init, &args.bpffs.bpffs),
        host_path_at(agent_pod, &agent_pod.containers[0], &agent.bpffs.bpffs),
    );
    // On every node the agents ran on.
    assert_eq!(teardown_pod.tolerations, agent_pod.tolerations);
    assert_eq!(teardown_pod.node_selector, agent_pod.node_selector);
    assert_eq!(teardown_pod.affinity, agent_pod.affinity);
    // With the agents' image, as kustomize names it.
    assert_eq!(init.image, agent_pod.containers[0].image);
    // Ready once teardown returned: a container that stays.
    let [done] = teardown_pod.containers.as_slice() else {
        panic!("one container after the teardown")
    };
    assert!(
        done.image
            .as_deref()
            .unwrap()
            .starts_with("registry.k8s.io/pause:")
    );
    // Root with only what teardown uses.
    let security = init.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_user, Some(0));
    let caps = security.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_eq!(
        caps.add.as_deref(),
        Some(&["BPF".to_owned(), "SYS_ADMIN".to_owned()][..])
    );
    assert_eq!(teardown_pod.automount_service_account_token, Some(false));
}

#[test]
fn the_readme_removes_the_install_before_the_teardown_runs() {
    let readme = std::fs::read_to_string(Path::new(DEPLOY).join("README.md")).unwrap();
    let at = |needle: &str| {
        readme
            .find(needle)
            .unwrap_or_else(|| panic!("deploy/README.md does not say `{needle}`"))
    };
    let order = [
        at("kubectl delete -k deploy/overlays/"),
        at("kubectl apply -k deploy/uninstall"),
        at("kubectl -n ssh-fwd-uninstall rollout status ds/ssh-fwd-teardown"),
        at("kubectl delete -k deploy/uninstall"),
    ];
    assert!(
        order.is_sorted(),
        "deploy/README.md: the uninstall steps out of order"
    );
}
