//! RBAC as kube-apiserver's RBAC authorizer decides it, from Role,
//! ClusterRole, RoleBinding and ClusterRoleBinding objects: a request is
//! allowed when a rule bound to its user (by name, group, or service
//! account) matches its verb, API group, resource (with the subresource:
//! `services/status`, `*`, `*/status`, `pods/*`) and name (`resourceNames`;
//! a request without a name, a create or a list, matches no rule that
//! names some). A ClusterRoleBinding grants everywhere; a RoleBinding
//! grants, in its own namespace only, its Role or a ClusterRole.
//! ClusterRoles with an `aggregationRule` have the rules of the ClusterRoles
//! their selectors pick, as the aggregation controller writes them.
//! Denied: 403 with the API server's message.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{auth::UserInfo, status::ApiError};

/// What RBAC looks at in a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    /// "" for the main resource.
    pub subresource: String,
    /// "" for a cluster-scoped request.
    pub namespace: String,
    /// "" for a request without a name (create, list, watch).
    pub name: String,
}

impl Attributes {
    /// The resource as rules name it: `services/status`.
    fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The roles and bindings of a cluster.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    cluster_roles: BTreeMap<String, Value>,
    /// By (namespace, name).
    roles: BTreeMap<(String, String), Value>,
    cluster_bindings: Vec<Value>,
    bindings: Vec<Value>,
}

impl Rbac {
    /// Takes in one object; `Ok(false)` for a kind RBAC does not read.
    pub fn add(&mut self, doc: &Value) -> Result<bool, String> {
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let namespace = doc["metadata"]["namespace"].as_str().unwrap_or("");
        match doc["kind"].as_str().unwrap_or("") {
            "ClusterRole" => {
                self.cluster_roles.insert(name, doc.clone());
            }
            "Role" | "RoleBinding" if namespace.is_empty() => {
                return Err(format!("{} {name} has no namespace", doc["kind"]));
            }
            "Role" => {
                self.roles.insert((namespace.to_owned(), name), doc.clone());
            }
            "ClusterRoleBinding" => self.cluster_bindings.push(doc.clone()),
            "RoleBinding" => self.bindings.push(doc.clone()),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether RBAC allows `user` the request `attrs`.
    pub fn allows(&self, user: &UserInfo, attrs: &Attributes) -> bool {
        let cluster_wide = self
            .cluster_bindings
            .iter()
            .filter(|b| binds(b, user))
            .filter(|b| b["roleRef"]["kind"] == "ClusterRole")
            .any(|b| self.role_allows("", role_name(b), attrs));
        cluster_wide
            || (!attrs.namespace.is_empty()
                && self
                    .bindings
                    .iter()
                    .filter(|b| b["metadata"]["namespace"] == attrs.namespace.as_str())
                    .filter(|b| binds(b, user))
                    .any(|b| match b["roleRef"]["kind"].as_str() {
                        Some("ClusterRole") => self.role_allows("", role_name(b), attrs),
                        Some("Role") => self.role_allows(&attrs.namespace, role_name(b), attrs),
                        _ => false,
                    }))
    }

    /// Whether the Role (`namespace` set) or ClusterRole `name` has a rule
    /// matching `attrs`.
    fn role_allows(&self, namespace: &str, name: &str, attrs: &Attributes) -> bool {
        let rules = if namespace.is_empty() {
            self.cluster_role_rules(name, 0)
        } else {
            self.roles
                .get(&(namespace.to_owned(), name.to_owned()))
                .and_then(|r| r["rules"].as_array())
                .cloned()
                .unwrap_or_default()
        };
        rules.iter().any(|rule| rule_matches(rule, attrs))
    }

    /// A ClusterRole's rules, its aggregated ones included.
    fn cluster_role_rules(&self, name: &str, depth: u8) -> Vec<Value> {
        let Some(role) = self.cluster_roles.get(name) else {
            return Vec::new();
        };
        let mut rules = role["rules"].as_array().cloned().unwrap_or_default();
        let selectors = role["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if depth > 4 || selectors.is_empty() {
            return rules;
        }
        for (other, doc) in &self.cluster_roles {
            let labels = &doc["metadata"]["labels"];
            let picked = selectors.iter().any(|s| {
                s["matchLabels"]
                    .as_object()
                    .is_some_and(|m| m.iter().all(|(k, v)| &labels[k] == v))
            });
            if picked && other != name {
                rules.extend(self.cluster_role_rules(other, depth + 1));
            }
        }
        rules
    }
}

fn role_name(binding: &Value) -> &str {
    binding["roleRef"]["name"].as_str().unwrap_or("")
}

/// Whether `binding` names `user` among its subjects.
fn binds(binding: &Value, user: &UserInfo) -> bool {
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| {
            let name = s["name"].as_str().unwrap_or("");
            match s["kind"].as_str() {
                Some("User") => user.username == name,
                Some("Group") => user.groups.iter().any(|g| g == name),
                Some("ServiceAccount") => {
                    let namespace = s["namespace"].as_str().unwrap_or("");
                    user.username == format!("system:serviceaccount:{namespace}:{name}")
                }
                _ => false,
            }
        })
}

fn listed(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .any(|v| v == "*" || v == wanted)
}

/// A rule's resources against the request's: `*` (everything, its
/// subresources too), the resource exactly, `*/SUB` or `RESOURCE/*`.
fn resource_matches(rule: &Value, attrs: &Attributes) -> bool {
    let full = attrs.full_resource();
    rule["resources"].as_array().into_iter().flatten().any(|r| {
        let r = r.as_str().unwrap_or("");
        r == "*"
            || r == full
            || (!attrs.subresource.is_empty()
                && (r == format!("*/{}", attrs.subresource)
                    || r == format!("{}/*", attrs.resource)))
    })
}

fn rule_matches(rule: &Value, attrs: &Attributes) -> bool {
    let names_ok = match rule["resourceNames"].as_array() {
        Some(names) if !names.is_empty() => {
            !attrs.name.is_empty() && names.iter().any(|n| n == attrs.name.as_str())
        }
        _ => true,
    };
    listed(&rule["verbs"], &attrs.verb)
        && listed(&rule["apiGroups"], &attrs.group)
        && resource_matches(rule, attrs)
        && names_ok
}

/// The API server's answer to a request RBAC denied.
pub fn forbidden(user: &UserInfo, attrs: &Attributes) -> ApiError {
    let group_resource = if attrs.group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.group)
    };
    let object = if attrs.name.is_empty() {
        group_resource
    } else {
        format!("{group_resource} \"{}\"", attrs.name)
    };
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{}\"", attrs.namespace)
    };
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!(
            "{object} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
            user.username,
            attrs.verb,
            attrs.full_resource(),
            attrs.group
        ),
    }
}
