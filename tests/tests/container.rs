//! The agent's container image, run the way `deploy/base/agent-daemonset.yaml`
//! runs it: the pod spec's user, capabilities, seccomp profile, read-only
//! root, no-new-privileges, memory limit, host network (the node namespace),
//! the host's bpffs at /sys/fs/bpf, its arguments and the ConfigMap mounted
//! as the kubelet mounts it (one file per key, read with `--config`),
//! watching a (fake) API server and forwarding a real ssh login:
//! what a kind or minikube user runs. Anything in the pod spec this test
//! does not know how to give podman fails it, so the two cannot drift.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::common::{EXTERNAL_IP, Session};
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Bpffs, NetNs, Topology, agent, cmd,
    container::{Container, Mount, Seccomp, Spec, memory_bytes},
    fake_api::{FakeApi, Kind},
    image::{self, Image},
    privilege,
    topology::CLIENT_IP,
};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base");
/// Where a pod finds its service account's token and CA; the test mounts a
/// kubeconfig for the fake API there, with a CA file as a pod has one.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// A self-signed certificate whose key was thrown away. The fake API speaks
/// plain HTTP, so it verifies nothing; it is there because kube builds its
/// TLS settings anyway, from the kubeconfig's CA or else from the system's
/// CA bundle, which the image does not have (a pod gets the cluster's CA).
const CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBqjCCAU+gAwIBAgIUeJwpHpNk9T7xruRIGpei46L+CsIwCgYIKoZIzj0EAwIw\n\
KTEnMCUGA1UEAwwec3NoLWZ3ZCB0ZXN0IENBLCBrZXkgZGlzY2FyZGVkMCAXDTI2\n\
MTEyMzEyNDQyN1oYDzIxMjYxMDMwMTI0NDI3WjApMScwJQYDVQQDDB5zc2gtZndk\n\
IHRlc3QgQ0EsIGtleSBkaXNjYXJkZWQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC\n\
AAQQeZc4eAGXkNa3DlO7eKt6K3mY7A9HeDwHy2WvqxU9D41fF3IUUbdBfXgweb4p\n\
RE8XBjzme4vn0RbBhjiazvUKo1MwUTAdBgNVHQ4EFgQUk6pJjM3G95zVfqNBNl0e\n\
DrqQcdQwHwYDVR0jBBgwFoAUk6pJjM3G95zVfqNBNl0eDrqQcdQwDwYDVR0TAQH/\n\
BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEAjNMUaDFSD61Y+qqVa5W8/f37BBNg\n\
2VihF4r6MgcTF00CIQDj/HuVfLC7ktVo7bgoqXaTuEnw65VMYdCMlFy4otgUQg==\n\
-----END CERTIFICATE-----\n\
";
/// A port in the shipped `port-range`: the agent honours no other.
const PORT: u16 = 20_123;
/// The node the DaemonSet's pod runs on, as the kubelet would tell it.
const NODE_NAME: &str = "node-1";

fn manifest(file: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(DEPLOY).join(file)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The shared settings, as kustomize's configMapGenerator reads
/// config.env, with the test's SSH IP.
fn config() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(Path::new(DEPLOY).join("config.env")).unwrap();
    let mut config = ssh_fwd_tests::config_volume::env_file(&text);
    assert!(config.contains_key("ssh-ip"), "{config:?}");
    config.insert("ssh-ip".into(), EXTERNAL_IP.into());
    config
}

fn require_podman() {
    privilege::require();
    if let Some(why) = image::missing_tools() {
        panic!("this test cannot run here: {why}");
    }
}

/// A Service of the load-balancer class the agent follows, and its
/// EndpointSlice, as the controller and Kubernetes would make them.
fn publish_pod(api: &FakeApi, pod_ip: &str) {
    api.apply(
        Kind::Service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "ssh-job-7", "namespace": "jobs",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": vocabulary::LB_CLASS,
                     "allocateLoadBalancerNodePorts": false,
                     "ports": [{"name": "ssh", "port": PORT, "targetPort": 22, "protocol": "TCP"}]},
            "status": ssh_fwd_tests::grant::status(&[EXTERNAL_IP], PORT, "uid-job-7")
        }),
    );
    api.apply(
        Kind::EndpointSlice,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "ssh-job-7-abcde", "namespace": "jobs",
                         "labels": {"kubernetes.io/service-name": "ssh-job-7",
                                    "service.kubernetes.io/service-proxy-name": "ssh-fwd"}},
            "addressType": "IPv4",
            "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}],
            "endpoints": [ssh_fwd_tests::grant::endpoint(pod_ip, "jobs", "job-7", "uid-job-7")]
        }),
    );
}

