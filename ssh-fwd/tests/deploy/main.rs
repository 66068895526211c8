//! deploy/ checked against the code: every manifest parses into its
//! k8s-openapi type with no field the type does not know; kustomize lists
//! every file; the RBAC grants exactly the API calls the code makes
//! (`k8s::api_calls`); the workloads' arguments parse with the real CLI.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking, with the error shown"
)]

use std::{collections::BTreeSet, ffi::OsString, path::Path};

use clap::{CommandFactory as _, Parser as _};
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    batch::v1::Job,
    core::v1::{ConfigMap, Container, PodSpec},
    rbac::v1::Role,
};
use serde_json::Value;

use ssh_fwd::{
    args::ServiceStyle,
    cli::{Cli, Command},
    vocabulary,
};

mod combinations;
mod config;
mod rbac;
mod render;
mod uninstall;
mod webhook;

use rbac::{granted, needed};
use render::{DEPLOY, NAMESPACE, check_kind, documents, find, render, shared_config, typed};

/// deploy/base as `kubectl apply -k deploy/base` sends it.
fn base() -> Vec<Value> {
    render("base")
}

#[test]
fn the_base_kustomization_lists_every_file_of_its_directory() {
    let dir = Path::new(DEPLOY).join("base");
    let kustomization = &documents(&dir.join("kustomization.yaml"))[0];
    let strings = |v: &Value| -> Vec<String> {
        (v.as_array().into_iter().flatten())
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    };
    let mut listed: BTreeSet<String> = strings(&kustomization["resources"]).into_iter().collect();
    for generator in kustomization["configMapGenerator"].as_array().unwrap() {
        listed.extend(strings(&generator["envs"]));
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, present,
        "deploy/base/kustomization.yaml must list every file"
    );
    assert_eq!(kustomization["namespace"], NAMESPACE);
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type_with_no_unknown_fields() {
    let mut docs = base();
    docs.extend(documents(&Path::new(DEPLOY).join("examples/ssh-job.yaml")));
    docs.extend(documents(
        &Path::new(DEPLOY).join("examples/ssh-batch-job.yaml"),
    ));
    assert!(docs.len() >= 12, "{} documents", docs.len());
    for doc in &docs {
        check_kind(doc)
            .unwrap_or_else(|e| panic!("{} {}: {e}", doc["kind"], doc["metadata"]["name"]));
    }
}

#[test]
fn unknown_fields_are_caught() {
    let mut ds = find(&base(), "DaemonSet", "ssh-fwd-agent").clone();
    ds["spec"]["template"]["spec"]["hostNetwrok"] = Value::Bool(true);
    let error = check_kind(&ds).unwrap_err();
    assert!(error.contains("hostNetwrok"), "{error}");
}

/// The command line the container's binary parses: its arguments, with
/// `--config` naming where the pod mounts the ConfigMap, which is written
/// here as the kubelet mounts it (one file per key) and read as the binary
/// reads it; `ssh-fwd config check` must pass it too. `env` is set for the
/// binary, so a flag whose variable the container sets is not taken from
/// the ConfigMap.
fn parsed(pod: &PodSpec, container: &Container, config: &ConfigMap) -> Cli {
    let name = config.metadata.name.as_deref();
    let volume = (pod.volumes.iter().flatten())
        .find(|v| v.config_map.as_ref().map(|c| c.name.as_str()) == name)
        .expect("the pod mounts the shared ConfigMap");
    let mount = (container.volume_mounts.iter().flatten())
        .find(|m| m.name == volume.name)
        .expect("the container mounts the shared ConfigMap");
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.iter().all(|a| !a.contains("$(")),
        "settings come from the ConfigMap's files, not $(VAR): {args:?}"
    );
    let flag = format!("--config={}", mount.mount_path);
    assert!(args.contains(&flag), "{flag} in {args:?}");
    let dir = tempfile::tempdir().unwrap();
    ssh_fwd_tests::config_volume::write(dir.path(), &config.data.clone().unwrap_or_default())
        .unwrap();
    ssh_fwd::cli::config_check::check(dir.path())
        .unwrap_or_else(|e| panic!("config check of the ConfigMap {name:?}: {e:#}"));
    let local = format!("--config={}", dir.path().display());
    let argv: Vec<OsString> = std::iter::once("ssh-fwd".into())
        .chain(
            args.iter()
                .map(|a| if *a == flag { local.clone() } else { a.clone() }),
        )
        .map(OsString::from)
        .collect();
    let set: BTreeSet<String> = (container.env.iter().flatten())
        .map(|e| e.name.clone())
        .collect();
    let env = |name: &str| {
        set.contains(name)
            .then(|| OsString::from(format!("<{name}>")))
    };
    let (argv, deprecated) = ssh_fwd::cli::config_file::expand_noting(&Cli::command(), argv, env)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        deprecated.is_empty(),
        "deploy/ uses the new names: {deprecated:?}"
    );
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"))
}

