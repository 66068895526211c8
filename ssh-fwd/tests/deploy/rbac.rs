//! The RBAC grants exactly the API calls the code makes
//! (`k8s::api_calls`), and the admission policies load, compile and bind.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

use super::{NAMESPACE, base, find};
use ssh_fwd::k8s::api_calls::{self, ApiCall};

/// What the rules bound to a ServiceAccount grant, as (group, resource,
/// verb, only in our namespace).
pub fn granted(docs: &[Value], account: &str) -> BTreeSet<(String, String, String, bool)> {
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

pub fn needed(calls: &[ApiCall]) -> BTreeSet<(String, String, String, bool)> {
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
