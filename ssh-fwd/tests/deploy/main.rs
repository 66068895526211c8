//! deploy/ checked against the code: every manifest parses into its
//! k8s-openapi type with no field the type does not know; kustomize lists
//! every file; the RBAC grants exactly the API calls the code makes
//! (`k8s::api_calls`); the workloads' arguments parse with the real CLI.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking, with the error shown"
)]

use std::{collections::BTreeSet, path::Path};

use clap::Parser as _;
use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration,
    apps::v1::{DaemonSet, Deployment},
    batch::v1::Job,
    core::v1::{ConfigMap, Container, Service},
    networking::v1::NetworkPolicy,
    rbac::v1::{PolicyRule, Role},
};
use serde_json::Value;

use ssh_fwd::{
    args::ServiceStyle,
    cli::{Cli, Command},
    k8s::api_calls::{self, ApiCall},
    vocabulary,
};

mod combinations;
mod config;
mod render;
mod uninstall;

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

/// What the rules bound to a ServiceAccount grant, as (group, resource,
/// verb, only in our namespace).
fn granted(docs: &[Value], account: &str) -> BTreeSet<(String, String, String, bool)> {
    let bound = |binding: &Value| {
        binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == NAMESPACE
            })
    };
    let mut grants = BTreeSet::new();
    for (binding_kind, role_kind, namespaced) in [
        ("ClusterRoleBinding", "ClusterRole", false),
        ("RoleBinding", "Role", true),
    ] {
        for binding in docs
            .iter()
            .filter(|d| d["kind"] == binding_kind && bound(d))
        {
            assert_eq!(binding["roleRef"]["kind"], role_kind);
            let role = find(
                docs,
                role_kind,
                binding["roleRef"]["name"].as_str().unwrap(),
            );
            let rules: Vec<PolicyRule> = serde_json::from_value(role["rules"].clone()).unwrap();
            for rule in rules {
                for group in rule.api_groups.iter().flatten() {
                    for resource in rule.resources.iter().flatten() {
                        for verb in &rule.verbs {
                            assert!(
                                group != "*" && resource != "*" && verb != "*",
                                "no wildcards"
                            );
                            grants.insert((
                                group.clone(),
                                resource.clone(),
                                verb.clone(),
                                namespaced,
                            ));
                        }
                    }
                }
            }
        }
    }
    grants
}

fn needed(calls: &[ApiCall]) -> BTreeSet<(String, String, String, bool)> {
    calls
        .iter()
        .flat_map(|c| {
            c.verbs.iter().map(move |v| {
                (
                    c.group.to_owned(),
                    c.resource.to_owned(),
                    (*v).to_owned(),
                    c.own_namespace,
                )
            })
        })
        .collect()
}

#[test]
fn rbac_grants_exactly_the_api_calls_the_code_makes() {
    let docs = base();
    for (account, calls) in [
        ("ssh-fwd-agent", api_calls::AGENT),
        ("ssh-fwd-controller", api_calls::CONTROLLER),
    ] {
        assert_eq!(
            granted(&docs, account),
            needed(calls),
            "RBAC of {account} differs from k8s/api_calls.rs (left: granted, right: needed)"
        );
    }
}

