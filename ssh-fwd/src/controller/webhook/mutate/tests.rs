//! The mutation applied to pods as the API server would apply the patch
//! (json-patch, RFC 6902), and the result read back as a typed Pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::controller::webhook::keys::{self, Keys};
use crate::vocabulary;

fn injection(default_secret: Option<&str>, uid: Option<i64>) -> Injection {
    Injection {
        variable: "UCLOUD_PUBLIC_SSH".into(),
        host: "ssh.example.org".into(),
        keys: Keys {
            image: "registry.example/ssh-fwd:1".into(),
            dir: "/etc/ucloud/ssh".into(),
            file: "authorized_keys.ucloud".into(),
            uid,
            default_secret: default_secret.map(str::to_owned),
            interval: Duration::from_secs(2),
        },
        host_certs: None,
    }
}

fn reserved() -> Port {
    Port::Reserved {
        port: 8123,
        token: "tok".into(),
    }
}

/// A job pod as a Job controller submits it: generateName, no name, an
/// init container and two containers, one with an env list.
pub fn job_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "job-4711-", "namespace": "jobs",
                     "labels": {vocabulary::SSH: "enabled", "job-name": "job-4711"}},
        "spec": {
            "securityContext": {"runAsUser": 11042, "runAsGroup": 11042},
            "initContainers": [{"name": "stage-in", "image": "busybox"}],
            "containers": [
                {"name": "main", "image": "hpc", "env": [{"name": "OMP_NUM_THREADS", "value": "4"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "sshd", "image": "sshd"}
            ],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    })
}

/// `pod` with the mutation applied; also checks it is still a valid Pod.
fn applied(pod: &Value, mutation: &Mutation) -> Value {
    let mut out = pod.clone();
    json_patch::patch(&mut out, &mutation.patch).expect("the patch applies");
    serde_json::from_value::<Pod>(out.clone()).expect("still a Pod");
    out
}

