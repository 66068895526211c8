//! `--redirect auto|off` against the node's netfilter: counters in the
//! FORWARD hook of the node's namespace for the pod's SSH traffic, a drop
//! rule there, and real ssh logins through the frontend.
//!
//! What each mode shows in FORWARD (docs/packet-path.md says the same):
//!
//! | ingress | `auto` | `off` |
//! | --- | --- | --- |
//! | tc | nothing (both directions redirected) | requests and replies |
//! | XDP | requests only (XDP passes them to the stack) | requests and replies |

use std::{process::Command, time::Duration};

use crate::common::{Bed, EXTERNAL_IP, FRONTEND, Session};
use ssh_fwd_tests::{Agent, NetNs, Topology, cmd, privilege, topology::EXT_IFACE};

const POD: &str = "10.244.1.5";

/// Named counters in the FORWARD hook of the bed's node, and a chain
/// before them where a drop rule can go.
struct Firewall;

impl Firewall {
    fn install(bed: &Bed) -> Self {
        let node = &bed.topo.nodes[0].ns;
        let rules = format!(
            "table inet ssh_fwd_test {{
               counter requests {{}}
               counter replies {{}}
               chain block {{
                 type filter hook forward priority filter - 1; policy accept;
               }}
               chain count {{
                 type filter hook forward priority filter; policy accept;
                 ip daddr {POD} tcp dport 22 counter name requests
                 ip saddr {POD} tcp sport 22 counter name replies
               }}
             }}\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.nft");
        std::fs::write(&file, rules).unwrap();
        cmd::run(node.command("nft").arg("-f").arg(&file)).unwrap();
        Self
    }

    /// Packets counted so far: (requests to the pod, its replies).
    fn counts(&self, bed: &Bed) -> (u64, u64) {
        let node = &bed.topo.nodes[0].ns;
        let packets = |name: &str| {
            let out = cmd::run(node.command("nft").args([
                "-j",
                "list",
                "counter",
                "inet",
                "ssh_fwd_test",
                name,
            ]))
            .unwrap();
            let json: serde_json::Value = serde_json::from_str(&out).unwrap();
            json["nftables"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|o| o["counter"]["packets"].as_u64())
                .unwrap_or_else(|| panic!("no counter {name} in {json}"))
        };
        (packets("requests"), packets("replies"))
    }

    /// Drops every request to the pod's SSH port in FORWARD, or stops.
    fn drop_requests(&self, bed: &Bed, on: bool) {
        let mut nft = bed.topo.nodes[0].ns.command("nft");
        if on {
            let rule = format!("ip daddr {POD} tcp dport 22 drop");
            nft.args(["add", "rule", "inet", "ssh_fwd_test", "block"])
                .args(rule.split(' '));
        } else {
            nft.args(["flush", "chain", "inet", "ssh_fwd_test", "block"]);
        }
        cmd::run(&mut nft).unwrap();
    }
}

