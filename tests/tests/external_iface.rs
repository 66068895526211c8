//! The external interface found on nodes whose uplinks have other names
//! than eth0: `--external-iface auto` (the default route's interface), patterns
//! (`bond+`, `eno*`), a bond that comes up after the agent, a Node's
//! `ssh-fwd.io/iface` annotation, and the errors when nothing or several
//! match. Real OpenSSH logins through the chosen interface.

use std::{path::PathBuf, time::Duration};

use serde_json::json;
use ssh_fwd::{k8s::api_calls, vocabulary};
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs,
    agent::{run_failing, write_mappings},
    cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    ssh::SshKeys,
    topology::{EXTERNAL_IP, Pod},
};

const FRONTEND: &str = "198.18.0.10:8022";
const METRICS: &str = "127.0.0.1:9117";

/// A node with a management network on `mgmt0` (10.9.0.1, a backup
/// default route of metric 500 through it), pod 1 with sshd, and a client
/// that [`Uplinked::plug`] joins to it.
struct Uplinked {
    // The pod (and its sshd) go before the namespaces.
    _pod: Pod,
    client: NetNs,
    node: NetNs,
    _mgmt: NetNs,
    keys: SshKeys,
    mappings: PathBuf,
    _dir: tempfile::TempDir,
}

impl Uplinked {
    fn new() -> Self {
        let keys = SshKeys::generate().unwrap();
        let client = NetNs::new("client").unwrap();
        let node = NetNs::new("node").unwrap();
        let mgmt = NetNs::new("mgmt").unwrap();
        mgmt.veth("eth0", &node, "mgmt0").unwrap();
        mgmt.ip(&["addr", "add", "10.9.0.2/24", "dev", "eth0"])
            .unwrap();
        node.ip(&["addr", "add", "10.9.0.1/24", "dev", "mgmt0"])
            .unwrap();
        node.ip(&[
            "route", "add", "default", "via", "10.9.0.2", "metric", "500",
        ])
        .unwrap();
        node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])
            .unwrap();
        node.sysctl("net.ipv4.ip_forward", "1").unwrap();
        let pod = Pod::wire(&node, 0, 1, &keys).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mappings = dir.path().join("mappings.yaml");
        write_mappings(&mappings, &[("job", FRONTEND, "10.244.1.5:22")]).unwrap();
        Self {
            _pod: pod,
            client,
            node,
            _mgmt: mgmt,
            keys,
            mappings,
            _dir: dir,
        }
    }

    /// Joins the client (192.0.2.2) to the node by a veth whose node end
    /// is `uplink` (192.0.2.1), the node's default route of metric 100
    /// through it.
    fn plug(&self, uplink: &str) {
        self.client.veth("eth0", &self.node, uplink).unwrap();
        self.client
            .ip(&["addr", "add", "192.0.2.2/24", "dev", "eth0"])
            .unwrap();
        self.client
            .ip(&["route", "add", "default", "via", "192.0.2.1"])
            .unwrap();
        self.node
            .ip(&["addr", "add", "192.0.2.1/24", "dev", uplink])
            .unwrap();
        self.node
            .ip(&[
                "route",
                "add",
                "default",
                "via",
                "192.0.2.2",
                "dev",
                uplink,
                "metric",
                "100",
            ])
            .unwrap();
    }

    fn agent(&self, bpffs: &Bpffs, iface: &str, extra: &[&str]) -> Agent {
        Agent::start(&self.node, &[iface], &self.mappings, bpffs, extra).unwrap()
    }

    /// `hostname` of the pod, by a real ssh login through the frontend.
    fn login(&self) -> String {
        self.keys
            .client()
            .run(&self.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap()
    }
}

/// The interfaces the agent's programs are attached to as external or
/// cluster interfaces.
fn attached(bpffs: &Bpffs) -> Vec<String> {
    let hooks = bpffs.list_of("hooks").unwrap();
    hooks
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["target"] == "interface")
        .map(|h| h["iface"].as_str().unwrap().to_owned())
        .collect()
}

/// The agent's `/metrics`, from inside the node.
fn metrics(node: &NetNs) -> String {
    cmd::run(
        node.command("curl")
            .args(["-sf", &format!("http://{METRICS}/metrics")]),
    )
    .unwrap()
}

