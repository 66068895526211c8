//! Every combination of deploy/'s components, and every overlay, built by
//! kustomize and checked as a whole: the objects parse into their types,
//! none twice; the workloads' arguments pass the binary's own flag checks;
//! the agent gets the capabilities it asks for; the RBAC still grants
//! exactly the API calls the code makes; the admission policies compile
//! and bind.

use std::{collections::BTreeSet, path::Path};

use k8s_openapi::api::{apps::v1::Deployment, policy::v1::PodDisruptionBudget};
use serde_json::Value;

use super::{
    DEPLOY, NAMESPACE, added_capabilities, agent_cli, asked_capabilities, check_kind,
    controller_cli, granted, needed, render, typed,
};
use ssh_fwd::k8s::api_calls;

/// The optional parts, each a kustomize Component.
const COMPONENTS: [&str; 4] = [
    "components/announce-l2",
    "components/cert-manager",
    "components/webhook-network-policy",
    "monitoring",
];

/// Kinds with no namespace.
const CLUSTER_SCOPED: [&str; 6] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

#[test]
fn every_component_is_in_the_combinations() {
    let mut found = BTreeSet::new();
    for dir in ["components", "."] {
        for entry in std::fs::read_dir(Path::new(DEPLOY).join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let kustomization = path.join("kustomization.yaml");
            if kustomization.exists() && super::documents(&kustomization)[0]["kind"] == "Component"
            {
                let name = path.strip_prefix(DEPLOY).unwrap().to_string_lossy();
                found.insert(name.trim_start_matches("./").to_owned());
            }
        }
    }
    let listed: BTreeSet<String> = COMPONENTS.iter().map(|c| (*c).to_owned()).collect();
    assert_eq!(found, listed, "COMPONENTS must list every Component");
}

#[test]
fn every_combination_of_the_components_builds_and_passes_the_binarys_checks() {
    for mask in 0..1u32 << COMPONENTS.len() {
        let chosen: Vec<&str> = (COMPONENTS.iter().enumerate())
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| *c)
            .collect();
        let components: Vec<String> = chosen.iter().map(|c| format!("DEPLOY/{c}")).collect();
        let kustomization = format!(
            "resources: [DEPLOY/base]\ncomponents: [{}]\n",
            components.join(", ")
        );
        let docs = render::render_kustomization(&format!("combination-{mask}"), &kustomization)
            .unwrap_or_else(|e| panic!("base with {chosen:?}: {e}"));
        check_install(&docs, &chosen).unwrap_or_else(|e| panic!("base with {chosen:?}: {e}"));
    }
}

#[test]
fn every_overlay_builds_and_passes_the_binarys_checks() {
    let overlays = std::fs::read_dir(Path::new(DEPLOY).join("overlays")).unwrap();
    let mut seen = 0;
    for overlay in overlays {
        let name = overlay.unwrap().file_name().to_string_lossy().into_owned();
        let dir = format!("overlays/{name}");
        let kustomization =
            super::documents(&Path::new(DEPLOY).join(&dir).join("kustomization.yaml"));
        let chosen: Vec<String> = (kustomization[0]["components"].as_array().into_iter())
            .flatten()
            .map(|c| c.as_str().unwrap().trim_start_matches("../../").to_owned())
            .collect();
        let chosen: Vec<&str> = chosen.iter().map(String::as_str).collect();
        check_install(&render(&dir), &chosen).unwrap_or_else(|e| panic!("{dir}: {e}"));
        seen += 1;
    }
    assert!(seen >= 3, "{seen} overlays");
}