/// What the test puts where a cluster would, dropped in this order: the
/// image, the node's bpffs, the API server, the namespaces.
struct Cluster {
    image: Image,
    bpffs: Bpffs,
    api: FakeApi,
    /// Stands in for the service account volume: `kubeconfig` and `ca.crt`.
    service_account: tempfile::TempDir,
    /// Stands in for the ConfigMap volume: one file per key.
    config: tempfile::TempDir,
    /// Stands in for the host's cgroup v2 hierarchy (hairpin): a child
    /// cgroup of the test's own, never the machine's root.
    cgroup: ssh_fwd_tests::cgroup::TestCgroup,
    topo: Topology,
}

impl Cluster {
    fn start(pods: usize) -> Self {
        let topo = Topology::single_node(pods).unwrap();
        // A node's default route, out of its uplink: the ConfigMap's iface
        // (auto) finds the external interface by it, as on a real node.
        topo.nodes[0]
            .ns
            .ip(&["route", "add", "default", "via", CLIENT_IP])
            .unwrap();
        let api = FakeApi::start(&topo.nodes[0].ns).unwrap();
        let service_account = tempfile::tempdir().unwrap();
        std::fs::write(service_account.path().join("ca.crt"), CA_PEM).unwrap();
        let server = format!("    server: http://{}\n", api.addr());
        let kubeconfig = api.kubeconfig();
        assert!(kubeconfig.contains(&server), "{kubeconfig}");
        let with_ca = kubeconfig.replace(
            &server,
            &format!("{server}    certificate-authority: {SERVICE_ACCOUNT}/ca.crt\n"),
        );
        std::fs::write(service_account.path().join("kubeconfig"), with_ca).unwrap();
        let bpffs = Bpffs::new().unwrap();
        bpffs.mount_shared().unwrap();
        let image = Image::build_for_test(&image::static_binary().unwrap()).unwrap();
        let config = tempfile::tempdir().unwrap();
        ssh_fwd_tests::config_volume::write(config.path(), &self::config()).unwrap();
        Self {
            image,
            bpffs,
            api,
            service_account,
            config,
            cgroup: ssh_fwd_tests::cgroup::TestCgroup::new().unwrap(),
            topo,
        }
    }

    fn node(&self) -> &NetNs {
        &self.topo.nodes[0].ns
    }
}

/// The DaemonSet's agent container as a podman [`Spec`].
fn daemonset_spec(cluster: &Cluster) -> Spec {
    let ds = manifest("agent-daemonset.yaml");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostNetwork"], true,
        "the agent runs in the node's network"
    );
    assert!(
        pod["securityContext"].is_null(),
        "translate the pod securityContext here"
    );
    assert!(
        pod["initContainers"].is_null(),
        "run the init containers here"
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container per agent pod");
    let c = &containers[0];
    assert!(
        c["command"].is_null(),
        "the image's entrypoint runs ssh-fwd"
    );
    let env = environment(c);
    let mut spec = Spec {
        image: cluster.image.reference().to_owned(),
        netns: cluster.node().path(),
        user: None,
        drop_all_capabilities: false,
        add_capabilities: vec![],
        read_only_root: false,
        no_new_privileges: false,
        seccomp: Seccomp::RuntimeDefault,
        memory_limit_bytes: c["resources"]["limits"]["memory"]
            .as_str()
            .map(|q| memory_bytes(q).unwrap()),
        privileged: false,
        cgroupns: None,
        mounts: volume_mounts(pod, c, cluster),
        args: args(c["args"].as_array().unwrap()),
        env: env.into_iter().collect(),
    };
    security_context(&c["securityContext"], &mut spec);
    spec
}