/// Whether a TCP connection to the frontend opens within 3 s.
fn connects(client: &NetNs) -> bool {
    let port = FRONTEND.rsplit(':').next().unwrap();
    client
        .command("timeout")
        .args([
            "3",
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/{EXTERNAL_IP}/{port}"),
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The data path's packet counters by outcome, from `ssh-fwd list`.
fn outcome(bed: &Bed, name: &str) -> u64 {
    bed.bpffs[0].list().unwrap()["counters"][name]
        .as_u64()
        .unwrap_or(0)
}

/// `ssh-fwd status -o json`'s `redirect`.
fn status_redirect(bed: &Bed) -> String {
    let out = cmd::run(
        Command::new(ssh_fwd_tests::agent::binary().unwrap())
            .args(["status", "-o", "json", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    status["redirect"].as_str().unwrap().to_owned()
}

fn pod_hooks(bed: &Bed) -> usize {
    bed.bpffs[0].list().unwrap()["pod_interfaces"]
        .as_array()
        .map_or(0, Vec::len)
}

fn bed(extra: &[&str]) -> Bed {
    Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, &format!("{POD}:22"))],
        extra,
    )
    .unwrap()
}

/// Stops the agent and starts another on the same pins with `extra`.
fn restart(bed: &mut Bed, extra: &[&str]) {
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        extra,
    )
    .unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_redirect_off_the_nodes_forward_hook_sees_both_directions_and_its_drop_rule_holds() {
    privilege::require();
    let bed = bed(&["--redirect", "off"]);
    let firewall = Firewall::install(&bed);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let (requests, replies) = firewall.counts(&bed);
    assert!(requests > 0 && replies > 0, "{requests} {replies}");
    // Translated, both ways, and nothing sent on by the programs.
    assert!(outcome(&bed, "dnat") > 0 && outcome(&bed, "reverse_nat") > 0);
    assert_eq!(outcome(&bed, "redirected"), 0);
    assert_eq!(outcome(&bed, "reply_redirected"), 0);
    assert_eq!(pod_hooks(&bed), 0, "no reply program on pods' interfaces");
    assert_eq!(status_redirect(&bed), "off");

    firewall.drop_requests(&bed, true);
    assert!(
        !connects(bed.client()),
        "the node's firewall must hold with --redirect off"
    );
    firewall.drop_requests(&bed, false);
    assert!(connects(bed.client()), "control: without the drop rule");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_redirect_auto_skips_the_forward_hook_and_a_restart_switches_the_mode_both_ways() {
    privilege::require();
    let mut bed = bed(&[]);
    let firewall = Firewall::install(&bed);
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(
        firewall.counts(&bed),
        (0, 0),
        "auto: netfilter sees nothing"
    );
    assert!(outcome(&bed, "redirected") > 0 && outcome(&bed, "reply_redirected") > 0);
    assert_eq!(status_redirect(&bed), "auto");
    firewall.drop_requests(&bed, true);
    assert!(
        connects(bed.client()),
        "auto bypasses the FORWARD hook, its drop rule included"
    );
    firewall.drop_requests(&bed, false);

    // Restarted with off on the same pins: the programs are replaced.
    restart(&mut bed, &["--redirect", "off"]);
    bed.agents[0]
        .wait_for_log("--redirect changed", Duration::from_secs(5))
        .unwrap();
    assert!(
        cmd::wait_until(Duration::from_secs(10), || pod_hooks(&bed) == 0),
        "the pods' reply programs are removed"
    );
    session.echo("after-switch-to-off").unwrap();
    let before = firewall.counts(&bed);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let after = firewall.counts(&bed);
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "off after auto: {before:?} -> {after:?}"
    );
    firewall.drop_requests(&bed, true);
    assert!(
        !connects(bed.client()),
        "off after auto: the firewall holds"
    );
    firewall.drop_requests(&bed, false);
    assert_eq!(status_redirect(&bed), "off");

    // And back.
    restart(&mut bed, &[]);
    assert!(
        cmd::wait_until(Duration::from_secs(10), || pod_hooks(&bed) == 1),
        "the pod's reply program is back"
    );
    let before = firewall.counts(&bed);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    session.echo("after-switch-to-auto").unwrap();
    assert_eq!(firewall.counts(&bed), before, "auto after off");
    assert_eq!(status_redirect(&bed), "auto");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_ingress_leaves_requests_to_the_forward_hook_and_off_adds_the_replies() {
    privilege::require();
    let mut bed = bed(&["--attach", "xdp-generic"]);
    let firewall = Firewall::install(&bed);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let (requests, replies) = firewall.counts(&bed);
    assert!(requests > 0, "XDP passes translated requests to the stack");
    assert_eq!(replies, 0, "auto: replies are redirected from the pod");

    restart(&mut bed, &["--attach", "xdp-generic", "--redirect", "off"]);
    let before = firewall.counts(&bed);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let after = firewall.counts(&bed);
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "{before:?} -> {after:?}"
    );
    firewall.drop_requests(&bed, true);
    assert!(!connects(bed.client()));
}