#[test]
fn the_admission_policies_load_compile_and_bind_in_the_fake_api_server() {
    let cluster = ssh_fwd_tests::fake_api::Cluster::deploy().unwrap_or_else(|e| panic!("{e}"));
    let (pairs, unbound, dangling) = cluster.policies.bound();
    assert!(
        unbound.is_empty(),
        "policies without a binding: {unbound:?}"
    );
    assert!(dangling.is_empty(), "bindings of no policy: {dangling:?}");
    let docs = base();
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    assert_eq!(pairs.len(), policies.len());
    let accounts: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .map(|d| {
            format!(
                "system:serviceaccount:{NAMESPACE}:{}",
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for policy in policies {
        let name = &policy["metadata"]["name"];
        // Each is about one of deploy's own service accounts, named
        // exactly, and refuses (Fail) when it cannot decide.
        let conditions = policy["spec"]["matchConditions"].to_string();
        assert!(
            accounts
                .iter()
                .any(|a| conditions.contains(&format!("'{a}'"))),
            "{name}: {conditions}"
        );
        assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{name}");
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"] == "ValidatingAdmissionPolicyBinding" && d["spec"]["policyName"] == *name
            })
            .unwrap();
        assert_eq!(
            binding["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
    }
}

/// The container's arguments as the kubelet expands them: `$(VAR)` from
/// the ConfigMap (envFrom) and `env`.
fn expanded_args(container: &Container, config: &ConfigMap) -> Vec<String> {
    let mut vars = config.data.clone().unwrap_or_default();
    for env in container.env.iter().flatten() {
        let value = env
            .value
            .clone()
            .unwrap_or_else(|| format!("<{}>", env.name));
        vars.insert(env.name.clone(), value);
    }
    assert!(container.env_from.iter().flatten().any(|e| {
        e.config_map_ref
            .as_ref()
            .is_some_and(|c| Some(&c.name) == config.metadata.name.as_ref())
    }));
    let mut argv = vec!["ssh-fwd".to_owned()];
    for arg in container.args.iter().flatten() {
        let mut arg = arg.clone();
        for (k, v) in &vars {
            arg = arg.replace(&format!("$({k})"), v);
        }
        assert!(
            !arg.contains("$("),
            "{arg}: variable not defined in the ConfigMap or env"
        );
        argv.push(arg);
    }
    argv
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
    let cli = Cli::try_parse_from(expanded_args(agent, &config)).unwrap_or_else(|e| panic!("{e}"));
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
    let cli =
        Cli::try_parse_from(expanded_args(controller, &config)).unwrap_or_else(|e| panic!("{e}"));
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
    let cli = Cli::try_parse_from(expanded_args(&pod.containers[0], &config))
        .unwrap_or_else(|e| panic!("{e}"));
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
    // The SSH IP of the README's kind steps, for both.
    let (agent, _) = agent_cli(&kind);
    let (controller, _) = controller_cli(&kind);
    let ip: std::net::IpAddr = "172.18.255.10".parse().unwrap();
    assert_eq!(agent.ssh_ips, [ip]);
    assert_eq!(controller.ssh_ips, agent.ssh_ips);
}

fn controller_cli(docs: &[Value]) -> (ssh_fwd::controller::ControllerArgs, Deployment) {
    let config = shared_config(docs);
    let deployment: Deployment = typed(find(docs, "Deployment", "ssh-fwd-controller")).unwrap();
    let pod_spec = deployment.spec.clone().unwrap().template.spec.unwrap();
    let cli = Cli::try_parse_from(expanded_args(&pod_spec.containers[0], &config))
        .unwrap_or_else(|e| panic!("{e}"));
    let Command::Controller(args) = cli.command else {
        panic!("the Deployment must run `ssh-fwd controller`")
    };
    (*args, deployment)
}

#[test]
fn the_webhook_configuration_sends_only_ssh_pods_to_the_controllers_webhook_port() {
    let docs = base();
    let config: MutatingWebhookConfiguration =
        typed(find(&docs, "MutatingWebhookConfiguration", "ssh-fwd")).unwrap();
    let [hook] = config.webhooks.as_deref().unwrap() else {
        panic!("one webhook")
    };
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.side_effects, "NoneOnDryRun");
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));
    let timeout = u64::try_from(hook.timeout_seconds.unwrap()).unwrap();
    assert_eq!(timeout, 5);
    let objects = hook.object_selector.as_ref().unwrap();
    assert_eq!(
        objects.match_labels.as_ref().unwrap(),
        &[(
            vocabulary::SSH.to_owned(),
            vocabulary::SSH_ENABLED.to_owned()
        )]
        .into()
    );
    let namespaces = &hook
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .as_ref()
        .unwrap()[0];
    assert_eq!(namespaces.key, "kubernetes.io/metadata.name");
    assert_eq!(namespaces.operator, "NotIn");
    assert_eq!(
        namespaces.values.as_deref().unwrap(),
        ["kube-system", NAMESPACE]
    );
    let rules = hook.rules.as_deref().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].operations.as_deref().unwrap(), ["CREATE"]);
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["pods"]);
    // The Service it calls leads to the controller's --webhook-addr.
    let target = hook.client_config.service.as_ref().unwrap();
    assert_eq!(
        (target.namespace.as_str(), target.path.as_deref()),
        (NAMESPACE, Some("/mutate"))
    );
    let service: Service = typed(find(&docs, "Service", &target.name)).unwrap();
    let spec = service.spec.unwrap();
    let port = &spec.ports.as_deref().unwrap()[0];
    assert_eq!(Some(port.port), target.port);
    let (args, deployment) = controller_cli(&docs);
    // The API server waits 5 s; the webhook answers, port or not, after 4.
    assert_eq!(
        args.admission.webhook_deadline,
        std::time::Duration::from_secs(4)
    );
    assert!(args.admission.webhook_deadline < std::time::Duration::from_secs(timeout));
    let addr = args.admission.webhook_addr.expect("--webhook-addr");
    assert_eq!(
        port.target_port,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(addr.port()))
        )
    );
    let pod_labels = deployment
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .labels
        .unwrap();
    assert!(
        spec.selector
            .unwrap()
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
    );
    assert!(args.admission.webhook_self_signed);
    assert_eq!(args.admission.webhook_service, target.name);
    assert_eq!(args.admission.webhook_configuration, "ssh-fwd");
    assert_eq!(args.admission.check(), Ok(()));
}