/// `securityContext` as podman flags; a field not translated fails the test.
fn security_context(security: &Value, spec: &mut Spec) {
    for (key, value) in security.as_object().unwrap() {
        match key.as_str() {
            "runAsUser" => spec.user = Some(u32::try_from(value.as_u64().unwrap()).unwrap()),
            "allowPrivilegeEscalation" => spec.no_new_privileges = value == false,
            "readOnlyRootFilesystem" => spec.read_only_root = value == true,
            "privileged" => assert_eq!(value, false, "a privileged agent is not what we ship"),
            "capabilities" => {
                assert_eq!(value["drop"], json!(["ALL"]));
                spec.drop_all_capabilities = true;
                spec.add_capabilities = strings(&value["add"]);
            }
            "seccompProfile" => {
                spec.seccomp = match value["type"].as_str().unwrap() {
                    "Unconfined" => Seccomp::Unconfined,
                    "RuntimeDefault" => Seccomp::RuntimeDefault,
                    other => panic!("seccompProfile {other} is not translated to podman here"),
                }
            }
            other => panic!("securityContext.{other} is not translated to podman here: add it"),
        }
    }
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// `env`, with the node's own values where a cluster's would not fit the
/// test's namespaces, and a kubeconfig in place of the in-cluster
/// configuration (the fake API speaks plain HTTP).
fn environment(c: &Value) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    assert!(
        c["envFrom"].is_null(),
        "settings come from the ConfigMap's volume: translate envFrom here"
    );
    for var in c["env"].as_array().into_iter().flatten() {
        let field = var["valueFrom"]["fieldRef"]["fieldPath"].as_str();
        let value = match (var["value"].as_str(), field) {
            (Some(value), _) => value,
            // What the kubelet fills in from the pod it runs.
            (None, Some("spec.nodeName")) => NODE_NAME,
            (None, Some("metadata.namespace")) => "ssh-fwd",
            _ => panic!("env {var}: a plain value or a pod field the test fills in"),
        };
        env.insert(var["name"].as_str().unwrap().to_owned(), value.to_owned());
    }
    env.insert("KUBECONFIG".into(), format!("{SERVICE_ACCOUNT}/kubeconfig"));
    env
}

/// The arguments, which name no variable for the kubelet to expand: the
/// settings come from the ConfigMap's volume.
fn args(args: &[Value]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            let arg = arg.as_str().unwrap().to_owned();
            assert!(!arg.contains("$("), "{arg}: expand it here");
            arg
        })
        .collect()
}

/// The host's bpffs and cgroup hierarchy (here the test's own) and the
/// ConfigMap where the DaemonSet mounts them, and the service account.
fn volume_mounts(pod: &Value, c: &Value, cluster: &Cluster) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap();
            let host = match volume["hostPath"]["path"].as_str() {
                Some("/sys/fs/bpf") => cluster.bpffs.path(),
                Some("/sys/fs/cgroup") => cluster.cgroup.path(),
                _ if volume["configMap"]["name"] == "ssh-fwd-config" => cluster.config.path(),
                _ => panic!("a volume the test does not stand in for: {volume}"),
            };
            Mount {
                host: host.to_owned(),
                container: m["mountPath"].as_str().unwrap().to_owned(),
                read_only: m["readOnly"] == true,
                propagation: match m["mountPropagation"].as_str() {
                    None | Some("None") => None,
                    Some("HostToContainer") => Some("rslave"),
                    Some(other) => panic!("mountPropagation {other} is not translated here"),
                },
            }
        })
        .collect();
    mounts.push(Mount {
        host: cluster.service_account.path().to_owned(),
        container: SERVICE_ACCOUNT.into(),
        read_only: true,
        propagation: None,
    });
    mounts
}

/// The `--bpffs` directory the agent was given, as seen from the host.
fn host_state_dir(spec: &Spec, bpffs: &Path) -> PathBuf {
    let inside = spec
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--bpffs="))
        .unwrap();
    let mount = spec.mounts.iter().find(|m| m.host == bpffs).unwrap();
    let below = Path::new(inside).strip_prefix(&mount.container).unwrap();
    bpffs.join(below)
}

/// `ssh-fwd ARGS -o json --bpffs DIR` with the host's own binary, as an
/// operator on the node runs it.
fn host_command(what: &[&str], state: &Path) -> Value {
    let out = cmd::run(
        std::process::Command::new(agent::binary().unwrap())
            .args(what)
            .args(["-o", "json", "--bpffs"])
            .arg(state),
    )
    .unwrap();
    serde_json::from_str(&out).unwrap()
}

/// The kernel's view of the container's process: capabilities, flags, uid.
fn process_status(pid: u32) -> BTreeMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

fn capability_mask(names: &[String]) -> u64 {
    names
        .iter()
        .map(|n| match n.as_str() {
            "NET_BROADCAST" => 1u64 << 11,
            "NET_ADMIN" => 1 << 12,
            "PERFMON" => 1 << 38,
            "BPF" => 1 << 39,
            other => panic!("capability {other}: add its bit here"),
        })
        .fold(0, |mask, bit| mask | bit)
}

