//! Who owns the keys and what the injected containers ask for, read from
//! the pod as the mutation leaves it.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::controller::webhook::mutate::{Injection, Port, mutate, tests::job_pod};

fn injection() -> Injection {
    Injection {
        variable: "SSH_FWD_PUBLIC_SSH".into(),
        host: "ssh.example.org".into(),
        keys: Keys {
            image: "ssh-fwd:test".into(),
            dir: "/etc/ssh-fwd".into(),
            file: "authorized_keys".into(),
            uid: None,
            default_secret: Some("keys".into()),
            interval: Duration::from_secs(2),
        },
        host_certs: None,
    }
}

/// `pod` as the API server stores it after the mutation.
fn mutated(pod: &Value) -> Value {
    let port = Port::Reserved {
        port: 8123,
        token: "tok".into(),
    };
    let mutation = mutate(pod, &port, &injection());
    let mut out = pod.clone();
    json_patch::patch(&mut out, &mutation.patch).expect("the patch applies");
    out
}

/// The owner install-keys is told (`--uid`, `--gid`), checked to be the
/// user and group the watching sidecar runs as.
fn owner_of(pod: &Value) -> (i64, i64) {
    let out = mutated(pod);
    let (install, watch) = (
        &out["spec"]["initContainers"][0],
        &out["spec"]["initContainers"][1],
    );
    assert_eq!(install["name"], INSTALL_CONTAINER);
    let arg = |flag: &str| -> i64 {
        let args = install["args"].as_array().unwrap();
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1].as_str().unwrap().parse().unwrap()
    };
    let (uid, gid) = (arg("--uid"), arg("--gid"));
    assert_eq!(watch["securityContext"]["runAsUser"], uid);
    assert_eq!(watch["securityContext"]["runAsGroup"], gid);
    (uid, gid)
}

/// A job pod whose second container (`sshd`) serves port 2222, named
/// `ssh`, and runs as 2000 while the pod says 1000.
fn pod_with_sshd_apart() -> Value {
    let mut pod = job_pod();
    pod["spec"]["securityContext"] =
        json!({"runAsUser": 1000, "runAsGroup": 1100, "fsGroup": 3000});
    pod["spec"]["containers"][0]["securityContext"] =
        json!({"runAsUser": 5000, "runAsGroup": 5100});
    pod["spec"]["containers"][1]["ports"] = json!([{"name": "ssh", "containerPort": 2222}]);
    pod["spec"]["containers"][1]["securityContext"] = json!({"runAsUser": 2000});
    pod
}

fn with_target_port(mut pod: Value, port: &str) -> Value {
    pod["metadata"]["annotations"] = json!({vocabulary::TARGET_PORT: port});
    pod
}

#[test]
fn the_keys_belong_to_the_user_the_sshd_container_runs_as_its_own_setting_over_the_pods() {
    // The target port names the sshd container, by name or by number: its
    // own runAsUser wins over the pod's; the group it does not set is the
    // pod's.
    for port in ["ssh", "2222"] {
        let pod = with_target_port(pod_with_sshd_apart(), port);
        assert_eq!(owner_of(&pod), (2000, 1100), "target port {port}");
    }
    // No target port (sshd on 22, no container declares it): the first
    // container, whose own user and group win.
    assert_eq!(owner_of(&pod_with_sshd_apart()), (5000, 5100));
    // A target port no container declares: the first container too.
    let pod = with_target_port(pod_with_sshd_apart(), "2200");
    assert_eq!(owner_of(&pod), (5000, 5100));
    // A container without a securityContext runs as the pod says.
    let mut pod = pod_with_sshd_apart();
    pod["spec"]["containers"][0]["securityContext"] = Value::Null;
    assert_eq!(owner_of(&pod), (1000, 1100));
}