#[test]
fn the_network_policy_admits_the_webhook_port_only_from_the_api_servers_addresses() {
    // The component as shipped (a documentation range), and as the kind
    // overlay patches it (kind's docker network): the patch keeps both
    // rules.
    let shipped = render::render_kustomization(
        "webhook-network-policy",
        "resources: [DEPLOY/base]\ncomponents: [DEPLOY/components/webhook-network-policy]\n",
    )
    .unwrap();
    for (docs, cidr) in [
        (shipped, "192.0.2.0/24"),
        (render("overlays/kind"), "172.18.0.0/16"),
    ] {
        check_network_policy(&docs);
        let policy = find(&docs, "NetworkPolicy", "ssh-fwd-controller");
        assert_eq!(
            policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
            cidr
        );
    }
}

fn check_network_policy(docs: &[Value]) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let policy: NetworkPolicy = typed(find(docs, "NetworkPolicy", "ssh-fwd-controller")).unwrap();
    assert_eq!(
        policy.metadata.namespace.as_deref(),
        Some("ssh-fwd"),
        "the controller's namespace, whatever the overlay sets"
    );
    assert!(
        !base().iter().any(|d| d["kind"] == "NetworkPolicy"),
        "not in the base: its ipBlock must be set for the cluster first"
    );
    let spec = policy.spec.unwrap();
    let (args, deployment) = controller_cli(docs);
    let template = deployment.spec.unwrap().template;
    let labels = template.metadata.unwrap().labels.unwrap();
    let selected = spec.pod_selector.unwrap().match_labels.unwrap();
    assert!(!selected.is_empty() && selected.iter().all(|(k, v)| labels.get(k) == Some(v)));
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    // The named ports are the container's, on --webhook-addr and
    // --metrics-addr.
    let container = &template.spec.unwrap().containers[0];
    let number = |port: &IntOrString| {
        let IntOrString::String(name) = port else {
            panic!("{port:?}: name the container's port")
        };
        let found = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_ref() == Some(name));
        found
            .unwrap_or_else(|| panic!("no container port {name}"))
            .container_port
    };
    let rules = spec.ingress.unwrap();
    let [webhook, metrics] = rules.as_slice() else {
        panic!("two rules: the webhook's and the metrics'")
    };
    let port_of = |rule: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        let ports = rule.ports.as_deref().unwrap();
        assert_eq!(ports.len(), 1);
        number(ports[0].port.as_ref().unwrap())
    };
    let webhook_addr = args.admission.webhook_addr.expect("--webhook-addr");
    assert_eq!(port_of(webhook), i32::from(webhook_addr.port()));
    let from = webhook.from.as_deref().unwrap();
    assert!(
        from.len() == 1 && from[0].ip_block.is_some() && from[0].pod_selector.is_none(),
        "the webhook port only from an ipBlock: {from:?}"
    );
    assert_eq!(
        port_of(metrics),
        i32::from(args.metrics_addr.unwrap().port())
    );
    assert!(metrics.from.is_none(), "Prometheus scrapes from anywhere");
}