/// GET `path` on the node's `port`, as the kubelet's probes do.
fn probe(node: &NetNs, port: u64, path: &str) -> String {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; printf 'GET {path} HTTP/1.1\\r\\nHost: node\\r\\nConnection: close\\r\\n\\r\\n' >&3; head -n1 <&3"
    );
    cmd::run(node.command("timeout").args(["10", "bash", "-c", &script]))
        .unwrap_or_else(|e| format!("{e:#}"))
}

#[test]
#[ignore = "needs root, network namespaces, BPF and podman: `cargo xtask test` runs it"]
fn the_image_run_as_the_daemonset_runs_it_forwards_a_real_ssh_login_and_outlives_its_container() {
    require_podman();
    let cluster = Cluster::start(1);
    let (topo, node_ns) = (&cluster.topo, cluster.node());
    publish_pod(&cluster.api, &topo.pods[0].ip);
    let spec = daemonset_spec(&cluster);
    assert_eq!(
        spec.seccomp,
        Seccomp::Unconfined,
        "see the DaemonSet's comment"
    );
    let container = Container::run(&spec).unwrap();
    container
        .wait_for_log("agent ready", Duration::from_secs(30))
        .unwrap();
    let logs = container.logs();
    assert!(
        logs.contains("external interface ext0: the IPv4 default route leaves through it"),
        "the ConfigMap's iface finds the uplink: {logs}"
    );
    // The node's bpffs as the DaemonSet mounts it (HostToContainer) is
    // the node's, as the agent's own check sees it from its container.
    assert!(!logs.contains("is not shared with the node"), "{logs}");

    // The kernel sees exactly what the pod spec grants.
    let status = process_status(container.pid().unwrap());
    let granted = capability_mask(&spec.add_capabilities);
    let cap = |k: &str| u64::from_str_radix(&status[k], 16).unwrap();
    assert_eq!(cap("CapEff"), granted, "{status:?}");
    assert_eq!(cap("CapBnd"), granted, "{status:?}");
    assert_eq!(status["NoNewPrivs"], "1");
    assert_eq!(status["Seccomp"], "0", "Unconfined: no filter");
    assert!(status["Uid"].starts_with("0\t"), "{status:?}");

    // A real login from the client lands in the pod; the probes answer.
    let ssh = topo.ssh();
    let login = || ssh.run(&topo.client, EXTERNAL_IP, PORT, "hostname");
    assert_eq!(login().unwrap(), topo.pods[0].hostname);
    let ds = manifest("agent-daemonset.yaml");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    for probe_kind in ["readinessProbe", "livenessProbe"] {
        let get = &c[probe_kind]["httpGet"];
        let answer = probe(
            node_ns,
            get["port"].as_u64().unwrap(),
            get["path"].as_str().unwrap(),
        );
        assert!(answer.contains(" 200 "), "{probe_kind}: {answer}");
    }

    // The host's ssh-fwd reads what the containerised agent pinned.
    let state = host_state_dir(&spec, cluster.bpffs.path());
    let mappings = host_command(&["list", "mappings"], &state);
    let row = &mappings.as_array().unwrap()[0];
    assert_eq!(
        row["frontend"],
        format!("{EXTERNAL_IP}:{PORT}"),
        "{mappings}"
    );
    assert_eq!(
        row["backend"],
        format!("{}:22", topo.pods[0].ip),
        "{mappings}"
    );
    let status = host_command(&["status"], &state);
    assert_eq!(status["agent"], "running", "{status}");
    assert_eq!(status["mappings"], 1, "{status}");
    assert!(
        status["packets_forwarded"].as_u64().unwrap() > 0,
        "{status}"
    );

    // Stopped as a kubelet stops it: a clean exit, forwarding goes on, for
    // the open session and for new logins.
    let mut session = Session::open(&ssh, &topo.client, PORT).unwrap();
    assert_eq!(container.stop(Duration::from_secs(10)).unwrap(), 0);
    assert!(
        container.logs().contains("keeps forwarding"),
        "{}",
        container.logs()
    );
    session.echo("after-stop").unwrap();
    assert_eq!(login().unwrap(), topo.pods[0].hostname);
    let after = host_command(&["list", "mappings"], &state);
    assert_eq!(after[0]["frontend"], row["frontend"], "{after}");
    assert_eq!(after[0]["backend"], row["backend"], "{after}");
}