fn env_of(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[test]
fn an_ipv6_host_is_bracketed_in_the_annotation_and_the_variable() {
    let pod = job_pod();
    let injection = Injection {
        host: "2001:db8::10".into(),
        ..injection(None, None)
    };
    let out = applied(&pod, &mutate(&pod, &reserved(), &injection));
    let endpoint = "[2001:db8::10]:8123";
    assert_eq!(
        out["metadata"]["annotations"][vocabulary::ENDPOINT],
        endpoint
    );
    let main = &out["spec"]["containers"][0];
    assert_eq!(env_of(main, "UCLOUD_PUBLIC_SSH").as_deref(), Some(endpoint));
}

#[test]
fn every_container_gets_the_endpoint_variable_first_and_the_pod_its_annotations() {
    let pod = job_pod();
    let out = applied(&pod, &mutate(&pod, &reserved(), &injection(None, None)));
    let annotations = &out["metadata"]["annotations"];
    assert_eq!(annotations[vocabulary::ENDPOINT], "ssh.example.org:8123");
    assert_eq!(annotations[vocabulary::RESERVATION], "tok");
    for list in ["initContainers", "containers"] {
        for c in out["spec"][list].as_array().unwrap() {
            assert_eq!(
                c["env"][0],
                json!({"name": "UCLOUD_PUBLIC_SSH", "value": "ssh.example.org:8123"}),
                "{c}"
            );
        }
    }
    // The container's own variables stay, after ours.
    assert_eq!(
        env_of(&out["spec"]["containers"][0], "OMP_NUM_THREADS").as_deref(),
        Some("4")
    );
    // No keys Secret named: nothing else changes.
    assert_eq!(out["spec"]["volumes"], pod["spec"]["volumes"]);
    assert_eq!(out["spec"]["initContainers"].as_array().unwrap().len(), 1);
}

#[test]
fn a_container_that_sets_the_variable_keeps_its_own_value_and_the_client_is_told() {
    let mut pod = job_pod();
    pod["spec"]["containers"][1]["env"] =
        json!([{"name": "UCLOUD_PUBLIC_SSH", "value": "mine:22"}]);
    let mutation = mutate(&pod, &reserved(), &injection(None, None));
    let out = applied(&pod, &mutation);
    assert_eq!(
        env_of(&out["spec"]["containers"][1], "UCLOUD_PUBLIC_SSH").as_deref(),
        Some("mine:22")
    );
    assert_eq!(
        out["spec"]["containers"][1]["env"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        mutation.warnings,
        ["ssh-fwd: container sshd sets UCLOUD_PUBLIC_SSH itself; its own value is kept"]
    );
}

#[test]
fn keys_come_with_an_init_container_a_native_sidecar_and_a_read_only_mount_everywhere() {
    let mut pod = job_pod();
    pod["metadata"]["annotations"] = json!({vocabulary::KEYS_SECRET: "alice-keys"});
    let out = applied(&pod, &mutate(&pod, &reserved(), &injection(None, None)));
    let inits = out["spec"]["initContainers"].as_array().unwrap();
    let names: Vec<&str> = inits.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [keys::INSTALL_CONTAINER, keys::WATCH_CONTAINER, "stage-in"]
    );
    let (install, watch) = (&inits[0], &inits[1]);
    assert!(
        install.get("restartPolicy").is_none(),
        "runs once, before anything else"
    );
    assert_eq!(watch["restartPolicy"], "Always", "a native sidecar");
    let args = |c: &Value| -> Vec<String> {
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        args(install),
        [
            "install-keys",
            "--source",
            "/var/run/ssh-fwd/keys-source/authorized_keys",
            "--dir",
            "/var/run/ssh-fwd/keys/keys",
            "--file",
            "authorized_keys.ucloud",
            "--uid",
            "11042",
            "--gid",
            "11042",
            "--secret",
            "alice-keys"
        ]
    );
    assert_eq!(args(watch)[13..], ["--watch", "--interval", "2s"]);
    assert_eq!(install["image"], "registry.example/ssh-fwd:1");
    assert_eq!(install["securityContext"]["runAsUser"], 11042);
    assert!(install["securityContext"]["capabilities"]["add"].is_null());
    assert_eq!(watch["securityContext"]["runAsUser"], 11042);
    assert_eq!(
        watch["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    let volumes = out["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes[1],
        json!({"name": keys::KEYS_VOLUME, "emptyDir": {"medium": "Memory"}})
    );
    assert_eq!(volumes[2]["secret"]["secretName"], "alice-keys");
    assert_eq!(
        volumes[2]["secret"]["items"],
        json!([{"key": "authorized_keys", "path": "authorized_keys"}])
    );
    let mount = json!({"name": keys::KEYS_VOLUME, "mountPath": "/etc/ucloud/ssh",
                       "subPath": keys::KEYS_SUBDIR, "readOnly": true});
    assert!(
        out["spec"]["initContainers"][2]["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(&mount)
    );
    for c in out["spec"]["containers"].as_array().unwrap() {
        assert!(
            c["volumeMounts"].as_array().unwrap().contains(&mount),
            "{c}"
        );
    }
    // The user's own init container still gets the variable.
    assert!(env_of(&out["spec"]["initContainers"][2], "UCLOUD_PUBLIC_SSH").is_some());
}

#[test]
fn keys_owner_is_the_keys_uid_flag_else_the_pods_user_else_root() {
    let pod = job_pod();
    let with_flag = applied(
        &pod,
        &mutate(&pod, &reserved(), &injection(Some("k"), Some(4242))),
    );
    assert_eq!(with_flag["spec"]["initContainers"][0]["args"][8], "4242");
    let mut rootish = job_pod();
    rootish["spec"]["securityContext"] = json!({});
    rootish["spec"]["initContainers"] = Value::Null;
    rootish["spec"]["volumes"] = Value::Null;
    let out = applied(
        &rootish,
        &mutate(&rootish, &reserved(), &injection(Some("k"), None)),
    );
    assert_eq!(out["spec"]["initContainers"][0]["args"][8], "0");
    assert_eq!(
        out["spec"]["initContainers"][1]["securityContext"]["runAsNonRoot"],
        false
    );
    assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 2);
}

#[test]
fn keys_that_cannot_be_installed_are_left_out_with_a_warning() {
    let mut bad_name = job_pod();
    bad_name["metadata"]["annotations"] = json!({vocabulary::KEYS_SECRET: "Bad_Name"});
    let mutation = mutate(&bad_name, &reserved(), &injection(None, None));
    assert!(
        mutation.warnings[0].contains("not a Secret name"),
        "{:?}",
        mutation.warnings
    );
    assert_eq!(
        applied(&bad_name, &mutation)["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let mut clash = job_pod();
    clash["spec"]["volumes"] = json!([{"name": keys::KEYS_VOLUME, "emptyDir": {}}]);
    let mutation = mutate(&clash, &reserved(), &injection(Some("k"), None));
    assert!(
        mutation.warnings[0].contains("a volume named ssh-fwd-keys"),
        "{:?}",
        mutation.warnings
    );

    let mut taken = job_pod();
    taken["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/etc/ucloud/ssh"}]);
    let mutation = mutate(&taken, &reserved(), &injection(Some("k"), None));
    assert!(
        mutation.warnings[0].contains("container main mounts something at /etc/ucloud/ssh"),
        "{:?}",
        mutation.warnings
    );
    let out = applied(&taken, &mutation);
    assert_eq!(
        out["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        out["spec"]["containers"][1]["volumeMounts"][0]["name"],
        keys::KEYS_VOLUME
    );
}

#[test]
fn without_a_port_the_pod_says_why_and_carries_no_endpoint_of_its_own_making() {
    let mut pod = job_pod();
    // A client trying to claim another pod's reservation and endpoint.
    pod["metadata"]["annotations"] = json!({vocabulary::RESERVATION: "stolen",
        vocabulary::ENDPOINT: "ssh.example.org:9999", vocabulary::ANNOUNCED: "x", "keep": "me"});
    let none = Port::None {
        why: "no free SSH port".into(),
    };
    let out = applied(&pod, &mutate(&pod, &none, &injection(None, None)));
    assert_eq!(
        out["metadata"]["annotations"],
        json!({vocabulary::ADMISSION: "no free SSH port", "keep": "me"})
    );
    for c in out["spec"]["containers"].as_array().unwrap() {
        assert_eq!(env_of(c, "UCLOUD_PUBLIC_SSH"), None);
    }
    // With a port, client-set values of ours are replaced.
    let out = applied(&pod, &mutate(&pod, &reserved(), &injection(None, None)));
    assert_eq!(
        out["metadata"]["annotations"][vocabulary::RESERVATION],
        "tok"
    );
    assert_eq!(
        out["metadata"]["annotations"][vocabulary::ENDPOINT],
        "ssh.example.org:8123"
    );
    assert!(
        out["metadata"]["annotations"]
            .get(vocabulary::ANNOUNCED)
            .is_none()
    );
}

#[test]
fn a_dry_run_shows_the_endpoint_but_carries_no_reservation() {
    let pod = job_pod();
    let out = applied(
        &pod,
        &mutate(&pod, &Port::DryRun { port: 8200 }, &injection(None, None)),
    );
    assert_eq!(
        out["metadata"]["annotations"],
        json!({vocabulary::ENDPOINT: "ssh.example.org:8200"})
    );
    assert_eq!(
        env_of(&out["spec"]["containers"][0], "UCLOUD_PUBLIC_SSH").as_deref(),
        Some("ssh.example.org:8200")
    );
}

#[test]
fn patch_paths_escape_the_slash_in_annotation_names() {
    let mut pod = job_pod();
    pod["metadata"]["annotations"] = json!({});
    let mutation = mutate(&pod, &reserved(), &injection(None, None));
    let text = serde_json::to_string(&mutation.patch).unwrap();
    assert!(
        text.contains("/metadata/annotations/ssh-fwd.io~1endpoint"),
        "{text}"
    );
}

#[test]
fn with_host_certs_the_pod_gets_its_host_key_secret_name_volume_and_variable_even_without_keys() {
    let mut pod = job_pod();
    // A client's own value is replaced: the name is ours, random.
    pod["metadata"]["annotations"] = json!({vocabulary::HOST_KEY_SECRET: "db-password",
                                            vocabulary::HOST_CERTIFICATE: "forged"});
    let with = Injection {
        host_certs: Some("SSH_FWD_SSHD_CONFIG".into()),
        ..injection(None, None)
    };
    let out = applied(&pod, &mutate(&pod, &reserved(), &with));
    let annotations = &out["metadata"]["annotations"];
    let secret = annotations[vocabulary::HOST_KEY_SECRET].as_str().unwrap();
    assert!(
        secret.starts_with(vocabulary::HOST_KEY_SECRET_PREFIX),
        "{secret}"
    );
    assert!(crate::controller::host_certs::is_ours(secret), "{secret}");
    assert!(
        annotations[vocabulary::HOST_CERTIFICATE].is_null(),
        "{annotations}"
    );
    let again = applied(&pod, &mutate(&pod, &reserved(), &with));
    assert_ne!(
        again["metadata"]["annotations"][vocabulary::HOST_KEY_SECRET],
        secret
    );
    // Its Secret as a volume the pod waits for (not optional), mounted in
    // the install-keys containers only.
    let volume = (out["spec"]["volumes"].as_array().unwrap().iter())
        .find(|v| v["name"] == keys::HOST_KEY_VOLUME)
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], secret);
    assert!(volume["secret"]["optional"].is_null(), "{volume}");
    let inits = out["spec"]["initContainers"].as_array().unwrap();
    let install = &inits[0];
    assert_eq!(install["name"], keys::INSTALL_CONTAINER);
    let args: Vec<&str> = (install["args"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(!args.contains(&"--source"), "no keys Secret: {args:?}");
    let at = args.iter().position(|a| *a == "--host-key-source").unwrap();
    assert_eq!(args[at + 1], keys::HOST_KEY_DIR);
    let at = args.iter().position(|a| *a == "--mounted-at").unwrap();
    assert_eq!(args[at + 1], "/etc/ucloud/ssh");
    for container in out["spec"]["containers"].as_array().unwrap() {
        let mounts = container["volumeMounts"].to_string();
        assert!(!mounts.contains(keys::HOST_KEY_VOLUME), "{mounts}");
        assert_eq!(
            env_of(container, "SSH_FWD_SSHD_CONFIG").as_deref(),
            Some("/etc/ucloud/ssh/sshd_config")
        );
    }
    // Without --host-certs, a client's value is taken off.
    let off = applied(&pod, &mutate(&pod, &reserved(), &injection(None, None)));
    assert!(off["metadata"]["annotations"][vocabulary::HOST_KEY_SECRET].is_null());
}
