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
use k8s_openapi::{
    api::{
        admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingAdmissionPolicy,
            ValidatingAdmissionPolicyBinding,
        },
        apps::v1::{DaemonSet, Deployment},
        batch::v1::Job,
        core::v1::{ConfigMap, Container, Namespace, Pod, Service, ServiceAccount},
        networking::v1::NetworkPolicy,
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    serde::{Serialize, de::DeserializeOwned},
};
use serde_json::Value;

use ssh_fwd::{
    args::ServiceStyle,
    cli::{Cli, Command},
    k8s::api_calls::{self, ApiCall},
    vocabulary,
};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
const NAMESPACE: &str = "ssh-fwd";

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Parses `doc` as `T` and fails on any field `T` does not have: whatever
/// the typed round trip drops was unknown (a typo, or a wrong level).
fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<T, String> {
    let parsed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    known_fields(doc, &back, "")?;
    Ok(parsed)
}

fn known_fields(original: &Value, round: &Value, at: &str) -> Result<(), String> {
    match (original, round) {
        (Value::Object(a), Value::Object(b)) => a.iter().try_for_each(|(k, v)| match b.get(k) {
            Some(w) => known_fields(v, w, &format!("{at}.{k}")),
            None => Err(format!("unknown field {at}.{k}")),
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (v, w))| known_fields(v, w, &format!("{at}[{i}]"))),
        (a, b) if a == b => Ok(()),
        // Scalars the type normalises (e.g. a port given as a string).
        (Value::String(a), b) if b.as_str().is_none() && a == &b.to_string() => Ok(()),
        (a, b) => Err(format!("{at}: {a} became {b}")),
    }
}

/// Every document of the base, checked against its type.
fn base() -> Vec<Value> {
    let dir = Path::new(DEPLOY).join("base");
    let kustomization = &documents(&dir.join("kustomization.yaml"))[0];
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, present,
        "deploy/base/kustomization.yaml must list every manifest"
    );
    assert_eq!(kustomization["namespace"], NAMESPACE);
    listed
        .iter()
        .flat_map(|f| documents(&dir.join(f)))
        .collect()
}

