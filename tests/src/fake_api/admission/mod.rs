//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
//! (admissionregistration.k8s.io/v1) as kube-apiserver runs them after
//! authorization and object validation, before a write is stored: for each
//! policy whose `matchConstraints` pick the request, each binding of it
//! whose `matchResources` do too, the `matchConditions` (all true, or the
//! policy is not about this request), then the `variables` in order and
//! every validation with `object`, `oldObject` (null on CREATE; `object`
//! null on DELETE), `request` (the AdmissionRequest: operation, name,
//! namespace, resource, subResource, userInfo with username, uid, groups,
//! extra), `params` (null: no paramKind) and `namespaceObject`. A
//! validation that is false denies with its message (messageExpression,
//! else message, else `failed expression: ...`) and reason (default
//! Invalid, 422); one that fails to evaluate denies under failurePolicy
//! Fail (the default) and is skipped under Ignore. The first denial is
//! answered as the real server words it:
//! `RESOURCE "NAME" is forbidden: ValidatingAdmissionPolicy 'P' with
//! binding 'B' denied request: MESSAGE`.
//!
//! Loading refuses what the fake cannot stand in for (paramKind,
//! auditAnnotations, an expression cel.rs cannot vouch for), loudly.

mod cel;
mod matching;

use serde_json::{Value, json};

pub use matching::Target;

use self::cel::{Expression, value};
use super::{auth::UserInfo, status::ApiError};

#[derive(Clone, Debug)]
struct Validation {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    /// Forbidden, Invalid, Unauthorized or RequestEntityTooLarge.
    reason: &'static str,
}

#[derive(Clone, Debug)]
struct Policy {
    name: String,
    ignore_failures: bool,
    constraints: Value,
    conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
}

#[derive(Clone, Debug)]
struct Binding {
    name: String,
    policy: String,
    resources: Value,
    deny: bool,
}

/// The cluster's validating admission policies and their bindings.
#[derive(Clone, Debug, Default)]
pub struct Policies {
    policies: Vec<Policy>,
    bindings: Vec<Binding>,
}

fn compile(text: &Value, what: &str) -> Result<Expression, String> {
    let text = text
        .as_str()
        .ok_or_else(|| format!("{what}: no expression"))?;
    Expression::compile(text).map_err(|e| format!("{what}: {e}"))
}

fn named(list: &Value, what: &str) -> Result<Vec<(String, Expression)>, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            let name = item["name"].as_str().unwrap_or("").to_owned();
            let expression = compile(&item["expression"], &format!("{what} {name}"))?;
            Ok((name, expression))
        })
        .collect()
}

fn reason(text: Option<&str>) -> Result<&'static str, String> {
    Ok(match text {
        None | Some("Invalid") => "Invalid",
        Some("Forbidden") => "Forbidden",
        Some("Unauthorized") => "Unauthorized",
        Some("RequestEntityTooLarge") => "RequestEntityTooLarge",
        Some(other) => return Err(format!("reason {other:?} is not one Kubernetes allows")),
    })
}

fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

