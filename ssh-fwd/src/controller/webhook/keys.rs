//! The authorized keys part of the mutation: for a pod that names a keys
//! Secret (annotation [`vocabulary::KEYS_SECRET`], else `--default-keys-secret`),
//! an emptyDir mounted read-only at `--keys-dir` in every container, the
//! Secret as a volume, and `ssh-fwd install-keys` twice: as an init
//! container (so the file exists before any container starts) and as a
//! native sidecar with `--watch` (an init container with `restartPolicy:
//! Always`), which rewrites the file when the kubelet updates the Secret
//! volume. No API credentials are needed in the pod.
//!
//! The keys are written into a directory of the emptyDir ([`KEYS_SUBDIR`]),
//! not its root: the root belongs to root and is writable by everyone, so
//! a user can make a directory in it but not make the root its own. That
//! directory, 0700 and the job user's (sshd's StrictModes), is what every
//! other container mounts at `--keys-dir` (`subPath`). So both install-keys
//! containers run as the keys' owner: for a user other than root, with
//! nothing Pod Security `restricted` refuses (non-root, no privilege
//! escalation, every capability dropped, the runtime's seccomp profile),
//! since Pod Security admission checks the pod after every mutating
//! webhook, whatever its failurePolicy. Keys owned by root are installed
//! as root with CHOWN alone (the group may be one root is not in).
//!
//! With `--host-certs`, the same containers also install the job's host
//! key and certificate (and the `sshd_config` snippet loading them) from
//! the per-pod Secret the leader issues once the pod has its port
//! ([`HOST_KEY_VOLUME`]), mounted in the install-keys containers only.
//! That volume is not optional: the pod starts once its certificate is
//! issued (a FailedMount until then), so no job's sshd starts with a host
//! key its users' known_hosts would refuse.

use std::time::Duration;

use serde_json::{Value, json};

use super::patch::{Ops, containers};
use crate::vocabulary;

/// The key in the Secret.
pub const SECRET_KEY: &str = "authorized_keys";
pub const KEYS_VOLUME: &str = "ssh-fwd-keys";
pub const SOURCE_VOLUME: &str = "ssh-fwd-keys-source";
pub const SOURCE_DIR: &str = "/var/run/ssh-fwd/keys-source";
/// Where install-keys mounts the keys volume.
pub const KEYS_MOUNT: &str = "/var/run/ssh-fwd/keys";
/// The directory of the keys volume that holds the file, mounted at
/// `--keys-dir` in every other container.
pub const KEYS_SUBDIR: &str = "keys";
pub const HOST_KEY_VOLUME: &str = "ssh-fwd-host-key";
pub const HOST_KEY_DIR: &str = "/var/run/ssh-fwd/host-key";
pub const INSTALL_CONTAINER: &str = "ssh-fwd-install-keys";
pub const WATCH_CONTAINER: &str = "ssh-fwd-keys-watch";

/// The keys settings, from the controller's flags.
#[derive(Clone, Debug)]
pub struct Keys {
    pub image: String,
    pub dir: String,
    pub file: String,
    /// `--keys-uid`; else the runAsUser of sshd's container ([`owner`]).
    pub uid: Option<i64>,
    pub default_secret: Option<String>,
    pub interval: Duration,
}

/// What install-keys installs in one pod: the keys Secret's authorized
/// keys, the host key Secret's pair, or both.
struct Sources<'a> {
    keys: Option<String>,
    host_key: Option<&'a str>,
}