fn check_kind(doc: &Value) -> Result<(), String> {
    match doc["kind"].as_str().unwrap_or("") {
        "Namespace" => typed::<Namespace>(doc).map(drop),
        "ConfigMap" => typed::<ConfigMap>(doc).map(drop),
        "ServiceAccount" => typed::<ServiceAccount>(doc).map(drop),
        "ClusterRole" => typed::<ClusterRole>(doc).map(drop),
        "ClusterRoleBinding" => typed::<ClusterRoleBinding>(doc).map(drop),
        "Role" => typed::<Role>(doc).map(drop),
        "RoleBinding" => typed::<RoleBinding>(doc).map(drop),
        "DaemonSet" => typed::<DaemonSet>(doc).map(drop),
        "Deployment" => typed::<Deployment>(doc).map(drop),
        "Pod" => typed::<Pod>(doc).map(drop),
        "Job" => typed::<Job>(doc).map(drop),
        "Service" => typed::<Service>(doc).map(drop),
        "MutatingWebhookConfiguration" => typed::<MutatingWebhookConfiguration>(doc).map(drop),
        "ValidatingAdmissionPolicy" => typed::<ValidatingAdmissionPolicy>(doc).map(drop),
        "ValidatingAdmissionPolicyBinding" => {
            typed::<ValidatingAdmissionPolicyBinding>(doc).map(drop)
        }
        "NetworkPolicy" => typed::<NetworkPolicy>(doc).map(drop),
        other => Err(format!("no check for kind {other}")),
    }
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/base"))
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
    let overlay = documents(&Path::new(DEPLOY).join("overlays/kind/kustomization.yaml"));
    assert_eq!(overlay[0]["resources"][0], "../../base");
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
    let config: ConfigMap = typed(find(&docs, "ConfigMap", "ssh-fwd-config")).unwrap();
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

#[test]
fn the_agent_gets_the_capabilities_it_checks_for_and_no_others() {
    let ds: DaemonSet = typed(find(&base(), "DaemonSet", "ssh-fwd-agent")).unwrap();
    let container = &ds.spec.unwrap().template.spec.unwrap().containers[0];
    let security = container.security_context.as_ref().unwrap();
    let caps = security.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    let added: BTreeSet<&str> = caps.add.iter().flatten().map(String::as_str).collect();
    let asked: BTreeSet<&str> = ssh_fwd::datapath::preflight::capability_names(false)
        .into_iter()
        .collect();
    assert_eq!(added, asked);
    // The link and address events of pods' namespaces: without it every
    // agent warns at start.
    assert!(added.contains("NET_BROADCAST"), "{added:?}");
    assert_ne!(security.privileged, Some(true));
    // bpf(2) with CAP_BPF and not CAP_SYS_ADMIN: some runtimes' default
    // seccomp profiles refuse it (see the manifest's comment).
    let seccomp = security.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    assert_eq!(seccomp, Some("Unconfined"));
}

/// The DaemonSet of deploy/base with the overlay's JSON patches applied,
/// as kustomize applies them.
fn agent_with_overlay(overlay: &str) -> (DaemonSet, ConfigMap) {
    let kustomization = &documents(&Path::new(DEPLOY).join(overlay).join("kustomization.yaml"))[0];
    assert_eq!(kustomization["resources"][0], "../../base");
    let docs = base();
    let config: ConfigMap = typed(find(&docs, "ConfigMap", "ssh-fwd-config")).unwrap();
    let mut ds = find(&docs, "DaemonSet", "ssh-fwd-agent").clone();
    let patches = kustomization["patches"].as_array().unwrap();
    assert!(!patches.is_empty());
    for p in patches {
        assert_eq!(p["target"]["kind"], "DaemonSet");
        assert_eq!(p["target"]["name"], "ssh-fwd-agent");
        let ops: Value = serde_saphyr::from_str(p["patch"].as_str().unwrap()).unwrap();
        let ops: json_patch::Patch = serde_json::from_value(ops).unwrap();
        json_patch::patch(&mut ds, &ops).unwrap_or_else(|e| panic!("{overlay}: {e}"));
    }
    (typed(&ds).unwrap(), config)
}

#[test]
fn the_announce_overlay_turns_announcing_on_with_the_capability_it_needs() {
    let (ds, config) = agent_with_overlay("overlays/announce-l2");
    let container = &ds.spec.unwrap().template.spec.unwrap().containers[0];
    let cli =
        Cli::try_parse_from(expanded_args(container, &config)).unwrap_or_else(|e| panic!("{e}"));
    let Command::Agent(agent) = cli.command else {
        panic!("the DaemonSet must run `ssh-fwd agent`")
    };
    assert_eq!(agent.announce.announce, ssh_fwd::agent::AnnounceMode::L2);
    ssh_fwd::agent::check_announce(&agent).unwrap_or_else(|e| panic!("{e}"));
    let caps = container.security_context.as_ref().unwrap();
    let added: BTreeSet<&str> = caps
        .capabilities
        .as_ref()
        .unwrap()
        .add
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let asked: BTreeSet<&str> = ssh_fwd::datapath::preflight::capability_names(true)
        .into_iter()
        .collect();
    assert_eq!(added, asked);
    assert!(
        added.contains("NET_RAW"),
        "the packet socket needs NET_RAW: {added:?}"
    );
    let pod_namespace = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "POD_NAMESPACE")
        .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(pod_namespace, Some("metadata.namespace"));
    // The Leases' Role is granted in that namespace.
    let role: Role = typed(find(&base(), "Role", "ssh-fwd-agent-announce")).unwrap();
    let lease_rule = role
        .rules
        .iter()
        .flatten()
        .find(|r| r.resources.iter().flatten().any(|x| x == "leases"));
    assert!(lease_rule.is_some(), "{role:?}");
}