impl Policies {
    /// Takes in one object; `Ok(false)` for another kind. A policy that
    /// does not compile, or uses what the fake does not emulate, is an
    /// error naming it.
    pub fn add(&mut self, doc: &Value) -> Result<bool, String> {
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_owned();
        match doc["kind"].as_str().unwrap_or("") {
            "ValidatingAdmissionPolicy" => {
                let policy = Self::policy(&name, &doc["spec"])
                    .map_err(|e| format!("ValidatingAdmissionPolicy {name}: {e}"))?;
                self.policies.push(policy);
            }
            "ValidatingAdmissionPolicyBinding" => {
                let binding = Self::binding(&name, &doc["spec"])
                    .map_err(|e| format!("ValidatingAdmissionPolicyBinding {name}: {e}"))?;
                self.bindings.push(binding);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn policy(name: &str, spec: &Value) -> Result<Policy, String> {
        for unsupported in ["paramKind", "auditAnnotations"] {
            if spec.get(unsupported).is_some() {
                return Err(format!("{unsupported} is not emulated by the fake API"));
            }
        }
        let ignore_failures = match spec["failurePolicy"].as_str() {
            None | Some("Fail") => false,
            Some("Ignore") => true,
            Some(other) => return Err(format!("failurePolicy {other:?}")),
        };
        matching::check(&spec["matchConstraints"])?;
        let validations = spec["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, v)| {
                Ok(Validation {
                    expression: compile(&v["expression"], &format!("validations[{i}]"))?,
                    message: v["message"].as_str().map(str::to_owned),
                    message_expression: match v.get("messageExpression") {
                        Some(text) => Some(compile(text, &format!("validations[{i}] message"))?),
                        None => None,
                    },
                    reason: reason(v["reason"].as_str())?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if validations.is_empty() {
            return Err("no validations".into());
        }
        Ok(Policy {
            name: name.to_owned(),
            ignore_failures,
            constraints: spec["matchConstraints"].clone(),
            conditions: named(&spec["matchConditions"], "matchConditions")?,
            variables: named(&spec["variables"], "variables")?,
            validations,
        })
    }

    fn binding(name: &str, spec: &Value) -> Result<Binding, String> {
        if spec.get("paramRef").is_some() {
            return Err("paramRef is not emulated by the fake API".into());
        }
        if spec.get("matchResources").is_some() {
            matching::check(&spec["matchResources"])?;
        }
        let actions: Vec<&str> = spec["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if actions.is_empty()
            || actions
                .iter()
                .any(|a| !["Deny", "Warn", "Audit"].contains(a))
        {
            return Err(format!("validationActions {actions:?}"));
        }
        Ok(Binding {
            name: name.to_owned(),
            policy: spec["policyName"].as_str().unwrap_or("").to_owned(),
            resources: spec.get("matchResources").cloned().unwrap_or(Value::Null),
            deny: actions.contains(&"Deny"),
        })
    }

    /// The (policy, binding) names that bind, for a check that every
    /// policy is bound and every binding names a policy.
    pub fn bound(&self) -> (Vec<(String, String)>, Vec<String>, Vec<String>) {
        let pairs = self
            .bindings
            .iter()
            .filter(|b| self.policies.iter().any(|p| p.name == b.policy))
            .map(|b| (b.policy.clone(), b.name.clone()))
            .collect::<Vec<_>>();
        let unbound = self
            .policies
            .iter()
            .filter(|p| !pairs.iter().any(|(policy, _)| policy == &p.name))
            .map(|p| p.name.clone())
            .collect();
        let dangling = self
            .bindings
            .iter()
            .filter(|b| !self.policies.iter().any(|p| p.name == b.policy))
            .map(|b| b.name.clone())
            .collect();
        (pairs, unbound, dangling)
    }

    /// Admits `target` from `user`, or denies it as the API server does.
    pub fn admit(&self, target: &Target<'_>, user: &UserInfo) -> Result<(), ApiError> {
        let bindings = Bindings::of(target, user);
        for policy in &self.policies {
            if !matching::matches(&policy.constraints, target) {
                continue;
            }
            for binding in self.bindings.iter().filter(|b| b.policy == policy.name) {
                let resources_ok =
                    binding.resources.is_null() || matching::matches(&binding.resources, target);
                if !resources_ok || !binding.deny {
                    continue;
                }
                if let Some(message) = policy.decide(&bindings) {
                    let (reason, message) = message;
                    return Err(denied(target, policy, binding, reason, &message));
                }
            }
        }
        Ok(())
    }
}

/// The variables every expression of one request sees.
struct Bindings {
    object: ::cel::Value,
    old: ::cel::Value,
    request: ::cel::Value,
    namespace: ::cel::Value,
}

impl Bindings {
    fn of(target: &Target<'_>, user: &UserInfo) -> Self {
        // Every kind the fake serves is at v1.
        let version = "v1";
        let request = json!({
            "uid": "00000000-0000-4000-a000-000000000000",
            "resource": {"group": target.group, "version": version, "resource": target.resource},
            "requestResource": {"group": target.group, "version": version, "resource": target.resource},
            "subResource": target.subresource,
            "requestSubResource": target.subresource,
            "name": target.name,
            "namespace": target.namespace,
            "operation": target.operation,
            "userInfo": user.to_json(),
            "dryRun": false,
        });
        let namespace = if target.namespace.is_empty() {
            Value::Null
        } else {
            json!({"metadata": {"name": target.namespace,
                   "labels": {"kubernetes.io/metadata.name": target.namespace}}})
        };
        Self {
            object: target.object.map_or(::cel::Value::Null, value),
            old: target.old.map_or(::cel::Value::Null, value),
            request: value(&request),
            namespace: value(&namespace),
        }
    }
}

impl Policy {
    /// The first denial of this policy for a request, as (reason,
    /// message); `None` when it admits.
    fn decide(&self, b: &Bindings) -> Option<(&'static str, String)> {
        let mut vars = std::collections::HashMap::<String, ::cel::Value>::new();
        let bind = |vars: &std::collections::HashMap<String, ::cel::Value>| {
            ::cel::Value::from(vars.clone())
        };
        let error = |message: String| (!self.ignore_failures).then_some(("Invalid", message));
        let base = |v: &::cel::Value| {
            [
                ("object", b.object.clone()),
                ("oldObject", b.old.clone()),
                ("request", b.request.clone()),
                ("params", ::cel::Value::Null),
                ("namespaceObject", b.namespace.clone()),
                ("variables", v.clone()),
            ]
        };
        let run = |e: &Expression, v: &::cel::Value| {
            let all = base(v);
            let refs: Vec<(&str, &::cel::Value)> = all.iter().map(|(n, v)| (*n, v)).collect();
            (e.eval_bool(&refs), e.eval(&refs))
        };
        let empty = bind(&vars);
        for (_, condition) in &self.conditions {
            match run(condition, &empty).0 {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return error(e),
            }
        }
        for (name, variable) in &self.variables {
            // Evaluated in order (a later one may use an earlier one); one
            // that fails is left out, so a validation using it fails.
            if let Ok(v) = run(variable, &bind(&vars)).1 {
                vars.insert(name.clone(), v);
            }
        }
        let vars = bind(&vars);
        for validation in &self.validations {
            match run(&validation.expression, &vars).0 {
                Ok(true) => {}
                Ok(false) => {
                    return Some((validation.reason, self.message(validation, &vars, &run)));
                }
                Err(e) => {
                    if let Some(denial) = error(e) {
                        return Some(denial);
                    }
                }
            }
        }
        None
    }

    fn message<R>(&self, validation: &Validation, vars: &::cel::Value, run: &R) -> String
    where
        R: Fn(&Expression, &::cel::Value) -> (Result<bool, String>, Result<::cel::Value, String>),
    {
        let from_expression = validation.message_expression.as_ref().and_then(|e| {
            match run(e, vars).1 {
                Ok(::cel::Value::String(s)) => Some(s.trim().to_owned()),
                _ => None,
            }
            .filter(|m| !m.is_empty() && !m.contains('\n'))
        });
        from_expression
            .or_else(|| validation.message.as_ref().map(|m| m.trim().to_owned()))
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| format!("failed expression: {}", validation.expression.text.trim()))
    }
}

/// The API server's answer to a denial: admission's Forbidden wording
/// (`RESOURCE[.GROUP] "NAME" is forbidden: ...`, the name from the request
/// or the object), with the validation's reason and its status code.
fn denied(
    target: &Target<'_>,
    policy: &Policy,
    binding: &Binding,
    reason: &'static str,
    message: &str,
) -> ApiError {
    let resource = if target.group.is_empty() {
        target.resource.to_owned()
    } else {
        format!("{}.{}", target.resource, target.group)
    };
    let name = [target.object, target.old]
        .into_iter()
        .flatten()
        .find_map(|o| {
            let meta = &o["metadata"];
            meta["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .or_else(|| meta["generateName"].as_str())
        })
        .filter(|_| target.name.is_empty())
        .unwrap_or(if target.name.is_empty() {
            "Unknown"
        } else {
            target.name
        });
    ApiError {
        code: reason_code(reason),
        reason,
        message: format!(
            "{resource} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
            policy.name, binding.name
        ),
    }
}

#[cfg(test)]
mod tests;
