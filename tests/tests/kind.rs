//! kind and minikube nodes, as far as this machine can host one (kind's
//! node image comes from a registry it cannot reach): the image run as a
//! node container (privileged, its own network namespace behind a bridge as
//! kind's docker network is, its own cgroup namespace, the host's bpffs with
//! shared propagation), with kind's overlay's settings; and each of the
//! agent's findings about such a node (agent/environment.rs) set up and
//! read from its log. docs/kind.md is the recipe these back.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use crate::common::{EXTERNAL_IP, Session};
use ssh_fwd_tests::{
    Bpffs, NetNs, Topology,
    agent::{self, Agent, run_failing_as, write_mappings},
    cgroup::TestCgroup,
    cmd,
    container::{Container, Mount, Seccomp, Spec},
    image::{self, Image},
    manifest, privilege,
    topology::{CLIENT_IP, EXT_IFACE},
};

/// A port in the shipped `port-range`.
const PORT: u16 = 20_123;
/// The agent's words for each finding (agent/environment.rs).
const PINS_NOT_SHARED: &str = "is not shared with the node";
const HAIRPIN_ON_MACHINE_ROOT: &str = "is the machine's root cgroup";
const VETH_PEER: &str = "--attach xdp on veth";

/// `ssh-fwd agent ARGS` in `node` with no capability, behind `wrapper`
/// (a command that execs the rest): it says what it finds of its
/// environment, then refuses at the capability check, before it attaches
/// or pins anything. Its stderr.
fn findings(node: &NetNs, wrapper: &[&str], args: &[&str]) -> String {
    let binary = agent::binary().unwrap();
    let mut argv: Vec<&str> = wrapper.to_vec();
    argv.extend([
        "setpriv",
        "--bounding-set",
        "-all",
        "--inh-caps",
        "-all",
        "--",
    ]);
    argv.push(binary.to_str().unwrap());
    argv.extend(["agent", "--external-iface", EXT_IFACE]);
    argv.extend(args);
    let out = run_failing_as(node, argv[0], &argv[1..]).unwrap();
    assert!(out.contains("missing capabilities"), "{out}");
    out
}

