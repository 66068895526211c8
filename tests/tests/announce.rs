//! `--announce l2` end to end, on one layer-2 segment (`segment.rs`): the
//! client has only an on-link route to the SSH IP and must ARP for it.
//! The announcing node's data path answers with its MAC, and only it; the
//! SSH IP is on no interface, so logins land in the pod and the node's own
//! sshd is not reachable on it. An IPv6 SSH IP likewise, by neighbour
//! discovery, and the unsolicited advertisement of a node that takes it
//! over moves the client's neighbour entry at once. Bad input is refused
//! with the fix.

use std::time::Duration;

use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, Sshd,
    agent::{binary, run_failing, write_mappings},
    cmd, privilege,
    segment::{Segment, node_ip, node_ip6},
    topology::{EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6, pod_ip6},
};

const FRONTEND: &str = "198.18.0.10:8022";
const METRICS: &str = "127.0.0.1:9102";

/// GET /metrics from the agent inside `node`.
fn metrics(node: &NetNs) -> String {
    let script = "exec 3<>/dev/tcp/127.0.0.1/9102; printf 'GET /metrics HTTP/1.1\\r\\nHost: agent\\r\\nConnection: close\\r\\n\\r\\n' >&3; cat <&3";
    cmd::run(node.command("timeout").args(["10", "bash", "-c", script])).unwrap_or_default()
}