/// Under a seccomp filter that refuses bpf(2) to a process without
/// CAP_SYS_ADMIN, as podman's and CRI-O's default profiles do, the agent
/// fails at start-up and says that seccomp is the cause and what to set.
#[test]
#[ignore = "needs root, network namespaces, BPF and podman: `cargo xtask test` runs it"]
fn the_image_under_a_seccomp_profile_that_refuses_bpf_names_seccomp_and_the_fix() {
    require_podman();
    let cluster = Cluster::start(0);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("seccomp.json");
    let refuse_bpf = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["bpf"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM}]
    });
    std::fs::write(&profile, refuse_bpf.to_string()).unwrap();
    let mut spec = daemonset_spec(&cluster);
    spec.seccomp = Seccomp::Profile(profile);
    let container = Container::run(&spec).unwrap();
    let code = container.wait_for_exit(Duration::from_secs(30)).unwrap();
    let logs = container.logs();
    assert_ne!(code, 0, "{logs}");
    assert!(logs.contains("seccomp"), "{logs}");
    assert!(logs.contains("seccompProfile"), "{logs}");
    assert!(logs.contains("Unconfined"), "{logs}");
}

/// `ssh-keygen` with `args`, in `dir`.
fn keygen(dir: &Path, args: &[&str]) {
    cmd::run(
        std::process::Command::new("ssh-keygen")
            .current_dir(dir)
            .args(args),
    )
    .unwrap();
}

#[test]
#[ignore = "needs root and podman: `cargo xtask test` runs it"]
fn the_images_install_keys_writes_the_jobs_host_key_certificate_and_snippet() {
    use ssh_fwd::host_certs::{CERT_FILE, KEY_FILE, SNIPPET_FILE};
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    require_podman();
    let image = Image::build_for_test(&image::static_binary().unwrap()).unwrap();
    let root = tempfile::Builder::new()
        .prefix("ssh-fwd-image-keys")
        .tempdir()
        .unwrap();
    // The host key Secret as the kubelet mounts it: a key and a host
    // certificate a CA signed for it.
    let secret = root.path().join("host-key");
    std::fs::create_dir(&secret).unwrap();
    keygen(&secret, &["-q", "-t", "ed25519", "-N", "", "-f", "ca"]);
    keygen(&secret, &["-q", "-t", "ed25519", "-N", "", "-f", KEY_FILE]);
    keygen(
        &secret,
        &[
            "-q",
            "-s",
            "ca",
            "-h",
            "-I",
            "ns/pod/uid port 20123",
            "-n",
            "ssh.example.org",
            "-V",
            "-1m:+1d",
            &format!("{KEY_FILE}.pub"),
        ],
    );
    // Mounted as the webhook mounts it: each file 0444.
    for name in [KEY_FILE, CERT_FILE] {
        std::fs::set_permissions(secret.join(name), std::fs::Permissions::from_mode(0o444))
            .unwrap();
    }
    // An emptyDir: a directory anyone may write in.
    let out = root.path().join("keys");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    // As the webhook runs it for a job of user 1000: that user, no
    // capability, a read-only root.
    let mounts = [
        format!("{}:/host-key:ro", secret.display()),
        format!("{}:/keys", out.display()),
    ];
    cmd::run(
        cmd::bounded(Duration::from_secs(60), "podman")
            .args(["--runtime", "runc", "run", "--rm", "--network", "none"])
            // Limits this host lets runc set (see docs/testing.md).
            .args([
                "--ulimit",
                "nofile=20000:20000",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .args(["--user", "1000:1000", "--cap-drop", "all", "--read-only"])
            .args(["--security-opt", "no-new-privileges"])
            .args(["-v", &mounts[0], "-v", &mounts[1]])
            .arg(image.reference())
            .args(["install-keys", "--host-key-source", "/host-key"])
            .args([
                "--mounted-at",
                "/etc/ssh-fwd",
                "--dir",
                "/keys/ssh",
                "--uid",
                "1000",
            ]),
    )
    .unwrap();
    let written = out.join("ssh");
    for (name, from) in [(KEY_FILE, KEY_FILE), (CERT_FILE, CERT_FILE)] {
        let path = written.join(name);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(secret.join(from)).unwrap(),
            "{name}"
        );
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600, "{name}");
        assert_eq!(meta.uid(), 1000, "{name}");
    }
    let snippet = std::fs::read_to_string(written.join(SNIPPET_FILE)).unwrap();
    assert!(
        snippet.contains(&format!("HostKey /etc/ssh-fwd/{KEY_FILE}"))
            && snippet.contains(&format!("HostCertificate /etc/ssh-fwd/{CERT_FILE}")),
        "{snippet}"
    );
}