/// A node with no pod, and a mappings file with no mapping (kept in the
/// directory returned).
fn bare_node() -> (Topology, tempfile::TempDir, String) {
    privilege::require();
    let topo = Topology::single_node(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.yaml");
    write_mappings(&path, &[]).unwrap();
    let mappings = path.display().to_string();
    (topo, dir, mappings)
}

#[test]
#[ignore = "needs root and network namespaces: `cargo xtask test` runs it"]
fn pins_on_a_bpffs_private_to_a_container_are_named_with_the_mount_that_keeps_them() {
    let (topo, dir, mappings) = bare_node();
    let node = &topo.nodes[0].ns;
    // A container's own PID and mount namespaces, every mount private, and
    // a bpffs mounted inside: it goes when they do.
    let inside = dir.path().join("bpffs");
    std::fs::create_dir(&inside).unwrap();
    let pins = inside.join("ssh-fwd").display().to_string();
    let mount_inside = r#"mount -t bpf bpf "$0" && exec "$@""#;
    let container = |propagation: &'static str, first: Option<&'static str>| {
        let mut w = vec!["unshare", "--pid", "--fork", "--mount", "--propagation"];
        w.push(propagation);
        if let Some(script) = first {
            w.extend(["sh", "-c", script, inside.to_str().unwrap()]);
        }
        w
    };
    let common = [
        "--mappings",
        mappings.as_str(),
        "--hairpin",
        "off",
        "--bpffs",
    ];
    let args = |pins: &str| -> Vec<String> {
        common
            .iter()
            .map(|s| (*s).to_owned())
            .chain([pins.to_owned()])
            .collect()
    };
    let run = |wrapper: &[&str], pins: &str| {
        let args = args(pins);
        findings(
            node,
            wrapper,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let out = run(&container("private", Some(mount_inside)), &pins);
    assert!(out.contains(PINS_NOT_SHARED), "{out}");
    assert!(out.contains(&format!("--bpffs {pins}")), "{out}");
    assert!(out.contains("mountPropagation: HostToContainer"), "{out}");

    // The node's bpffs (shared, as systemd mounts it), received into the
    // container (HostToContainer): nothing to say.
    let node_bpffs = Bpffs::new().unwrap();
    node_bpffs.mount_shared().unwrap();
    let on_node = node_bpffs.path().join("ssh-fwd").display().to_string();
    let out = run(&container("slave", None), &on_node);
    assert!(!out.contains(PINS_NOT_SHARED), "{out}");
    // Outside any container (the machine's PID namespace), whatever the
    // mount's propagation: nothing to say.
    let out = run(&[], &on_node);
    assert!(!out.contains(PINS_NOT_SHARED), "{out}");
}

#[test]
#[ignore = "needs root, network namespaces and cgroup v2: `cargo xtask test` runs it"]
fn hairpin_on_the_machines_root_cgroup_from_a_node_namespace_is_named_with_the_fix() {
    let (topo, _dir, mappings) = bare_node();
    let node = &topo.nodes[0].ns;
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    let pins = bpffs.path().display().to_string();
    // TestCgroup mounts cgroup2 afresh: its mount's root is the machine's.
    let cgroup = TestCgroup::new().unwrap();
    let machine_root = cgroup.path().parent().unwrap();
    assert!(
        !machine_root.join("cgroup.events").exists(),
        "{} should be the root cgroup",
        machine_root.display()
    );
    let run = |root: &Path| {
        let root = root.display().to_string();
        let args = [
            "--mappings",
            mappings.as_str(),
            "--bpffs",
            pins.as_str(),
            "--hairpin",
            "auto",
            "--cgroup-root",
            root.as_str(),
        ];
        findings(node, &[], &args)
    };
    // A node in a network namespace of its own, sharing the machine's
    // cgroups, as a kind node without a cgroup namespace of its own.
    let out = run(machine_root);
    assert!(out.contains(HAIRPIN_ON_MACHINE_ROOT), "{out}");
    assert!(out.contains("--cgroupns=private"), "{out}");
    assert!(out.contains("--hairpin off"), "{out}");
    // Its own cgroup, as the root of its own cgroup namespace is: nothing
    // to say.
    let out = run(cgroup.path());
    assert!(!out.contains(HAIRPIN_ON_MACHINE_ROOT), "{out}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn native_xdp_on_a_veth_whose_peer_runs_none_is_named_and_a_peer_with_xdp_is_not() {
    let (topo, _dir, mappings) = bare_node();
    let node = &topo.nodes[0].ns;
    let mappings = Path::new(&mappings);
    let bpffs = Bpffs::new().unwrap();
    let xdp = ["--attach", "xdp"];
    let mut agent = Agent::start(node, &[EXT_IFACE], mappings, &bpffs, &xdp).unwrap();
    let log = agent.log();
    assert!(log.contains(&format!("{VETH_PEER} {EXT_IFACE}")), "{log}");
    assert!(log.contains(") runs none"), "{log}");
    assert!(log.contains("--attach tc"), "{log}");
    agent.stop().unwrap();
    // The peer gets a native XDP program (an agent with no mappings), as a
    // switch's end would: the node's next agent has nothing to say.
    let peer_bpffs = Bpffs::new().unwrap();
    let _peer = Agent::start(&topo.client, &["eth0"], mappings, &peer_bpffs, &xdp).unwrap();
    let next = Agent::start(node, &[EXT_IFACE], mappings, &bpffs, &xdp).unwrap();
    assert!(!next.log().contains(VETH_PEER), "{}", next.log());
}

/// The rendered kind overlay's shared settings, with the test's SSH IP,
/// and its agent's arguments with a mappings file (`FILE`) in place of
/// the API server.
fn kind_overlay(file: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let docs = manifest::build("overlays/kind").unwrap();
    let find = |kind: &str, prefix: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(prefix))
            })
            .unwrap()
    };
    let config = find("ConfigMap", "ssh-fwd-config");
    let mut settings: BTreeMap<String, String> =
        serde_json::from_value(config["data"].clone()).unwrap();
    assert_eq!(settings["attach"], "tc", "the overlay's own choice");
    settings.insert("ssh-ip".into(), EXTERNAL_IP.into());
    let ds = find("DaemonSet", "ssh-fwd-agent");
    let args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| match a.as_str().unwrap() {
            "--kubernetes" => format!("--mappings={file}"),
            other => other.to_owned(),
        })
        .collect();
    (settings, args)
}