/// The checks every rendered install passes; `chosen`: its components.
fn check_install(docs: &[Value], chosen: &[&str]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for doc in docs {
        let (kind, name) = (doc["kind"].as_str().unwrap_or(""), &doc["metadata"]["name"]);
        check_kind(doc).map_err(|e| format!("{kind} {name}: {e}"))?;
        // kustomize does not know every cluster-scoped kind (it puts its
        // namespace on the admission policies, which the API server
        // ignores); the namespaced ones must be in ssh-fwd's.
        let namespace = doc["metadata"]["namespace"].as_str();
        if !CLUSTER_SCOPED.contains(&kind) && namespace != Some(NAMESPACE) {
            return Err(format!("{kind} {name} in namespace {namespace:?}"));
        }
        if !names.insert((kind.to_owned(), name.to_string())) {
            return Err(format!("{kind} {name} twice"));
        }
    }
    // The agent: its flags and their cross-checks, and the capabilities
    // it asks for (announce-l2 adds NET_RAW with --announce l2).
    let (agent, ds) = agent_cli(docs);
    ssh_fwd::agent::check_announce(&agent)?;
    let announcing = agent.announce.announce == ssh_fwd::agent::AnnounceMode::L2;
    if announcing != chosen.contains(&"components/announce-l2") {
        return Err(format!("--announce {:?}", agent.announce.announce));
    }
    let (added, asked) = (added_capabilities(&ds), asked_capabilities(&agent));
    if added != asked {
        return Err(format!(
            "the agent is granted {added:?}, asks for {asked:?}"
        ));
    }
    // The controller: its flags, and the certificate where it reads it.
    let (controller, deployment) = controller_cli(docs);
    controller.admission.check().map_err(|e| e.to_string())?;
    let cert_manager = chosen.contains(&"components/cert-manager");
    if controller.admission.webhook_self_signed == cert_manager {
        return Err("the webhook certificate: self-signed or cert-manager's, one".into());
    }
    if let Some(dir) = &controller.admission.webhook_cert_dir {
        let pod = deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        let mounted = (pod.containers[0].volume_mounts.iter().flatten())
            .any(|m| Path::new(&m.mount_path) == dir);
        if !mounted {
            return Err(format!(
                "nothing mounted at --webhook-cert-dir {}",
                dir.display()
            ));
        }
    }
    check_disruption_budget(docs, &deployment)?;
    // Least privilege, whatever is added.
    for (account, calls) in [
        ("ssh-fwd-agent", api_calls::AGENT),
        ("ssh-fwd-controller", api_calls::CONTROLLER),
    ] {
        if granted(docs, account) != needed(calls) {
            return Err(format!(
                "the RBAC of {account} differs from k8s/api_calls.rs"
            ));
        }
    }
    let mut cluster = ssh_fwd_tests::fake_api::Cluster::bootstrap()?;
    for doc in docs {
        cluster.add(doc)?;
    }
    let (pairs, unbound, dangling) = cluster.policies.bound();
    let policies = (docs.iter())
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .count();
    if !unbound.is_empty() || !dangling.is_empty() || pairs.len() != policies || policies < 7 {
        return Err(format!(
            "admission policies: {pairs:?} bound, {unbound:?} unbound, {dangling:?} dangling"
        ));
    }
    Ok(())
}

/// A voluntary disruption leaves a controller replica, and the replicas
/// prefer different nodes.
fn check_disruption_budget(docs: &[Value], deployment: &Deployment) -> Result<(), String> {
    let budget: PodDisruptionBudget = typed(super::find(
        docs,
        "PodDisruptionBudget",
        "ssh-fwd-controller",
    ))?;
    let spec = deployment.spec.as_ref().unwrap();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let budget = budget.spec.unwrap();
    let selected = budget.selector.unwrap().match_labels.unwrap();
    if selected.is_empty() || !selected.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return Err(format!(
            "the budget selects {selected:?}, not the controller's pods"
        ));
    }
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let replicas = spec.replicas.unwrap_or(1);
    if budget.min_available != Some(IntOrString::Int(1)) || replicas < 2 {
        return Err(format!(
            "minAvailable {:?} of {replicas} replicas: one may go, one stays",
            budget.min_available
        ));
    }
    let pod = spec.template.spec.as_ref().unwrap();
    let terms = (pod.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .ok_or("no preferred pod anti-affinity")?;
    let apart = terms.iter().any(|t| {
        let term = &t.pod_affinity_term;
        let selects = (term.label_selector.as_ref())
            .and_then(|s| s.match_labels.as_ref())
            .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| labels.get(k) == Some(v)));
        term.topology_key == "kubernetes.io/hostname" && selects
    });
    if !apart {
        return Err(format!("no anti-affinity by hostname among {terms:?}"));
    }
    let required = (pod.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if required.is_some() {
        return Err("required anti-affinity leaves a one-node cluster one replica short".into());
    }
    Ok(())
}