#[test]
fn the_cert_manager_overlay_serves_the_certificate_cainjector_vouches_for() {
    let docs = render("overlays/cert-manager");
    let (args, deployment) = controller_cli(&docs);
    // Its patch restates the base's arguments (a list is replaced whole):
    // all of them, with the certificate's source swapped.
    let arguments = |docs: &[Value]| {
        let deployment = find(docs, "Deployment", "ssh-fwd-controller");
        let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        serde_json::from_value::<Vec<String>>(args.clone()).unwrap()
    };
    let swapped: Vec<String> = arguments(&base())
        .into_iter()
        .map(|a| match a.as_str() {
            "--webhook-self-signed" => format!(
                "--webhook-cert-dir={}",
                args.admission.webhook_cert_dir.as_ref().unwrap().display()
            ),
            _ => a,
        })
        .collect();
    assert_eq!(
        arguments(&docs),
        swapped,
        "components/cert-manager/controller.yaml"
    );
    assert!(!args.admission.webhook_self_signed);
    let dir = args
        .admission
        .webhook_cert_dir
        .clone()
        .expect("--webhook-cert-dir");
    assert_eq!(args.admission.check(), Ok(()));
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Path::new(&m.mount_path) == dir)
        .expect("the certificate is mounted at --webhook-cert-dir");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    let secret = volume.secret.as_ref().unwrap().secret_name.clone().unwrap();
    let certificate = find(&docs, "Certificate", "ssh-fwd-webhook");
    assert_eq!(certificate["spec"]["secretName"], secret.as_str());
    // Signed by a CA of its own: a selfSigned Issuer makes the CA, a CA
    // Issuer signs with it. A serving certificate that were its own trust
    // anchor would leave caBundle trusting only a certificate not served
    // yet, from each renewal until the kubelet updates the mounted files.
    let issuer_of = |certificate: &Value| {
        let issuer = &certificate["spec"]["issuerRef"];
        find(
            &docs,
            issuer["kind"].as_str().unwrap(),
            issuer["name"].as_str().unwrap(),
        )
    };
    let ca_secret = issuer_of(certificate)["spec"]["ca"]["secretName"]
        .as_str()
        .expect("the serving certificate's Issuer is a CA Issuer");
    let ca = docs
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["spec"]["secretName"] == ca_secret)
        .expect("a Certificate makes the CA Issuer's Secret");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(issuer_of(ca)["spec"]["selfSigned"], serde_json::json!({}));
    // Renewed with the same key, the CA still vouches for what it signed.
    assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
    let service = format!("{}.{NAMESPACE}.svc", args.admission.webhook_service);
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| *n == service.as_str())
    );
    // cainjector puts the CA into caBundle, not the serving certificate.
    let config = find(&docs, "MutatingWebhookConfiguration", "ssh-fwd");
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/{}", ca["metadata"]["name"].as_str().unwrap())
    );
    let config: MutatingWebhookConfiguration = typed(config).unwrap();
    assert!(config.webhooks.unwrap()[0].client_config.service.is_some());
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
    let installed = format!("{}/{}", shared["KEYS_DIR"], shared["KEYS_FILE"]);
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