/// What kustomize's `images:` rules make of `image` (name and tag).
fn set_image(rules: &Value, image: &str) -> String {
    let (name, tag) = match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (image, None),
    };
    let rule = rules
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == name);
    let Some(rule) = rule else {
        return image.to_owned();
    };
    let name = rule["newName"].as_str().unwrap_or(name);
    match rule["newTag"].as_str().or(tag) {
        Some(tag) => format!("{name}:{tag}"),
        None => name.to_owned(),
    }
}

#[test]
fn the_kind_overlay_runs_the_image_cargo_xtask_image_builds() {
    use ssh_fwd_tests::image::{DEV_TAG, qualified};
    let images = |file: &str| documents(&Path::new(DEPLOY).join(file))[0]["images"].clone();
    let (base_rules, kind_rules) = (
        images("base/kustomization.yaml"),
        images("overlays/kind/kustomization.yaml"),
    );
    let docs = base();
    for (kind, name) in [
        ("DaemonSet", "ssh-fwd-agent"),
        ("Deployment", "ssh-fwd-controller"),
    ] {
        let containers = &find(&docs, kind, name)["spec"]["template"]["spec"]["containers"];
        let image = containers[0]["image"].as_str().unwrap();
        let released = set_image(&base_rules, image);
        assert_ne!(released, image, "{kind} {name}: the base names the release");
        let dev = set_image(&kind_rules, &released);
        assert_eq!(qualified(&dev), qualified(DEV_TAG), "{kind} {name}");
    }
}

fn controller_cli(docs: &[Value]) -> (ssh_fwd::controller::ControllerArgs, Deployment) {
    let config: ConfigMap = typed(find(docs, "ConfigMap", "ssh-fwd-config")).unwrap();
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
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let component = Path::new(DEPLOY).join("components/webhook-network-policy");
    let mut docs = base();
    docs.extend(component_docs(&component));
    let policy: NetworkPolicy = typed(find(&docs, "NetworkPolicy", "ssh-fwd-controller")).unwrap();
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
    let (args, deployment) = controller_cli(&docs);
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
    // The kind overlay admits kind's docker network.
    let kind = overlay("kind");
    let patched = find(&kind, "NetworkPolicy", "ssh-fwd-controller");
    assert_eq!(
        patched["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
        "172.18.0.0/16"
    );
}

/// What a kustomize Component in `dir` adds: its resources.
fn component_docs(dir: &Path) -> Vec<Value> {
    let kustomization = &documents(&dir.join("kustomization.yaml"))[0];
    assert_eq!(kustomization["kind"], "Component", "{}", dir.display());
    (kustomization["resources"].as_array().unwrap().iter())
        .flat_map(|r| documents(&dir.join(r.as_str().unwrap())))
        .collect()
}

/// The base with the overlay's components added and its JSON patches
/// applied, as kustomize would.
fn overlay(name: &str) -> Vec<Value> {
    let dir = Path::new(DEPLOY).join("overlays").join(name);
    let kustomization = &documents(&dir.join("kustomization.yaml"))[0];
    let mut docs = base();
    for resource in kustomization["resources"].as_array().unwrap() {
        let resource = resource.as_str().unwrap();
        if !resource.starts_with("..") {
            docs.extend(documents(&dir.join(resource)));
        }
    }
    for component in kustomization["components"].as_array().into_iter().flatten() {
        docs.extend(component_docs(&dir.join(component.as_str().unwrap())));
    }
    for patch in kustomization["patches"].as_array().unwrap() {
        let target = &patch["target"];
        let ops: json_patch::Patch =
            serde_saphyr::from_str(patch["patch"].as_str().unwrap()).unwrap();
        let doc = docs
            .iter_mut()
            .find(|d| d["kind"] == target["kind"] && d["metadata"]["name"] == target["name"])
            .unwrap();
        json_patch::patch(doc, &ops).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    docs
}

#[test]
fn the_cert_manager_overlay_serves_the_certificate_cainjector_vouches_for() {
    let docs = overlay("cert-manager");
    let (args, deployment) = controller_cli(&docs);
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
    let shared: ConfigMap = typed(find(&base, "ConfigMap", "ssh-fwd-config")).unwrap();
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