fn probe_ports(container: &Container) -> Vec<(String, i32)> {
    [&container.readiness_probe, &container.liveness_probe]
        .into_iter()
        .flatten()
        .filter_map(|p| p.http_get.as_ref())
        .map(|g| {
            let port = match &g.port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => *p,
                other => panic!("probe port {other:?} must be a number"),
            };
            (g.path.clone().unwrap_or_default(), port)
        })
        .collect()
}

#[test]
fn workload_arguments_parse_with_the_real_cli() {
    let docs = base();
    let config = shared_config(&docs);
    let ds: DaemonSet = typed(find(&docs, "DaemonSet", "ssh-fwd-agent")).unwrap();
    let ds_spec = ds.spec.unwrap().template.spec.unwrap();
    let agent = &ds_spec.containers[0];
    let cli = parsed(&ds_spec, agent, &config);
    let Command::Agent(agent_args) = cli.command else {
        panic!("the DaemonSet must run `ssh-fwd agent`")
    };
    assert!(agent_args.kubernetes);
    let metrics = agent_args
        .metrics_addr
        .expect("--metrics-addr for the probes");
    assert_eq!(
        probe_ports(agent),
        [
            ("/readyz".to_owned(), i32::from(metrics.port())),
            ("/healthz".to_owned(), i32::from(metrics.port()))
        ]
    );
    assert_eq!(ds_spec.host_network, Some(true));
    assert!(
        ds_spec
            .tolerations
            .iter()
            .flatten()
            .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none())
    );

    let deployment: Deployment = typed(find(&docs, "Deployment", "ssh-fwd-controller")).unwrap();
    let pod_spec = deployment.spec.unwrap().template.spec.unwrap();
    let controller = &pod_spec.containers[0];
    let cli = parsed(&pod_spec, controller, &config);
    let Command::Controller(controller_args) = cli.command else {
        panic!("the Deployment must run `ssh-fwd controller`")
    };
    assert_eq!(
        agent_args.ssh_ips, controller_args.ssh_ips,
        "one SSH IP for both"
    );
    assert_eq!(agent_args.port_range, controller_args.port_range);
    assert_eq!(
        agent_args.service_styles, controller_args.service_styles,
        "the controller weighs others' Services as the agents do"
    );
    assert_eq!(controller_args.service_style, ServiceStyle::Loadbalancer);
    let metrics = controller_args
        .metrics_addr
        .expect("--metrics-addr for the probes");
    assert!(
        probe_ports(controller)
            .iter()
            .all(|(_, p)| *p == i32::from(metrics.port()))
    );
    assert_eq!(
        pod_spec.service_account_name.as_deref(),
        Some("ssh-fwd-controller")
    );
    assert_eq!(
        ds_spec.service_account_name.as_deref(),
        Some("ssh-fwd-agent")
    );
}

