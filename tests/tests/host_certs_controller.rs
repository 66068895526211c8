//! Host certificates end to end through the controller and the agent: the
//! fake API server in the node namespace, the controller with
//! `--host-certs` and a one-port range, the agent mapping its Services. A
//! job's pod gets its host key Secret from the controller; the real
//! `install-keys` lays it out with the snippet; the job's sshd includes
//! it. The user's known_hosts holds only what `ssh-fwd known-hosts` prints,
//! with `StrictHostKeyChecking=yes`: the job's login through the published
//! port is accepted with no prompt; the job ends, the next job gets the same
//! port and a new key (refused while its sshd shows a plain key), and the
//! same client logs in with known_hosts as it was.

use std::{
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::common::EXTERNAL_IP;
use base64::Engine as _;
use serde_json::{Value, json};
use ssh_fwd::{
    host_certs::{CERT_FILE, KEY_FILE, SNIPPET_FILE},
    vocabulary,
};
use ssh_fwd_tests::{
    Agent, Bpffs, Pod, Topology,
    agent::binary,
    cmd::{self, eventually},
    fake_api::{FakeApi, Kind},
    privilege,
    ssh::{SshKeys, kill_group},
    topology::EXT_IFACE,
};

/// How long a wait for the agents or the controller may take.
const WAIT: Duration = Duration::from_secs(30);

/// The job's sshd listens here (the pod's annotation says so); the
/// topology's own sshd keeps port 22.
const JOB_PORT: u16 = 2222;

/// A labelled pod as the webhook leaves it: its host key Secret named.
fn pod(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "jobs",
                     "labels": {vocabulary::SSH: "enabled"},
                     "annotations": {vocabulary::TARGET_PORT: JOB_PORT.to_string(),
                                     vocabulary::HOST_KEY_SECRET: secret_of(name)}},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// The host key Secret's name the webhook would give `name`'s pod (its
/// own are random letters and digits).
fn secret_of(name: &str) -> String {
    format!("ssh-fwd-host-key-{}", name.replace('-', ""))
}

/// The job's sshd, in its pod's namespace; killed when dropped.
struct JobSshd(Child);

impl Drop for JobSshd {
    fn drop(&mut self) {
        kill_group(&mut self.0);
    }
}

/// What the kubelet and the install-keys init container do for `name`:
/// the Secret the controller issued, mounted, laid out with the snippet;
/// then the job's sshd including it.
fn start_job(api: &FakeApi, root: &Path, keys: &SshKeys, pod: &Pod, name: &str) -> JobSshd {
    let secret_name = secret_of(name);
    let secret = eventually(&format!("{name}'s host key Secret"), WAIT, || {
        api.get(Kind::Secret, "jobs", &secret_name)
    });
    let mounted = root.join(format!("secret-{name}"));
    std::fs::create_dir_all(&mounted).unwrap();
    for file in [KEY_FILE, CERT_FILE] {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(secret["data"][file].as_str().unwrap())
            .unwrap();
        std::fs::write(mounted.join(file), bytes).unwrap();
    }
    let keys_dir = root.join(format!("keys-{name}"));
    std::fs::create_dir(&keys_dir).unwrap();
    std::fs::set_permissions(&keys_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new(binary().unwrap())
        .args(["install-keys", "--source"])
        .arg(keys.dir().join("client.pub"))
        .arg("--host-key-source")
        .arg(&mounted)
        .arg("--mounted-at")
        .arg(&keys_dir)
        .arg("--dir")
        .arg(&keys_dir)
        .args(["--uid", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let include = format!("Include {}\n", keys_dir.join(SNIPPET_FILE).display());
    sshd(root, pod, name, &include, &keys_dir.join("authorized_keys"))
}

/// sshd on `JOB_PORT` in `pod`'s namespace, with `first` at the top of
/// its configuration (how it loads its host key).
fn sshd(root: &Path, pod: &Pod, name: &str, first: &str, authorized: &Path) -> JobSshd {
    let ns = &pod.ns;
    let config = root.join(format!("sshd_config.{name}"));
    std::fs::write(
        &config,
        format!(
            "{first}Port {JOB_PORT}\nAuthorizedKeysFile {}\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile none\n\
             LogLevel ERROR\n",
            authorized.display(),
        ),
    )
    .unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    let sshd = privilege::which("sshd").unwrap();
    // Its own host name (a UTS namespace), so a login tells which job
    // answered.
    let script = format!(
        "hostname {} && exec {} -D -e -f {}",
        pod.hostname,
        sshd.display(),
        config.display()
    );
    let child = ns
        .command("unshare")
        .args(["--uts", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let job = JobSshd(child);
    eventually("the job's sshd listens", WAIT, || {
        cmd::run(
            ns.command("ss")
                .args(["-Hltn", &format!("sport = :{JOB_PORT}")]),
        )
        .ok()
        .filter(|o| !o.trim().is_empty())
    });
    job
}

/// `ssh -p PORT root@EXTERNAL_IP hostname` from the client, checking the
/// host strictly against `known_hosts` alone; its stdout, or its stderr.
fn login(topo: &Topology, keys: &SshKeys, known_hosts: &Path, port: u16) -> Result<String, String> {
    let out = topo
        .client
        .command("timeout")
        .args(["--kill-after=2", "20", "ssh", "-i"])
        .arg(keys.dir().join("client"))
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-p",
            &port.to_string(),
            &format!("root@{EXTERNAL_IP}"),
            "hostname",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn ready_note(api: &FakeApi, pod: &str) -> Option<String> {
    api.list(Kind::Event)
        .into_iter()
        .find(|e| e["regarding"]["name"] == pod && e["reason"] == vocabulary::reason::SSH_READY)
        .and_then(|e| e["note"].as_str().map(str::to_owned))
}

fn port_in(note: &str) -> u16 {
    let after = note.split(" -p ").nth(1).unwrap();
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_next_job_on_a_port_is_trusted_by_the_line_known_hosts_printed_with_nothing_changed() {
    privilege::require();
    let topo = Topology::single_node(2).unwrap();
    let node = &topo.nodes[0].ns;
    let api = FakeApi::start(node).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("ssh-fwd-host-certs-e2e")
        .tempdir_in("/run")
        .unwrap();
    let kubeconfig: PathBuf = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let bpffs = Bpffs::new().unwrap();
    let agent_args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig,
        "--ssh-ip",
        EXTERNAL_IP,
    ]
    .map(String::from)
    .to_vec();
    let _agent = Agent::start_with(node, &[EXT_IFACE], &bpffs, &agent_args).unwrap();
    let controller_args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig,
        "--ssh-ip",
        EXTERNAL_IP,
        "--ssh-user",
        "root",
        "--identity",
        "e2e",
        "--lease-namespace",
        "ssh-fwd",
        "--port-range",
        "20000-20000",
        "--host-certs",
    ]
    .map(String::from)
    .to_vec();
    let _controller =
        Agent::start_controller(node, dir.path().join("controller.log"), &controller_args).unwrap();
    let keys = SshKeys::generate().unwrap();

    // What the user pastes: `ssh-fwd known-hosts`, as any user of the API.
    let printed = cmd::run(
        node.command(&binary().unwrap().display().to_string())
            .args(["known-hosts", "--kubeconfig", &kubeconfig]),
    )
    .unwrap();
    assert!(
        printed.starts_with(&format!("@cert-authority [{EXTERNAL_IP}]:* ssh-ed25519 ")),
        "{printed}"
    );
    assert_eq!(printed.lines().count(), 1, "{printed}");
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, &printed).unwrap();

    api.apply(Kind::Pod, pod("job-1", &topo.pods[0].ip));
    let first = start_job(&api, dir.path(), &keys, &topo.pods[0], "job-1");
    let note = eventually("job-1's SSHReady event", WAIT, || ready_note(&api, "job-1"));
    assert!(
        note.contains(printed.trim()),
        "the event tells the same line: {note}"
    );
    let port = port_in(&note);
    let landed = eventually("a strict login to job-1", WAIT, || {
        login(&topo, &keys, &known_hosts, port).ok()
    });
    assert_eq!(landed, topo.pods[0].hostname);

    // The job ends; the next one gets the same port (one in the range).
    let key_1 =
        api.get(Kind::Secret, "jobs", &secret_of("job-1")).unwrap()["data"][KEY_FILE].clone();
    api.delete_pod("jobs", "job-1", Some(0));
    drop(first);
    eventually("job-1's host key Secret goes with its pod", WAIT, || {
        api.get(Kind::Secret, "jobs", &secret_of("job-1"))
            .is_none()
            .then_some(())
    });
    api.apply(Kind::Pod, pod("job-2", &topo.pods[1].ip));
    // First its sshd without the snippet (a plain host key), as an
    // impostor would answer: refused before any login.
    let plain = format!("HostKey {}\n", keys.dir().join("host").display());
    let authorized = keys.dir().join("authorized_keys");
    let impostor = sshd(dir.path(), &topo.pods[1], "plain", &plain, &authorized);
    let refusal = eventually("the plain key refused on the port", WAIT, || {
        login(&topo, &keys, &known_hosts, port).err()
    });
    assert!(
        refusal.contains("Host key verification failed"),
        "{refusal}"
    );
    drop(impostor);
    let _second = start_job(&api, dir.path(), &keys, &topo.pods[1], "job-2");
    let note = eventually("job-2's SSHReady event", WAIT, || ready_note(&api, "job-2"));
    assert_eq!(port_in(&note), port, "the one port again");
    let landed = eventually("a strict login to job-2", WAIT, || {
        login(&topo, &keys, &known_hosts, port)
            .ok()
            .filter(|h| *h == topo.pods[1].hostname)
    });
    assert_eq!(landed, topo.pods[1].hostname);
    assert_eq!(
        std::fs::read_to_string(&known_hosts).unwrap(),
        printed,
        "known_hosts unchanged"
    );
    // The two jobs had different keys: the certificate is what was trusted.
    let key_2 =
        api.get(Kind::Secret, "jobs", &secret_of("job-2")).unwrap()["data"][KEY_FILE].clone();
    assert_ne!(key_1, key_2);
}