/// Waits until `iface` has its carrier (a bond's comes with a port's).
fn wait_lower_up(node: &NetNs, iface: &str) {
    let up = cmd::wait_until(Duration::from_secs(10), || {
        cmd::run(node.command("ip").args(["-br", "link", "show", iface]))
            .is_ok_and(|out| out.contains("LOWER_UP"))
    });
    assert!(up, "{iface} has no carrier after 10 s");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn auto_attaches_to_the_uplink_named_eno1_that_the_default_route_leaves_through() {
    privilege::require();
    let bed = Uplinked::new();
    bed.plug("eno1");
    let bpffs = Bpffs::new().unwrap();
    let agent = bed.agent(&bpffs, "auto", &["--metrics-addr", METRICS]);
    // The default route of metric 100 wins over mgmt0's of 500.
    assert!(
        agent.log().contains(
            "external interface eno1: the IPv4 default route leaves through it (--external-iface auto)"
        ),
        "{}",
        agent.log()
    );
    assert!(attached(&bpffs).contains(&"eno1".to_owned()));
    assert_eq!(bed.login(), "pod-1");
    let body = metrics(&bed.node);
    assert!(
        body.contains(
            "ssh_fwd_external_interface_info{iface=\"eno1\",chosen_by=\"default-route\",\
             rule=\"auto\",source=\"flag\"} 1"
        ),
        "{body}"
    );
    assert_eq!(
        body.matches("ssh_fwd_external_interface_info{").count(),
        1,
        "{body}"
    );
    let (inbound, _) = counters(&bpffs);
    assert!(inbound > 0, "the login was translated on eno1");
}

/// The mapping's packets in and out.
fn counters(bpffs: &Bpffs) -> (u64, u64) {
    let mappings = bpffs.list_of("mappings").unwrap();
    let m = &mappings[0];
    (
        m["packets_in"].as_u64().unwrap_or(0),
        m["packets_out"].as_u64().unwrap_or(0),
    )
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_uplink_bond0_that_appears_after_the_agent_is_waited_for_and_found_by_its_pattern() {
    privilege::require();
    let bed = Uplinked::new();
    let bpffs = Bpffs::new().unwrap();
    let mut agent = Agent::spawn(
        &bed.node,
        &["bond+"],
        &bpffs,
        &[
            "--mappings".into(),
            bed.mappings.display().to_string(),
            "--iface-wait".into(),
            "30s".into(),
        ],
    )
    .unwrap();
    agent
        .wait_for_log(
            "waiting for the external interface",
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(
        agent
            .log()
            .contains("`bond+` matches no interface that is up"),
        "{}",
        agent.log()
    );
    // The uplink appears, as a bond a network daemon brings up late.
    bed.plug("bond0");
    agent
        .wait_for_log("agent ready", Duration::from_secs(20))
        .unwrap();
    let log = agent.log();
    assert!(
        log.contains("the external interface is there")
            && log.contains(
                "external interface bond0: the one interface up that matches bond+ (--external-iface bond+)"
            ),
        "{log}"
    );
    assert!(attached(&bpffs).contains(&"bond0".to_owned()));
    assert_eq!(bed.login(), "pod-1");
    let (inbound, outbound) = counters(&bpffs);
    assert!(inbound > 0 && outbound > 0, "in {inbound} out {outbound}");
}

/// `ssh-fwd agent --external-iface IFACE` in `node`, expected to fail: its stderr.
fn refused(node: &NetNs, bpffs: &Bpffs, mappings: &std::path::Path, args: &[&str]) -> String {
    let mut argv = vec![
        "agent",
        "--mappings",
        mappings.to_str().unwrap(),
        "--bpffs",
        bpffs.path().to_str().unwrap(),
        "--hairpin",
        "off",
    ];
    argv.extend_from_slice(args);
    run_failing(node, &argv).unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pattern_or_auto_that_picks_no_single_interface_fails_with_what_is_there_and_the_fix() {
    privilege::require();
    // eno1 is a port of the bridge br0; eno2 and eno3 are up, eno4 is
    // down; no default route.
    let bed = Uplinked::new();
    bed.plug("eno1");
    let node = &bed.node;
    node.ip(&["route", "flush", "exact", "0.0.0.0/0"]).unwrap();
    node.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    node.ip(&["link", "set", "eno1", "master", "br0"]).unwrap();
    node.ip(&["link", "set", "br0", "up"]).unwrap();
    // Three more NIC ports, cabled to a namespace of their own.
    let spare = NetNs::new("spare").unwrap();
    for (n, iface) in ["eno2", "eno3", "eno4"].into_iter().enumerate() {
        spare.veth(&format!("p{n}"), node, iface).unwrap();
    }
    node.ip(&["link", "set", "eno4", "down"]).unwrap();
    wait_lower_up(node, "br0");
    let bpffs = Bpffs::new().unwrap();
    let refused = |args: &[&str]| refused(node, &bpffs, &bed.mappings, args);

    let e = refused(&["--external-iface", "eth+", "--iface-wait", "0s"]);
    assert!(
        e.contains(
            "no external interface from --external-iface: `eth+` matches no interface that is up and not \
             a port of another (a bond's or a bridge's); present: lo (loopback), mgmt0, pod1, eno1 \
             (port of br0), br0, eno2, eno3, eno4 (down). Name the interface clients \
             reach this node on (--external-iface NAME, or the Node annotation ssh-fwd.io/iface), use a \
             pattern that matches it, or auto (the default route's interface)"
        ),
        "{e}"
    );
    let e = refused(&["--external-iface", "eno*", "--iface-wait", "0s"]);
    assert!(
        e.contains(
            "no external interface from --external-iface: `eno*` matches several interfaces that are up: \
             eno2, eno3. Name the one clients reach this node on (--external-iface eno2), narrow the \
             pattern, give each its own --external-iface if every one is external, or use auto (the \
             default route's interface)"
        ),
        "{e}"
    );
    // Waiting cannot help a pattern matching several: it fails at once.
    let started = std::time::Instant::now();
    refused(&["--external-iface", "eno*", "--iface-wait", "30s"]);
    assert!(started.elapsed() < Duration::from_secs(10));

    let started = std::time::Instant::now();
    let e = refused(&["--external-iface", "auto", "--iface-wait", "2s"]);
    assert!(started.elapsed() >= Duration::from_secs(2), "it waited");
    assert!(
        e.contains(
            "no external interface from --external-iface after waiting 2s (--iface-wait): auto: no \
             default route (IPv4 or IPv6) in the main table leaves through an interface that is \
             up (`ip route show default`, `ip -6 route show default`); name the interface \
             clients reach this node on, or use auto:ADDR with an address of the clients' \
             network"
        ),
        "{e}"
    );
    assert!(e.contains("waiting for the external interface"), "{e}");
    let e = refused(&["--external-iface", "auto:10.9.0.1", "--iface-wait", "0s"]);
    assert!(
        e.contains("auto:10.9.0.1: 10.9.0.1 is an address of this node"),
        "{e}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_nodes_annotation_replaces_iface_there_and_the_route_to_a_client_address_finds_it() {
    privilege::require();
    // The cluster-wide --external-iface names an interface this node lacks; its
    // Node's annotation says where clients come from.
    let bed = Uplinked::new();
    bed.plug("eno1");
    let api = FakeApi::start(&bed.node).unwrap();
    api.apply(
        Kind::Node,
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "n1", "annotations": {vocabulary::IFACE: "auto:192.0.2.77"}}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        api.kubeconfig_as("agent").replace(
            "    user: fake\n",
            "    user: fake\n    namespace: ssh-fwd\n",
        ),
    )
    .unwrap();
    let bpffs = Bpffs::new().unwrap();
    let args: Vec<String> = [
        "--kubernetes",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--ssh-ip",
        EXTERNAL_IP,
        "--node-name",
        "n1",
        "--metrics-addr",
        METRICS,
    ]
    .map(String::from)
    .to_vec();
    let agent = Agent::start_with(&bed.node, &["eth0"], &bpffs, &args).unwrap();
    assert!(
        agent.log().contains(
            "external interface eno1: the route to 192.0.2.77 leaves through it (Node n1's \
             annotation ssh-fwd.io/iface=auto:192.0.2.77)"
        ),
        "{}",
        agent.log()
    );
    assert!(attached(&bpffs).contains(&"eno1".to_owned()));
    let body = metrics(&bed.node);
    assert!(
        body.contains(
            "ssh_fwd_external_interface_info{iface=\"eno1\",chosen_by=\"route-to\",\
             rule=\"auto:192.0.2.77\",source=\"node-annotation\"} 1"
        ),
        "{body}"
    );
    let read_node = api
        .requests()
        .into_iter()
        .any(|r| r.user == "agent" && r.resource == "nodes" && r.verb == "get");
    assert!(read_node, "the agent read its Node");
    for r in api.requests().into_iter().filter(|r| r.user == "agent") {
        assert!(
            api_calls::allows(api_calls::AGENT, &r.group, &r.resource, r.verb),
            "{r:?} is not in k8s/api_calls.rs"
        );
    }
}