/// The agent's DaemonSet and its arguments as the CLI parses them.
fn agent_cli(docs: &[Value]) -> (ssh_fwd::agent::AgentArgs, DaemonSet) {
    let config = shared_config(docs);
    let ds: DaemonSet = typed(find(docs, "DaemonSet", "ssh-fwd-agent")).unwrap();
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let cli = parsed(pod, &pod.containers[0], &config);
    let Command::Agent(args) = cli.command else {
        panic!("the DaemonSet must run `ssh-fwd agent`")
    };
    (*args, ds)
}

/// The capabilities the agent's container adds, after dropping all.
fn added_capabilities(ds: &DaemonSet) -> BTreeSet<String> {
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let security = pod.containers[0].security_context.as_ref().unwrap();
    let caps = security.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_ne!(security.privileged, Some(true));
    caps.add.iter().flatten().cloned().collect()
}

/// What the agent asks for, run as `args` say.
fn asked_capabilities(args: &ssh_fwd::agent::AgentArgs) -> BTreeSet<String> {
    let l2 = args.announce.announce == ssh_fwd::agent::AnnounceMode::L2;
    (ssh_fwd::datapath::preflight::capability_names(l2).into_iter())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_agent_gets_the_capabilities_it_checks_for_and_no_others() {
    let (args, ds) = agent_cli(&base());
    assert_eq!(args.announce.announce, ssh_fwd::agent::AnnounceMode::Off);
    let added = added_capabilities(&ds);
    assert_eq!(added, asked_capabilities(&args));
    // The link and address events of pods' namespaces: without it every
    // agent warns at start.
    assert!(added.contains("NET_BROADCAST"), "{added:?}");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let security = pod.containers[0].security_context.as_ref().unwrap();
    // bpf(2) with CAP_BPF and not CAP_SYS_ADMIN: some runtimes' default
    // seccomp profiles refuse it (see the manifest's comment).
    let seccomp = security.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    assert_eq!(seccomp, Some("Unconfined"));
}

#[test]
fn the_announce_overlay_turns_announcing_on_with_the_capability_it_needs() {
    let docs = render("overlays/announce-l2");
    let (agent, ds) = agent_cli(&docs);
    assert_eq!(agent.announce.announce, ssh_fwd::agent::AnnounceMode::L2);
    ssh_fwd::agent::check_announce(&agent).unwrap_or_else(|e| panic!("{e}"));
    let added = added_capabilities(&ds);
    assert_eq!(added, asked_capabilities(&agent));
    assert!(
        added.contains("NET_RAW"),
        "the packet socket needs NET_RAW: {added:?}"
    );
    let container = &ds.spec.unwrap().template.spec.unwrap().containers[0];
    let pod_namespace = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "POD_NAMESPACE")
        .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(pod_namespace, Some("metadata.namespace"));
    // The env the base gives is still there: the patch merges by name.
    assert!(
        container
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "NODE_NAME")
    );
    // The Leases' Role is granted in that namespace.
    let role: Role = typed(find(&docs, "Role", "ssh-fwd-agent-announce")).unwrap();
    let lease_rule = role
        .rules
        .iter()
        .flatten()
        .find(|r| r.resources.iter().flatten().any(|x| x == "leases"));
    assert!(lease_rule.is_some(), "{role:?}");
}

#[test]
fn the_kind_overlay_runs_the_image_cargo_xtask_image_builds() {
    use ssh_fwd_tests::image::{DEV_TAG, qualified};
    let (base, kind) = (base(), render("overlays/kind"));
    for (workload, name) in [
        ("DaemonSet", "ssh-fwd-agent"),
        ("Deployment", "ssh-fwd-controller"),
    ] {
        let image = |docs: &[Value]| {
            let containers = &find(docs, workload, name)["spec"]["template"]["spec"]["containers"];
            containers[0]["image"].as_str().unwrap().to_owned()
        };
        assert!(
            image(&base).starts_with("ghcr.io/ssh-fwd/ssh-fwd:"),
            "{workload} {name}: the base names the release, not {}",
            image(&base)
        );
        assert_eq!(
            qualified(&image(&kind)),
            qualified(DEV_TAG),
            "{workload} {name}"
        );
    }
    // The SSH IP of docs/kind.md's steps, for both.
    let (agent, _) = agent_cli(&kind);
    let (controller, _) = controller_cli(&kind);
    let ip: std::net::IpAddr = "172.18.255.10".parse().unwrap();
    assert_eq!(agent.ssh_ips, [ip]);
    assert_eq!(controller.ssh_ips, agent.ssh_ips);
}