/// The value of the series `name` (a full series name, labels included).
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Whether a TCP connect from `ns` to `ip:port` succeeds within 3 s.
fn connects(ns: &NetNs, ip: &str, port: u16) -> bool {
    let script = format!("exec 3<>/dev/tcp/{ip}/{port}");
    ns.command("timeout")
        .args(["3", "bash", "-c", &script])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The SSH IP `ssh_ip` is on none of `node`'s interfaces: the node's sshd
/// answers the client on the node's own address `node_ip` only.
fn on_no_interface(client: &NetNs, node: &NetNs, ssh_ip: &str, node_ip: &str) {
    let addrs = cmd::run(node.command("ip").arg("addr")).unwrap();
    assert!(!addrs.contains(&format!(" {ssh_ip}/")), "{addrs}");
    assert!(
        connects(client, node_ip, 22),
        "control: the node's sshd runs"
    );
    assert!(
        !connects(client, ssh_ip, 22),
        "the node's own sshd must not be reachable on the SSH IP"
    );
}

/// `node`'s agent told the segment three times (`sent`: the metric of its
/// gratuitous ARPs or unsolicited advertisements), its metrics say it
/// announces `ssh_ip`, and `ssh-fwd status` names it with its interface
/// and `mac`.
fn told_and_shown(node: &NetNs, bpffs: &Bpffs, sent: &str, ssh_ip: &str, mac: &str) {
    assert!(
        cmd::wait_until(Duration::from_secs(5), || {
            series(&metrics(node), sent) == Some(3.0)
        }),
        "three of {sent}: {}",
        metrics(node)
    );
    let text = metrics(node);
    assert_eq!(
        series(&text, &format!("ssh_fwd_announcing{{ssh_ip=\"{ssh_ip}\"}}")),
        Some(1.0)
    );
    // What the alerts compare it with: the SSH IPs an agent announces.
    assert_eq!(
        series(
            &text,
            &format!("ssh_fwd_announce_configured{{ssh_ip=\"{ssh_ip}\"}}")
        ),
        Some(1.0)
    );
    let bin = binary().unwrap();
    let mut status = node.command(bin.to_str().unwrap());
    status
        .args(["status", "-o", "json", "--bpffs"])
        .arg(bpffs.path());
    let status: serde_json::Value = serde_json::from_str(&cmd::run(&mut status).unwrap()).unwrap();
    let announcing = &status["announcing"][0];
    assert_eq!(announcing["ssh_ip"], ssh_ip, "{status}");
    assert_eq!(announcing["iface"], EXT_IFACE, "{status}");
    assert_eq!(announcing["mac"], mac, "{status}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn one_node_answers_arp_for_the_ssh_ip_and_logins_land_in_the_pod_not_on_the_node() {
    privilege::require();
    let mut seg = Segment::new(2).unwrap();
    seg.add_pod(0, 1).unwrap();
    let node = &seg.nodes[0];
    // The node's own sshd, on every address it has.
    let _node_sshd = Sshd::start(node, "node-0", &seg.keys).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let extra = [
        "--ssh-ip",
        EXTERNAL_IP,
        "--announce",
        "l2",
        "--metrics-addr",
        METRICS,
    ];
    let mut agent = Agent::start(node, &[EXT_IFACE], &mappings, &bpffs, &extra).unwrap();
    agent
        .wait_for_log("answering ARP for the SSH IP", Duration::from_secs(10))
        .unwrap();

    let mac = Segment::mac(node, EXT_IFACE).unwrap();
    let other = Segment::mac(&seg.nodes[1], EXT_IFACE).unwrap();
    let answers = seg.arping(EXTERNAL_IP, 3).unwrap();
    assert!(!answers.is_empty(), "nobody answered ARP for {EXTERNAL_IP}");
    assert!(
        answers.iter().all(|m| *m == mac),
        "only node 0 ({mac}) answers, not node 1 ({other}): {answers:?}"
    );

    let ssh = seg.ssh();
    let host = ssh.run(&seg.client, EXTERNAL_IP, 8022, "hostname").unwrap();
    assert_eq!(host, "pod-1");

    // The SSH IP is on no interface: the node's sshd answers on the
    // node's own address only.
    on_no_interface(&seg.client, node, EXTERNAL_IP, &node_ip(0));

    // Counted: the answers in the data path, the gratuitous ARPs here.
    let counters = bpffs.list().unwrap()["counters"].clone();
    assert!(
        counters["arp_answered"].as_u64().unwrap_or(0) >= answers.len() as u64,
        "{counters}"
    );
    told_and_shown(node, &bpffs, "ssh_fwd_garps_sent_total", EXTERNAL_IP, &mac);
    agent.stop().unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn announcing_without_an_ssh_ip_or_with_one_on_an_interface_is_refused_with_the_fix() {
    privilege::require();
    let seg = Segment::new(1).unwrap();
    let node = &seg.nodes[0];
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let file = mappings.display().to_string();
    let root = bpffs.path().display().to_string();
    let base = [
        "agent",
        "--external-iface",
        EXT_IFACE,
        "--mappings",
        &file,
        "--bpffs",
        &root,
        "--hairpin",
        "off",
        "--announce",
        "l2",
    ];
    let e = run_failing(node, &base).unwrap();
    assert!(e.contains("add --ssh-ip"), "{e}");

    node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])
        .unwrap();
    let with_ip = [&base[..], &["--ssh-ip", EXTERNAL_IP]].concat();
    let e = run_failing(node, &with_ip).unwrap();
    assert!(e.contains("198.18.0.10 is an address of lo"), "{e}");
    assert!(e.contains("ip addr del 198.18.0.10/32 dev lo"), "{e}");
    assert!(
        !bpffs.path().join("v4").exists(),
        "refused before the data path was touched"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn generic_xdp_answers_arp_on_the_segment() {
    privilege::require();
    xdp_answers_arp_on_the_segment("xdp-generic", false);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn native_xdp_answers_arp_on_the_segment() {
    privilege::require();
    xdp_answers_arp_on_the_segment("xdp", true);
}

/// `--attach how` answers ARP for the SSH IP, and a login lands.
/// `peer_xdp`: the switch's end of the node's veth runs a native XDP
/// program too (a second agent with no mappings): a veth hands what native
/// XDP sends back with `XDP_TX` only to a peer that runs XDP itself, and
/// drops it otherwise (a NIC sends it on its own transmit ring).
fn xdp_answers_arp_on_the_segment(how: &str, peer_xdp: bool) {
    let mut seg = Segment::new(1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let switch_bpffs = Bpffs::new().unwrap();
    let _switch_agent = peer_xdp.then(|| {
        let none = dir.path().join("none.yaml");
        write_mappings(&none, &[]).unwrap();
        Agent::start(
            &seg.switch,
            &["n0"],
            &none,
            &switch_bpffs,
            &["--attach", "xdp"],
        )
        .unwrap()
    });
    seg.add_pod(0, 1).unwrap();
    let node = &seg.nodes[0];
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let extra = ["--ssh-ip", EXTERNAL_IP, "--announce", "l2", "--attach", how];
    let mut agent = Agent::start(node, &[EXT_IFACE], &mappings, &bpffs, &extra).unwrap();
    // Attached as asked, not in another XDP mode.
    let hooks = bpffs.list_of("hooks").unwrap();
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["iface"] == EXT_IFACE && h["hook"] == format!("ingress-{how}")),
        "{hooks}"
    );
    let mac = Segment::mac(node, EXT_IFACE).unwrap();
    let answers = seg.arping(EXTERNAL_IP, 2).unwrap();
    assert!(
        !answers.is_empty() && answers.iter().all(|m| *m == mac),
        "{answers:?}"
    );
    let host = seg
        .ssh()
        .run(&seg.client, EXTERNAL_IP, 8022, "hostname")
        .unwrap();
    assert_eq!(host, "pod-1");
    let counters = bpffs.list().unwrap()["counters"].clone();
    assert!(
        counters["arp_answered"].as_u64().unwrap_or(0) >= 1,
        "{counters}"
    );
    agent.stop().unwrap();
}

const FRONTEND6: &str = "[fd00:198::10]:8022";

/// Pod `n`'s sshd as an IPv6 backend.
fn backend6(n: usize) -> String {
    format!("[{}]:22", pod_ip6(n))
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn one_node_answers_neighbour_solicitations_for_an_ipv6_ssh_ip_and_a_takeover_moves_the_client() {
    privilege::require();
    let mut seg = Segment::new(2).unwrap();
    seg.add_pod(0, 1).unwrap();
    seg.add_pod(1, 2).unwrap();
    seg.add_ipv6().unwrap();
    let node = &seg.nodes[0];
    let _node_sshd = Sshd::start(node, "node-0", &seg.keys).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job6", FRONTEND6, &backend6(1))]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let extra = [
        "--ssh-ip",
        EXTERNAL_IP6,
        "--announce",
        "l2",
        "--metrics-addr",
        METRICS,
    ];
    let mut agent = Agent::start(node, &[EXT_IFACE], &mappings, &bpffs, &extra).unwrap();
    agent
        .wait_for_log(
            "answering neighbour solicitations for the SSH IP",
            Duration::from_secs(10),
        )
        .unwrap();

    // The client solicits the SSH IP (on-link route only); node 0's data
    // path answers, and the login lands in its pod.
    let ssh = seg.ssh();
    let host = ssh
        .run(&seg.client, EXTERNAL_IP6, 8022, "hostname")
        .unwrap();
    assert_eq!(host, "pod-1");
    let mac = Segment::mac(node, EXT_IFACE).unwrap();
    assert_eq!(
        seg.neighbour(EXTERNAL_IP6).unwrap().as_deref(),
        Some(mac.as_str())
    );
    let counters = bpffs.list().unwrap()["counters"].clone();
    assert!(
        counters["ndp_answered"].as_u64().unwrap_or(0) >= 1,
        "{counters}"
    );

    // On no interface: the node's own sshd is not reachable on it.
    on_no_interface(&seg.client, node, EXTERNAL_IP6, &node_ip6(0));

    told_and_shown(
        node,
        &bpffs,
        "ssh_fwd_neighbour_adverts_sent_total",
        EXTERNAL_IP6,
        &mac,
    );

    // The SSH IP moves by hand to node 1: node 0's data path detached,
    // node 1's agent started. The client's entry still names node 0; node
    // 1's unsolicited advertisement overrides it without a solicitation.
    agent.stop().unwrap();
    bpffs.teardown().unwrap();
    assert_eq!(
        seg.neighbour(EXTERNAL_IP6).unwrap().as_deref(),
        Some(mac.as_str()),
        "the client still holds node 0's MAC"
    );
    let other = &seg.nodes[1];
    let other_mac = Segment::mac(other, EXT_IFACE).unwrap();
    let mappings1 = dir.path().join("mappings-1.yaml");
    write_mappings(&mappings1, &[("job6", FRONTEND6, &backend6(2))]).unwrap();
    let bpffs1 = Bpffs::new().unwrap();
    let mut agent1 = Agent::start(other, &[EXT_IFACE], &mappings1, &bpffs1, &extra).unwrap();
    agent1
        .wait_for_log(
            "answering neighbour solicitations for the SSH IP",
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(
        cmd::wait_until(Duration::from_secs(3), || {
            seg.neighbour(EXTERNAL_IP6).ok().flatten().as_deref() == Some(other_mac.as_str())
        }),
        "the client's entry moves to node 1 ({other_mac}): {:?}",
        seg.neighbour(EXTERNAL_IP6)
    );
    let host = ssh
        .run(&seg.client, EXTERNAL_IP6, 8022, "hostname")
        .unwrap();
    assert_eq!(host, "pod-2", "through node 1 now");
    agent1.stop().unwrap();
}