/// Adds the keys volumes, mounts and containers when the pod names a
/// Secret or gets a host key (`host_key`: its Secret's name); a reason it
/// cannot is a warning, and the pod is left without.
pub fn inject(
    pod: &Value,
    keys: &Keys,
    host_key: Option<&str>,
    ops: &mut Ops,
    warnings: &mut Vec<String>,
) {
    let secret = match secret_name(pod, keys) {
        Ok(secret) => secret,
        Err(why) => {
            warnings.push(format!("ssh-fwd: no SSH keys installed: {why}"));
            None
        }
    };
    if secret.is_none() && host_key.is_none() {
        return;
    }
    let sources = Sources {
        keys: secret,
        host_key,
    };
    if let Some(clash) = clash(pod) {
        warnings.push(format!(
            "ssh-fwd: no SSH keys installed: the pod already has {clash}"
        ));
        return;
    }
    for (list, i, container) in containers(pod) {
        let name = container["name"].as_str().unwrap_or("?");
        let taken = container["volumeMounts"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == keys.dir.as_str()));
        if taken {
            warnings.push(format!(
                "ssh-fwd: container {name} mounts something at {} already; the keys are not mounted there",
                keys.dir
            ));
            continue;
        }
        let mount = json!({"name": KEYS_VOLUME, "mountPath": keys.dir,
                           "subPath": KEYS_SUBDIR, "readOnly": true});
        ops.push(
            container,
            &["spec", list, &i.to_string(), "volumeMounts"],
            mount,
        );
    }
    let spec = &pod["spec"];
    let mut volumes = vec![json!({"name": KEYS_VOLUME, "emptyDir": {"medium": "Memory"}})];
    // Optional: a missing Secret (or key) must not keep the pod from
    // starting (FailedMount); install-keys says what is missing, and the
    // sidecar installs the keys once the Secret appears.
    if let Some(secret) = &sources.keys {
        volumes.push(json!({"name": SOURCE_VOLUME, "secret": {
            "secretName": secret, "defaultMode": 0o444, "optional": true,
            "items": [{"key": SECRET_KEY, "path": SECRET_KEY}]}}));
    }
    if let Some(host_key) = sources.host_key {
        use crate::host_certs::{CERT_FILE, KEY_FILE};
        volumes.push(json!({"name": HOST_KEY_VOLUME, "secret": {
            "secretName": host_key, "defaultMode": 0o444,
            "items": [{"key": KEY_FILE, "path": KEY_FILE}, {"key": CERT_FILE, "path": CERT_FILE}]}}));
    }
    ops.push_all(spec, &["spec", "volumes"], volumes);
    let (uid, gid) = owner(pod, keys);
    let (install, watch) = (
        install_container(keys, &sources, uid, gid),
        watch_container(keys, &sources, uid, gid),
    );
    if spec["initContainers"].is_array() {
        // Each at the front, the watcher first: install-keys ends up first.
        ops.add(&["spec", "initContainers", "0"], watch);
        ops.add(&["spec", "initContainers", "0"], install);
    } else {
        ops.add(&["spec", "initContainers"], json!([install, watch]));
    }
}

/// The Secret named by the annotation, else the default; refused when it
/// is not a name the API server would accept.
fn secret_name(pod: &Value, keys: &Keys) -> Result<Option<String>, String> {
    let named = pod["metadata"]["annotations"][vocabulary::KEYS_SECRET].as_str();
    let Some(name) = named
        .map(str::to_owned)
        .or_else(|| keys.default_secret.clone())
    else {
        return Ok(None);
    };
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(Some(name))
    } else {
        Err(format!(
            "{key} is `{name}`, which is not a Secret name (lowercase letters, digits, '-' and '.')",
            key = vocabulary::KEYS_SECRET,
        ))
    }
}

/// A volume or container of ours the pod has already.
fn clash(pod: &Value) -> Option<String> {
    let has = |list: &str, name: &str| {
        pod["spec"][list]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["name"] == name))
    };
    for name in [KEYS_VOLUME, SOURCE_VOLUME, HOST_KEY_VOLUME] {
        if has("volumes", name) {
            return Some(format!("a volume named {name}"));
        }
    }
    for name in [INSTALL_CONTAINER, WATCH_CONTAINER] {
        if has("initContainers", name) || has("containers", name) {
            return Some(format!("a container named {name}"));
        }
    }
    None
}

/// Who owns the keys: `--keys-uid`, else the user sshd's container runs
/// as, else root; the group is that container's group, else the pod's
/// fsGroup (the group the kubelet gives the pod's volumes), else the
/// user's number. A container's securityContext overrides the pod's, as
/// Kubernetes applies them.
fn owner(pod: &Value, keys: &Keys) -> (i64, i64) {
    let container = &sshd_container(pod)["securityContext"];
    let pod_context = &pod["spec"]["securityContext"];
    let effective = |field: &str| {
        container[field]
            .as_i64()
            .or_else(|| pod_context[field].as_i64())
    };
    let uid = keys.uid.or_else(|| effective("runAsUser")).unwrap_or(0);
    let gid = effective("runAsGroup")
        .or_else(|| pod_context["fsGroup"].as_i64())
        .unwrap_or(uid);
    (uid, gid)
}