#[test]
fn the_kind_overlay_attaches_with_tc_and_passes_the_agents_own_checks() {
    let kind = render("overlays/kind");
    let (args, ds) = agent_cli(&kind);
    // A kind node's eth0 is a veth (docs/kind.md).
    assert_eq!(args.attach, ssh_fwd::datapath::hooks::AttachMode::Tc);
    assert_eq!(added_capabilities(&ds), asked_capabilities(&args));
    assert_eq!(
        args.bpffs.bpffs,
        Path::new("/sys/fs/bpf/ssh-fwd"),
        "the pins below the node's bpffs"
    );
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let bpffs = (pod.containers[0].volume_mounts.iter().flatten())
        .find(|m| m.mount_path == "/sys/fs/bpf")
        .expect("the node's bpffs is mounted");
    // What the agent's own check asks of a pin directory in a container.
    assert_eq!(bpffs.mount_propagation.as_deref(), Some("HostToContainer"));
    let (controller, _) = controller_cli(&kind);
    assert!(
        controller.admission.webhook_self_signed,
        "no cert-manager on kind"
    );
}

fn controller_cli(docs: &[Value]) -> (ssh_fwd::controller::ControllerArgs, Deployment) {
    let config = shared_config(docs);
    let deployment: Deployment = typed(find(docs, "Deployment", "ssh-fwd-controller")).unwrap();
    let pod_spec = deployment.spec.clone().unwrap().template.spec.unwrap();
    let cli = parsed(&pod_spec, &pod_spec.containers[0], &config);
    let Command::Controller(args) = cli.command else {
        panic!("the Deployment must run `ssh-fwd controller`")
    };
    (*args, deployment)
}

#[test]
fn the_batch_example_runs_sshd_as_the_keys_owner_reading_the_installed_file_itself() {
    // A key rotation reaches only an sshd that reads the file the webhook
    // keeps current, not a copy made at start; and the file is the user's
    // that sshd runs as (StrictModes).
    let docs = documents(&Path::new(DEPLOY).join("examples/ssh-batch-job.yaml"));
    let base = base();
    let shared = shared_config(&base);
    let shared = shared.data.unwrap();
    let installed = format!("{}/{}", shared["keys-dir"], shared["keys-file"]);
    let sshd: ConfigMap = typed(find(&docs, "ConfigMap", "ssh-batch-demo-sshd")).unwrap();
    let sshd_config = &sshd.data.unwrap()["sshd_config"];
    assert!(
        sshd_config
            .lines()
            .any(|l| l.trim() == format!("AuthorizedKeysFile {installed}")),
        "{sshd_config}"
    );
    let job: Job = typed(find(&docs, "Job", "ssh-batch-demo")).unwrap();
    let template = job.spec.unwrap().template;
    let target = &template.metadata.unwrap().annotations.unwrap()[vocabulary::TARGET_PORT];
    let pod = template.spec.unwrap();
    let container = pod
        .containers
        .iter()
        .find(|c| {
            c.ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == Some(target))
        })
        .expect("the container serving the target port");
    let user = container
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or_else(|| pod.security_context.as_ref()?.run_as_user);
    assert!(user.is_some_and(|u| u != 0), "sshd runs as the job's user");
    let script = container.args.iter().flatten().cloned().collect::<String>();
    assert!(script.contains("-f /etc/ssh-demo/sshd_config"), "{script}");
    assert!(
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "sshd-config" && m.mount_path == "/etc/ssh-demo"),
        "the sshd_config is mounted where sshd reads it"
    );
}
