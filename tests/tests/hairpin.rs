//! Hairpin end to end, with real OpenSSH in the routed two-node cluster:
//! clients inside the cluster (pods on either node, the target pod itself,
//! the nodes' own namespaces) run `ssh -p PORT root@EXTERNAL_IP` and land in
//! the mapped pod, which sees their own address in `$SSH_CONNECTION`, while
//! the client's log names the frontend it dialled (getpeername). Each node's
//! agent attaches to a cgroup of the test's own, and only the test's
//! clients join it. The same over IPv6 (`connect6`, `getpeername6`).

use std::{path::PathBuf, process::Command, time::Duration};

use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, TestCgroup,
    agent::write_mappings,
    cluster::{Cluster, PEER_IP6S, Wiring},
    cmd, privilege,
    topology::{EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6, pod_ip6},
};

const PORT: u16 = 8123;
const FRONTEND: &str = "198.18.0.10:8123";
/// The IPv6 frontend of pod-1 in [`Bed::start_dual`].
const PORT6: u16 = 8124;
const FRONTEND6: &str = "[fd00:198::10]:8124";

/// The cluster, pod-1 on node A (the target), pod-2 on node B (where the
/// mapping moves), pod-3 on A and pod-4 on B (clients); an agent and a
/// cgroup per node.
struct Bed {
    agents: Vec<Agent>,
    bpffs: Vec<Bpffs>,
    cgroups: Vec<TestCgroup>,
    cluster: Cluster,
    mappings: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bed {
    fn start() -> Self {
        Self::start_with(false)
    }

    /// [`Bed::start`] with IPv6 on the cluster and a second mapping,
    /// [`FRONTEND6`] to pod-1's IPv6 address.
    fn start_dual() -> Self {
        Self::start_with(true)
    }

    fn start_with(ipv6: bool) -> Self {
        let mut cluster = Cluster::new(Wiring::default()).unwrap();
        for (node, n) in [(0, 1), (1, 2), (0, 3), (1, 4)] {
            cluster.add_pod(node, n).unwrap();
        }
        let dir = tempfile::Builder::new()
            .prefix("ssh-fwd-hp")
            .tempdir()
            .unwrap();
        let mappings = dir.path().join("mappings.yaml");
        let backend6 = format!("[{}]:22", pod_ip6(1));
        let mut entries = vec![("job", FRONTEND, "10.244.1.5:22")];
        if ipv6 {
            cluster.add_ipv6().unwrap();
            entries.push(("job6", FRONTEND6, &backend6));
        }
        write_mappings(&mappings, &entries).unwrap();
        let mut bed = Self {
            agents: vec![],
            bpffs: vec![],
            cgroups: vec![],
            cluster,
            mappings,
            _dir: dir,
        };
        for node in 0..2 {
            bed.bpffs.push(Bpffs::new().unwrap());
            bed.cgroups.push(TestCgroup::new().unwrap());
            let agent = bed.start_agent(node);
            bed.agents.push(agent);
        }
        bed
    }

    fn start_agent(&self, node: usize) -> Agent {
        let root = self.cgroups[node].path().display().to_string();
        Agent::start(
            &self.cluster.nodes[node],
            &[EXT_IFACE],
            &self.mappings,
            &self.bpffs[node],
            &["--hairpin", "auto", "--cgroup-root", &root],
        )
        .unwrap()
    }

    /// `ssh -p PORT root@EXTERNAL_IP` from `ns` in `node`'s cgroup: the
    /// answering host, `$SSH_CONNECTION`'s client address and its server
    /// part, and the address the client says it reached.
    fn ssh(&self, node: usize, ns: &NetNs) -> Reached {
        self.ssh_to(node, ns, EXTERNAL_IP, PORT)
    }

    /// [`Bed::ssh`] to `host` and `port`.
    fn ssh_to(&self, node: usize, ns: &NetNs, host: &str, port: u16) -> Reached {
        let (out, log) = self
            .cluster
            .ssh()
            .run_in_cgroup(
                &self.cgroups[node],
                ns,
                host,
                port,
                "hostname; echo $SSH_CONNECTION",
            )
            .unwrap();
        let mut lines = out.lines();
        let host = lines.next().unwrap_or_default().to_owned();
        let conn: Vec<String> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let dialled = log
            .lines()
            .find_map(|l| l.strip_prefix("Authenticated to "))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .unwrap_or_default()
            .trim_matches(|c| c == '(' || c == ')')
            .to_owned();
        Reached {
            host,
            client_ip: conn.first().cloned().unwrap_or_default(),
            server: conn.get(2..4).map(|s| s.join(":")).unwrap_or_default(),
            dialled,
        }
    }

    fn pod_ns(&self, n: usize) -> &NetNs {
        &self.cluster.pods[n - 1].ns
    }

    /// Waits until both agents have `backend` for the frontend.
    fn wait_for_backend(&self, backend: &str) {
        for bpffs in &self.bpffs {
            assert!(
                cmd::wait_until(Duration::from_secs(10), || {
                    bpffs
                        .list_of("mappings")
                        .is_ok_and(|m| m[0]["backend"] == backend)
                }),
                "the agent did not install {backend}"
            );
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.agents.clear();
        self.bpffs.clear();
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Reached {
    host: String,
    client_ip: String,
    server: String,
    dialled: String,
}

fn reached(host: &str, client_ip: &str, server: &str) -> Reached {
    Reached {
        host: host.into(),
        client_ip: client_ip.into(),
        server: server.into(),
        dialled: format!("[{EXTERNAL_IP}]:{PORT}"),
    }
}

/// `sock-probe tcp EXTERNAL_IP port` from `ns` in `cgroup`.
fn probe(cgroup: &TestCgroup, ns: &NetNs, port: u16) -> String {
    let bin = env!("CARGO_BIN_EXE_sock-probe");
    let out = cmd::run(
        cgroup
            .command(Some(ns), bin)
            .args(["tcp", EXTERNAL_IP, &port.to_string()]),
    )
    .unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

fn cgroup_programs(cgroup: &TestCgroup) -> usize {
    let out = cmd::run(
        Command::new("bpftool")
            .arg("cgroup")
            .arg("show")
            .arg(cgroup.path()),
    )
    .unwrap();
    out.lines()
        .filter(|l| l.contains("connect") || l.contains("getpeername"))
        .count()
}

/// Every in-cluster client reaches pod-1 through the frontend.
fn every_client_reaches_pod_1(bed: &Bed, why: &str) {
    let pod1 = "10.244.1.5:22";
    let cases = [
        ("node A", 0, &bed.cluster.nodes[0], "10.244.1.1"),
        ("node B", 1, &bed.cluster.nodes[1], "10.0.0.2"),
        ("a pod on node A", 0, bed.pod_ns(3), "10.244.3.5"),
        ("a pod on node B", 1, bed.pod_ns(4), "10.244.4.5"),
        ("the target pod itself", 0, bed.pod_ns(1), "10.244.1.5"),
    ];
    for (name, node, ns, client_ip) in cases {
        assert_eq!(
            bed.ssh(node, ns),
            reached("pod-1", client_ip, pod1),
            "from {name} ({why})"
        );
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn in_cluster_clients_reach_a_frontend_with_the_ssh_ip_on_lo_and_without() {
    privilege::require();
    let bed = Bed::start();
    every_client_reaches_pod_1(&bed, "SSH IP on the nodes' lo");
    for node in &bed.cluster.nodes {
        node.ip(&["addr", "del", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])
            .unwrap();
    }
    every_client_reaches_pod_1(&bed, "SSH IP on no node");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn in_cluster_clients_reach_an_ipv6_frontend_and_the_pod_sees_their_own_ipv6_address() {
    privilege::require();
    let bed = Bed::start_dual();
    let pod1 = format!("{}:22", pod_ip6(1));
    let (pod3, pod4, target) = (pod_ip6(3), pod_ip6(4), pod_ip6(1));
    let cases = [
        ("node A", 0, &bed.cluster.nodes[0], "fd00:244:1::1"),
        ("node B", 1, &bed.cluster.nodes[1], PEER_IP6S[1]),
        ("a pod on node A", 0, bed.pod_ns(3), pod3.as_str()),
        ("a pod on node B", 1, bed.pod_ns(4), pod4.as_str()),
        ("the target pod itself", 0, bed.pod_ns(1), target.as_str()),
    ];
    for (name, node, ns, client_ip) in cases {
        assert_eq!(
            bed.ssh_to(node, ns, EXTERNAL_IP6, PORT6),
            Reached {
                host: "pod-1".into(),
                client_ip: client_ip.into(),
                server: pod1.clone(),
                dialled: FRONTEND6.into(),
            },
            "from {name}"
        );
    }
    // The IPv4 frontend beside it, from a pod on the other node.
    assert_eq!(
        bed.ssh(1, bed.pod_ns(4)),
        reached("pod-1", "10.244.4.5", "10.244.1.5:22")
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_unmapped_port_on_the_ssh_ip_is_not_translated() {
    privilege::require();
    let bed = Bed::start();
    // The SSH IP is on node A's lo: its own stack refuses the port.
    assert_eq!(
        probe(&bed.cgroups[0], &bed.cluster.nodes[0], PORT + 1),
        "error 111"
    );
    assert_eq!(probe(&bed.cgroups[0], bed.pod_ns(3), PORT + 1), "error 111");
    assert_eq!(
        probe(&bed.cgroups[0], bed.pod_ns(3), PORT),
        format!("peer {FRONTEND}"),
        "control: the mapped port is translated"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_moved_mapping_and_a_restarted_agent_keep_hairpin_working_and_teardown_removes_it() {
    privilege::require();
    let mut bed = Bed::start();
    let hooks = bed.bpffs[0].list_of("hooks").unwrap();
    let cgroup_hooks: Vec<&serde_json::Value> = hooks
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["target"] == "cgroup")
        .collect();
    assert_eq!(cgroup_hooks.len(), 4, "list hooks: {hooks}");
    assert_eq!(
        cgroup_hooks[0]["iface"],
        bed.cgroups[0].path().display().to_string()
    );

    write_mappings(&bed.mappings, &[("job", FRONTEND, "10.244.2.5:22")]).unwrap();
    bed.wait_for_backend("10.244.2.5:22");
    assert_eq!(
        bed.ssh(0, bed.pod_ns(3)),
        reached("pod-2", "10.244.3.5", "10.244.2.5:22"),
        "the next connect goes to the new pod"
    );

    bed.agents[0].stop().unwrap();
    assert_eq!(
        bed.ssh(0, bed.pod_ns(3)).host,
        "pod-2",
        "hairpin keeps working with the agent stopped"
    );
    let agent = bed.start_agent(0);
    bed.agents[0] = agent;
    assert_eq!(cgroup_programs(&bed.cgroups[0]), 4, "adopted, not doubled");
    assert_eq!(
        bed.ssh(0, &bed.cluster.nodes[0]),
        reached("pod-2", "10.0.0.1", "10.244.2.5:22"),
        "after the restart"
    );

    bed.agents[0].stop().unwrap();
    cmd::run(
        bed.cluster.nodes[0]
            .command(ssh_fwd_tests::agent::binary().unwrap().to_str().unwrap())
            .args(["teardown", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    assert_eq!(cgroup_programs(&bed.cgroups[0]), 0, "teardown detaches");
}
