//! What the webhook changes in a pod, as an RFC 6902 patch: pure, from the
//! pod as the API server sent it and the port decided for it. The endpoint
//! annotations, the endpoint variable in every container, and (when a keys
//! Secret is named) the `install-keys` init container and sidecar with
//! their volumes (`keys.rs`).

use json_patch::Patch;
use serde_json::{Value, json};

use super::{
    keys,
    patch::{Ops, containers},
};
use crate::vocabulary;

/// What the webhook injects, from the controller's flags.
#[derive(Clone, Debug)]
pub struct Injection {
    /// The endpoint variable (`--env-name`).
    pub variable: String,
    /// `HOST` of `HOST:PORT`: `--ssh-hostname`, else the SSH IP.
    pub host: String,
    pub keys: keys::Keys,
    /// `--host-certs`: the variable (`--sshd-config-env-name`) every
    /// container gets, naming the `sshd_config` snippet that loads the
    /// job's host key and certificate.
    pub host_certs: Option<String>,
}

/// The port decided for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Port {
    /// Reserved for it; the pod carries `token`.
    Reserved { port: u16, token: String },
    /// A dry run: the port a real create would likely get, not reserved.
    DryRun { port: u16 },
    /// None could be reserved; the controller assigns one once the pod
    /// exists.
    None { why: String },
}

/// The patch and what the client is warned of.
#[derive(Debug, Default)]
pub struct Mutation {
    pub patch: Patch,
    pub warnings: Vec<String>,
}

/// The changes for `pod` (a Pod's JSON) given `port`.
pub fn mutate(pod: &Value, port: &Port, injection: &Injection) -> Mutation {
    let mut ops = Ops::default();
    let mut warnings = Vec::new();
    // A name of our making, whatever the pod says: the leader issues into
    // the Secret this annotation names (`controller::host_certs`).
    let host_key = injection.host_certs.as_ref().map(|_| host_key_secret());
    annotate(pod, port, injection, host_key.as_deref(), &mut ops);
    let endpoint = match port {
        Port::Reserved { port, .. } | Port::DryRun { port } => {
            Some(crate::controller::ssh_ips::endpoint(&injection.host, *port))
        }
        Port::None { .. } => None,
    };
    if let Some(endpoint) = &endpoint {
        set_variable(pod, &injection.variable, endpoint, &mut ops, &mut warnings);
    }
    if let Some(variable) = &injection.host_certs {
        let snippet = format!(
            "{}/{}",
            injection.keys.dir.trim_end_matches('/'),
            crate::host_certs::SNIPPET_FILE
        );
        set_variable(pod, variable, &snippet, &mut ops, &mut warnings);
    }
    // Last: it inserts init containers at the front, which shifts the
    // indices the operations above use.
    let host_key = host_key.as_deref();
    keys::inject(pod, &injection.keys, host_key, &mut ops, &mut warnings);
    Mutation {
        patch: ops.into_patch(),
        warnings,
    }
}

/// A new host key Secret's name: the prefix and 16 random lowercase
/// letters and digits (the pod's own name may not be known yet).
fn host_key_secret() -> String {
    use rand::{Rng as _, distr::Alphanumeric};
    let suffix: String = (rand::rng().sample_iter(&Alphanumeric))
        .map(|c| char::from(c).to_ascii_lowercase())
        .take(16)
        .collect();
    format!("{}{suffix}", vocabulary::HOST_KEY_SECRET_PREFIX)
}

/// The endpoint, reservation and host key annotations; values a client set
/// in ours are replaced or removed, so none can be smuggled in.
fn annotate(
    pod: &Value,
    port: &Port,
    injection: &Injection,
    host_key: Option<&str>,
    ops: &mut Ops,
) {
    let current = pod["metadata"]["annotations"].as_object();
    let mut ours: Vec<(&str, String)> = Vec::new();
    let mut remove: Vec<&str> = vec![vocabulary::ANNOUNCED, vocabulary::HOST_CERTIFICATE];
    match host_key {
        Some(name) => ours.push((vocabulary::HOST_KEY_SECRET, name.to_owned())),
        None => remove.push(vocabulary::HOST_KEY_SECRET),
    }
    match port {
        Port::Reserved { port, token } => {
            ours.push((
                vocabulary::ENDPOINT,
                crate::controller::ssh_ips::endpoint(&injection.host, *port),
            ));
            ours.push((vocabulary::RESERVATION, token.clone()));
            remove.push(vocabulary::ADMISSION);
        }
        Port::DryRun { port } => {
            ours.push((
                vocabulary::ENDPOINT,
                crate::controller::ssh_ips::endpoint(&injection.host, *port),
            ));
            remove.extend([vocabulary::RESERVATION, vocabulary::ADMISSION]);
        }
        Port::None { why } => {
            ours.push((vocabulary::ADMISSION, why.clone()));
            remove.extend([vocabulary::RESERVATION, vocabulary::ENDPOINT]);
        }
    }
    let Some(current) = current else {
        let all: serde_json::Map<String, Value> = ours
            .into_iter()
            .map(|(k, v)| (k.to_owned(), json!(v)))
            .collect();
        ops.add(&["metadata", "annotations"], Value::Object(all));
        return;
    };
    for key in remove {
        if current.contains_key(key) {
            ops.remove(&["metadata", "annotations", key]);
        }
    }
    for (key, value) in ours {
        ops.add(&["metadata", "annotations", key], json!(value));
    }
}

/// `variable=endpoint` first in every container's env (first, so the
/// container's own variables can refer to it as `$(VARIABLE)`), except in
/// a container that sets the variable itself: that value is kept.
fn set_variable(
    pod: &Value,
    variable: &str,
    endpoint: &str,
    ops: &mut Ops,
    warnings: &mut Vec<String>,
) {
    let entry = json!({"name": variable, "value": endpoint});
    for (list, i, container) in containers(pod) {
        let index = i.to_string();
        let env = container["env"].as_array();
        let name = container["name"].as_str().unwrap_or("?");
        match env {
            Some(env) if env.iter().any(|e| e["name"] == variable) => warnings.push(format!(
                "ssh-fwd: container {name} sets {variable} itself; its own value is kept"
            )),
            Some(_) => ops.add(&["spec", list, &index, "env", "0"], entry.clone()),
            None => ops.add(&["spec", list, &index, "env"], json!([entry.clone()])),
        }
    }
}

#[cfg(test)]
pub mod tests;