/// The container that runs sshd: the one declaring the port the target-port
/// annotation names (by name or number; a native sidecar too, as a Service
/// finds a named port), else the first container.
fn sshd_container(pod: &Value) -> &Value {
    let first = &pod["spec"]["containers"][0];
    let Some(target) = pod["metadata"]["annotations"][vocabulary::TARGET_PORT]
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return first;
    };
    let number: Option<i64> = target.parse().ok();
    let declares = |container: &&Value| {
        container["ports"].as_array().is_some_and(|ports| {
            ports.iter().any(|p| match number {
                Some(n) => p["containerPort"].as_i64() == Some(n),
                None => p["name"] == target,
            })
        })
    };
    let sidecars = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always");
    let containers = pod["spec"]["containers"].as_array().into_iter().flatten();
    containers.chain(sidecars).find(declares).unwrap_or(first)
}

fn args(keys: &Keys, sources: &Sources<'_>, uid: i64, gid: i64) -> Vec<String> {
    let mut args = vec!["install-keys".to_owned()];
    if sources.keys.is_some() {
        args.extend(["--source".to_owned(), format!("{SOURCE_DIR}/{SECRET_KEY}")]);
    }
    args.extend(
        [
            "--dir",
            &format!("{KEYS_MOUNT}/{KEYS_SUBDIR}"),
            "--file",
            &keys.file,
            "--uid",
            &uid.to_string(),
            "--gid",
            &gid.to_string(),
        ]
        .map(str::to_owned),
    );
    if let Some(secret) = &sources.keys {
        args.extend(["--secret".to_owned(), secret.clone()]);
    }
    if sources.host_key.is_some() {
        args.extend(["--host-key-source".to_owned(), HOST_KEY_DIR.to_owned()]);
        args.extend(["--mounted-at".to_owned(), keys.dir.clone()]);
    }
    args
}

fn mounts(sources: &Sources<'_>) -> Value {
    let mut mounts = vec![json!({"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT})];
    if sources.keys.is_some() {
        mounts.insert(
            0,
            json!({"name": SOURCE_VOLUME, "mountPath": SOURCE_DIR, "readOnly": true}),
        );
    }
    if sources.host_key.is_some() {
        mounts.push(json!({"name": HOST_KEY_VOLUME, "mountPath": HOST_KEY_DIR, "readOnly": true}));
    }
    Value::Array(mounts)
}

/// Small, with limits as well as requests: a namespace whose ResourceQuota
/// covers limits.cpu or limits.memory refuses a pod with a container that
/// sets none (unless a LimitRange fills them in).
fn resources() -> Value {
    json!({"requests": {"cpu": "10m", "memory": "16Mi"},
           "limits": {"cpu": "100m", "memory": "32Mi"}})
}

/// Runs as the keys' owner: for a user other than root, nothing Pod
/// Security `restricted` refuses; as root, with CHOWN (the `gid` may be a
/// group root is not in) when `chown` says so.
fn security_context(uid: i64, gid: i64, chown: bool) -> Value {
    let mut capabilities = json!({"drop": ["ALL"]});
    if uid == 0 && chown {
        capabilities["add"] = json!(["CHOWN"]);
    }
    json!({"runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": uid != 0,
           "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
           "capabilities": capabilities, "seccompProfile": {"type": "RuntimeDefault"}})
}

fn install_container(keys: &Keys, sources: &Sources<'_>, uid: i64, gid: i64) -> Value {
    json!({
        "name": INSTALL_CONTAINER, "image": keys.image, "args": args(keys, sources, uid, gid),
        "volumeMounts": mounts(sources), "resources": resources(),
        "securityContext": security_context(uid, gid, true),
    })
}

/// The sidecar writes in the directory install-keys made its owner's: it
/// needs no capability.
fn watch_container(keys: &Keys, sources: &Sources<'_>, uid: i64, gid: i64) -> Value {
    let mut args = args(keys, sources, uid, gid);
    let interval = humantime::format_duration(keys.interval).to_string();
    args.extend(["--watch".to_owned(), "--interval".to_owned(), interval]);
    json!({
        "name": WATCH_CONTAINER, "image": keys.image, "args": args, "restartPolicy": "Always",
        "volumeMounts": mounts(sources), "resources": resources(),
        "securityContext": security_context(uid, gid, false),
    })
}

#[cfg(test)]
mod tests;