#[test]
fn without_a_run_as_group_the_keys_get_the_pods_fs_group_else_the_users_number() {
    let mut pod = pod_with_sshd_apart();
    pod["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 5000});
    pod["spec"]["securityContext"] = json!({"runAsUser": 1000, "fsGroup": 3000});
    assert_eq!(owner_of(&pod), (5000, 3000));
    pod["spec"]["securityContext"] = json!({"runAsUser": 1000});
    assert_eq!(owner_of(&pod), (5000, 5000));
    // --keys-uid names the user; the group still follows the container.
    let mut flagged = injection();
    flagged.keys.uid = Some(4242);
    pod["spec"]["containers"][0]["securityContext"] = json!({"runAsGroup": 5100});
    assert_eq!(owner(&pod, &flagged.keys), (4242, 5100));
}

#[test]
fn the_injected_containers_request_and_limit_cpu_and_memory() {
    // A ResourceQuota on limits.cpu or limits.memory refuses a pod with a
    // container that sets no such limit (unless a LimitRange fills one in).
    let out = mutated(&job_pod());
    for c in &out["spec"]["initContainers"].as_array().unwrap()[..2] {
        for bound in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][bound][resource].is_string(),
                    "{} has no {bound}.{resource}: {}",
                    c["name"],
                    c["resources"]
                );
            }
        }
    }
}

#[test]
fn the_keys_secret_volume_is_optional_so_a_missing_secret_does_not_hold_the_pod() {
    // Without the Secret (say --default-keys-secret in a namespace that has
    // none), a required volume keeps every container from starting
    // (FailedMount); an optional one is mounted empty and install-keys
    // says what is missing.
    let out = mutated(&job_pod());
    let volumes = out["spec"]["volumes"].as_array().unwrap();
    let source = volumes
        .iter()
        .find(|v| v["name"] == SOURCE_VOLUME)
        .expect("the Secret volume");
    assert_eq!(source["secret"]["optional"], true, "{source}");
    // install-keys is told the Secret's name, to name it when it is absent.
    for c in &out["spec"]["initContainers"].as_array().unwrap()[..2] {
        let args = c["args"].as_array().unwrap();
        let at = args.iter().position(|a| a == "--secret").expect("--secret");
        assert_eq!(args[at + 1], "keys", "{}", c["name"]);
    }
}

/// What the Pod Security Standards' `restricted` profile refuses in a
/// container's own securityContext, field by field (the pod's context is
/// not consulted: ours set everything themselves).
fn restricted_violations(c: &Value) -> Vec<String> {
    let sc = &c["securityContext"];
    let mut refused = Vec::new();
    // Baseline: privileged, capabilities beyond the baseline set, host
    // ports, /proc mount, seccomp Unconfined; restricted: below.
    if sc["privileged"] == true {
        refused.push("privileged".to_owned());
    }
    if sc["allowPrivilegeEscalation"] != false {
        refused.push("allowPrivilegeEscalation must be false".to_owned());
    }
    if sc["runAsNonRoot"] != true {
        refused.push("runAsNonRoot must be true".to_owned());
    }
    if sc["runAsUser"] == 0 {
        refused.push("runAsUser must not be 0".to_owned());
    }
    if !matches!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault" | "Localhost")
    ) {
        refused.push("seccompProfile.type must be RuntimeDefault or Localhost".to_owned());
    }
    let drop = sc["capabilities"]["drop"].as_array();
    if !drop.is_some_and(|d| d.iter().any(|c| c == "ALL")) {
        refused.push("capabilities.drop must include ALL".to_owned());
    }
    let added = sc["capabilities"]["add"].as_array().into_iter().flatten();
    for cap in added.filter(|c| *c != "NET_BIND_SERVICE") {
        refused.push(format!("capability {cap} may not be added"));
    }
    if c["ports"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["hostPort"].as_i64().unwrap_or(0) != 0))
    {
        refused.push("hostPort".to_owned());
    }
    if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
        refused.push("procMount".to_owned());
    }
    refused
}