/// kind's docker network: a bridge on the host with the node's `eth0` peer
/// as a port, and a second container (`neighbour`) on it.
fn kind_network(topo: &Topology) -> NetNs {
    let host = &topo.client;
    host.ip(&["link", "add", "kind", "type", "bridge"]).unwrap();
    host.ip(&["addr", "del", &format!("{CLIENT_IP}/24"), "dev", "eth0"])
        .unwrap();
    host.ip(&["link", "set", "eth0", "master", "kind"]).unwrap();
    host.ip(&["addr", "add", &format!("{CLIENT_IP}/24"), "dev", "kind"])
        .unwrap();
    host.ip(&["link", "set", "kind", "up"]).unwrap();
    // What docs/kind.md has the host do: the SSH IP routed to the node.
    host.ip(&[
        "route",
        "add",
        &format!("{EXTERNAL_IP}/32"),
        "via",
        "192.0.2.1",
    ])
    .unwrap();
    let neighbour = NetNs::new("neighbour").unwrap();
    neighbour.veth("eth0", host, "nb0").unwrap();
    host.ip(&["link", "set", "nb0", "master", "kind"]).unwrap();
    neighbour
        .ip(&["addr", "add", "192.0.2.3/24", "dev", "eth0"])
        .unwrap();
    neighbour
        .ip(&[
            "route",
            "add",
            &format!("{EXTERNAL_IP}/32"),
            "via",
            "192.0.2.1",
        ])
        .unwrap();
    // The node's default route leaves through eth0 (here ext0), as in kind:
    // `external-iface=auto` finds it by that.
    topo.nodes[0]
        .ns
        .ip(&["route", "add", "default", "via", CLIENT_IP])
        .unwrap();
    neighbour
}

/// `ssh-fwd list hooks -o json` of the pins below `pins`, from the host.
fn hooks(pins: &Path) -> serde_json::Value {
    let out = cmd::run(
        Command::new(agent::binary().unwrap())
            .args(["list", "hooks", "-o", "json", "--bpffs"])
            .arg(pins),
    )
    .unwrap();
    serde_json::from_str(&out).unwrap()
}

