//! Which requests a policy or binding is about (`matchConstraints`,
//! `matchResources`), as the API server's admission matcher decides it:
//! resource rules (API groups, versions, operations, resources with their
//! subresources: `services` is the main resource only, `services/status`
//! its status, `*` every resource, `*/*` every resource and subresource),
//! the excluded rules, and the namespace and object selectors.

use serde_json::Value;

/// A request as the matcher sees it.
#[derive(Debug)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// CREATE, UPDATE, DELETE.
    pub operation: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

/// A `matchConstraints` or `matchResources`; `Err` for what the fake
/// does not emulate (so a policy relying on it fails to load).
pub fn check(spec: &Value) -> Result<(), String> {
    if let Some(selector) = spec.get("namespaceSelector") {
        check_selector(selector)?;
    }
    if let Some(selector) = spec.get("objectSelector") {
        check_selector(selector)?;
    }
    for rule in rules(spec, "resourceRules").chain(rules(spec, "excludeResourceRules")) {
        if rule.get("scope").is_some_and(|s| s != "*") {
            return Err("resourceRules[].scope is not emulated".into());
        }
    }
    Ok(())
}

fn rules<'a>(spec: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    spec[field].as_array().into_iter().flatten()
}

/// Whether `spec` (a policy's `matchConstraints` or a binding's
/// `matchResources`) picks `target`.
pub fn matches(spec: &Value, target: &Target<'_>) -> bool {
    let included = spec["resourceRules"]
        .as_array()
        .is_none_or(|_| rules(spec, "resourceRules").any(|r| rule_matches(r, target)));
    let excluded = rules(spec, "excludeResourceRules").any(|r| rule_matches(r, target));
    // Every namespace carries kubernetes.io/metadata.name (the fake has no
    // other namespace labels); a cluster-scoped request matches any
    // namespace selector.
    let namespace_labels = serde_json::json!({"kubernetes.io/metadata.name": target.namespace});
    let namespace_ok =
        target.namespace.is_empty() || selects(&spec["namespaceSelector"], &namespace_labels);
    let object_ok = [target.object, target.old]
        .into_iter()
        .flatten()
        .any(|o| selects(&spec["objectSelector"], &o["metadata"]["labels"]))
        || (target.object.is_none() && target.old.is_none());
    included && !excluded && namespace_ok && object_ok
}

fn listed(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .any(|v| v == "*" || v == wanted)
}

fn rule_matches(rule: &Value, target: &Target<'_>) -> bool {
    let resource_ok = rule["resources"].as_array().into_iter().flatten().any(|r| {
        let r = r.as_str().unwrap_or("");
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        let res_ok = res == "*" || res == target.resource;
        let sub_ok = sub == "*" || sub == target.subresource;
        res_ok && sub_ok
    });
    let names = rule["resourceNames"].as_array().filter(|n| !n.is_empty());
    let name_ok = names.is_none_or(|n| n.iter().any(|v| v == target.name));
    listed(&rule["apiGroups"], target.group)
        && listed(&rule["apiVersions"], "v1")
        && listed(&rule["operations"], target.operation)
        && resource_ok
        && name_ok
}

fn check_selector(selector: &Value) -> Result<(), String> {
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let op = e["operator"].as_str().unwrap_or("");
        if !["In", "NotIn", "Exists", "DoesNotExist"].contains(&op) {
            return Err(format!(
                "selector operator {op:?} is not one Kubernetes has"
            ));
        }
    }
    Ok(())
}

/// Whether a LabelSelector (null or `{}`: everything) picks `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels[k].as_str();
    let plain = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let in_values = |v: &str| e["values"].as_array().into_iter().flatten().any(|x| x == v);
            match e["operator"].as_str().unwrap_or("") {
                "In" => label(key).is_some_and(in_values),
                "NotIn" => !label(key).is_some_and(in_values),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    plain && expressions
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn target<'a>(resource: &'a str, subresource: &'a str, operation: &'a str) -> Target<'a> {
        Target {
            group: "",
            resource,
            subresource,
            operation,
            namespace: "jobs",
            name: "x",
            object: None,
            old: None,
        }
    }

    #[test]
    fn a_resource_rule_names_subresources_apart() {
        let spec = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                          "operations": ["UPDATE"], "resources": ["services"]}]});
        assert!(matches(&spec, &target("services", "", "UPDATE")));
        assert!(!matches(&spec, &target("services", "status", "UPDATE")));
        assert!(!matches(&spec, &target("services", "", "CREATE")));
        let status = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                            "operations": ["*"], "resources": ["*/status"]}]});
        assert!(matches(&status, &target("services", "status", "UPDATE")));
        assert!(!matches(&status, &target("services", "", "UPDATE")));
        let all = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                         "operations": ["*"], "resources": ["*"]}]});
        assert!(!matches(&all, &target("pods", "status", "UPDATE")));
        assert!(matches(&all, &target("pods", "", "DELETE")));
    }

    #[test]
    fn selectors_pick_by_namespace_name_and_object_labels() {
        let spec = json!({
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
            "objectSelector": {"matchLabels": {"app": "a"}}});
        let labelled = json!({"metadata": {"labels": {"app": "a"}}});
        let mut t = target("pods", "", "CREATE");
        t.object = Some(&labelled);
        assert!(matches(&spec, &t));
        t.namespace = "kube-system";
        assert!(!matches(&spec, &t));
        let other = json!({"metadata": {"labels": {"app": "b"}}});
        let mut t = target("pods", "", "CREATE");
        t.object = Some(&other);
        assert!(!matches(&spec, &t));
    }
}