#[test]
fn for_a_non_root_user_the_injected_containers_pass_pod_security_restricted() {
    // job_pod runs as 11042: install-keys and its sidecar run as that user,
    // so Pod Security admission (which checks the pod after every
    // mutation) admits the pod in a `restricted` namespace.
    let out = mutated(&job_pod());
    for c in &out["spec"]["initContainers"].as_array().unwrap()[..2] {
        assert_eq!(restricted_violations(c), Vec::<String>::new(), "{c}");
        assert_eq!(c["securityContext"]["runAsUser"], 11042);
        assert_eq!(c["securityContext"]["runAsGroup"], 11042);
    }
    // The volumes we add are of the types restricted allows.
    for v in out["spec"]["volumes"].as_array().unwrap() {
        let kind = v
            .as_object()
            .unwrap()
            .keys()
            .find(|k| *k != "name")
            .unwrap();
        assert!(
            [
                "configMap",
                "csi",
                "downwardAPI",
                "emptyDir",
                "ephemeral",
                "persistentVolumeClaim",
                "projected",
                "secret"
            ]
            .contains(&kind.as_str()),
            "{v}"
        );
    }
}

#[test]
fn for_root_only_install_keys_runs_as_root_with_chown_alone() {
    let mut pod = job_pod();
    pod["spec"]["securityContext"] = json!({"fsGroup": 3000});
    let out = mutated(&pod);
    let (install, watch) = (
        &out["spec"]["initContainers"][0],
        &out["spec"]["initContainers"][1],
    );
    assert_eq!(install["securityContext"]["runAsUser"], 0);
    assert_eq!(install["securityContext"]["runAsGroup"], 3000);
    assert_eq!(
        install["securityContext"]["capabilities"],
        json!({"drop": ["ALL"], "add": ["CHOWN"]})
    );
    assert_eq!(watch["securityContext"]["runAsUser"], 0);
    assert_eq!(
        watch["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    for c in [install, watch] {
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(
            c["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        // Root is all restricted refuses, nothing else.
        let refused = restricted_violations(c);
        let root_only = ["runAsNonRoot must be true", "runAsUser must not be 0"];
        assert!(
            refused
                .iter()
                .all(|r| root_only.contains(&r.as_str())
                    || r == "capability \"CHOWN\" may not be added"),
            "{refused:?}"
        );
    }
}

#[test]
fn the_keys_are_written_in_a_directory_of_the_volume_that_every_container_mounts_as_keys_dir() {
    // The volume's own root belongs to root and is writable by all (an
    // emptyDir): a non-root user can make a directory in it, not change
    // it. The directory the user owns is what containers see at --keys-dir.
    let out = mutated(&job_pod());
    let install = &out["spec"]["initContainers"][0];
    let args = install["args"].as_array().unwrap();
    let dir = &args[args.iter().position(|a| a == "--dir").unwrap() + 1];
    assert_eq!(dir, &format!("{KEYS_MOUNT}/{KEYS_SUBDIR}"));
    assert!(
        install["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT}))
    );
    let seen = json!({"name": KEYS_VOLUME, "mountPath": "/etc/ssh-fwd",
                      "subPath": KEYS_SUBDIR, "readOnly": true});
    for c in out["spec"]["containers"].as_array().unwrap() {
        assert!(c["volumeMounts"].as_array().unwrap().contains(&seen), "{c}");
    }
}

#[test]
fn the_pod_with_its_keys_is_one_the_api_server_takes() {
    // Container and volume names, mounts and paths, restart policies, as
    // the API server validates them after the mutation.
    let api = ssh_fwd_tests::fake_api::FakeApi::start_on_loopback().unwrap();
    let mut pod = mutated(&job_pod());
    pod["metadata"]["name"] = json!("job-4711-abcde");
    let kind = ssh_fwd_tests::fake_api::Kind::Pod;
    if let Err((code, message)) = api.create(kind, pod) {
        panic!("refused ({code}): {message}");
    }
}