#[test]
#[ignore = "needs root, network namespaces, BPF and podman: `cargo xtask test` runs it"]
fn a_kind_like_node_container_forwards_ssh_and_a_new_container_keeps_the_session() {
    privilege::require();
    if let Some(why) = image::missing_tools() {
        panic!("this test cannot run here: {why}");
    }
    let topo = Topology::single_node(1).unwrap();
    let neighbour = kind_network(&topo);
    let pod = &topo.pods[0];
    // The host's bpffs, shared (as systemd mounts it), bound into the node
    // container with shared propagation.
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount_shared().unwrap();
    // The node's own cgroup hierarchy, where hairpin attaches.
    let cgroup = TestCgroup::new().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (settings, args) = kind_overlay("/etc/ssh-fwd/files/mappings.yaml");
    assert!(
        args.contains(&"--config=/etc/ssh-fwd/config".to_owned()),
        "{args:?}"
    );
    ssh_fwd_tests::config_volume::write(config.path(), &settings).unwrap();
    let files = tempfile::tempdir().unwrap();
    let frontend = format!("{EXTERNAL_IP}:{PORT}");
    let backend = format!("{}:22", pod.ip);
    write_mappings(
        &files.path().join("mappings.yaml"),
        &[("job", &frontend, &backend)],
    )
    .unwrap();
    let image = Image::build_for_test(&image::static_binary().unwrap()).unwrap();
    let bind = |host: &Path, container: &str, propagation: Option<&'static str>| Mount {
        host: host.to_owned(),
        container: container.into(),
        read_only: propagation.is_none(),
        propagation,
    };
    let spec = Spec {
        image: image.reference().to_owned(),
        netns: topo.nodes[0].ns.path(),
        user: Some(0),
        drop_all_capabilities: false,
        add_capabilities: vec![],
        read_only_root: true,
        no_new_privileges: false,
        seccomp: Seccomp::Unconfined,
        memory_limit_bytes: None,
        privileged: true,
        cgroupns: Some("private"),
        mounts: vec![
            bind(bpffs.path(), "/sys/fs/bpf", Some("rshared")),
            bind(cgroup.path(), "/host/sys/fs/cgroup", None),
            bind(config.path(), "/etc/ssh-fwd/config", None),
            bind(files.path(), "/etc/ssh-fwd/files", None),
        ],
        env: vec![],
        args,
    };
    let started = std::time::Instant::now();
    let first = Container::run(&spec).unwrap();
    first
        .wait_for_log("agent ready", Duration::from_secs(30))
        .unwrap();
    eprintln!("first node container ready in {:?}", started.elapsed());
    let logs = first.logs();
    for finding in [PINS_NOT_SHARED, HAIRPIN_ON_MACHINE_ROOT, VETH_PEER] {
        assert!(!logs.contains(finding), "{finding}: {logs}");
    }
    let own_cgroupns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/cgroup")).unwrap();
    assert_ne!(
        own_cgroupns(first.pid().unwrap()),
        own_cgroupns(std::process::id()),
        "the node container has a cgroup namespace of its own"
    );
    let pins = bpffs.path().join("ssh-fwd");
    let hooks = hooks(&pins);
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["iface"] == EXT_IFACE && h["hook"] == "ingress-tc"),
        "the overlay's attach=tc: {hooks}"
    );

    // ssh from the host and from another container on the kind network
    // lands in the pod behind the node.
    let ssh = topo.ssh();
    for (from, ns) in [("the host", &topo.client), ("a neighbour", &neighbour)] {
        let login = ssh.run(ns, EXTERNAL_IP, PORT, "hostname");
        assert_eq!(login.unwrap(), pod.hostname, "from {from}");
    }

    // The node container goes; a new one adopts the pins: the session
    // lives on throughout.
    let mut session = Session::open(&ssh, &topo.client, PORT).unwrap();
    assert_eq!(first.stop(Duration::from_secs(10)).unwrap(), 0);
    drop(first);
    session.echo("between-containers").unwrap();
    let restarted = std::time::Instant::now();
    let second = Container::run(&spec).unwrap();
    second
        .wait_for_log("agent ready", Duration::from_secs(30))
        .unwrap();
    eprintln!("second node container ready in {:?}", restarted.elapsed());
    assert!(
        second.logs().contains("adopted the pinned maps"),
        "{}",
        second.logs()
    );
    session.echo("after-new-container").unwrap();
    let login = ssh.run(&neighbour, EXTERNAL_IP, PORT, "hostname");
    assert_eq!(login.unwrap(), pod.hostname);
    // Stopped as a kubelet stops it; the host removes what it pinned.
    assert_eq!(second.stop(Duration::from_secs(10)).unwrap(), 0);
    cmd::run(
        Command::new(agent::binary().unwrap())
            .args(["teardown", "--bpffs"])
            .arg(&pins),
    )
    .unwrap();
}
