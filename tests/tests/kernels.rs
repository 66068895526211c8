//! Kernels without what this one has: each feature the agent probes is
//! taken as missing (`SSH_FWD_TEST_PRETEND_MISSING`), and the agent must
//! take its fallback, say so once, export it, and keep forwarding. The tc
//! programs through a clsact qdisc, next to a site's own filter that must
//! survive attach, restart and teardown.

use std::process::Command;

use crate::common::{Bed, FRONTEND, Session};
use serde_json::Value;
use ssh_fwd_tests::{Agent, NetNs, Topology, agent, cmd, privilege, topology::EXT_IFACE};

const PRETEND: &str = "SSH_FWD_TEST_PRETEND_MISSING";
const METRICS: &str = "127.0.0.1:9465";
/// How `tc filter show` prints the site's own filter: a classic BPF
/// program (`ret 0`: no class, the next filter runs). This kernel has no
/// other classifier module than cls_bpf.
const FOREIGN: &str = "bytecode '1,6 0 0 0'";

fn status(bed: &Bed) -> Value {
    let out = cmd::run(
        Command::new(agent::binary().unwrap())
            .args(["status", "-o", "json", "--bpffs"])
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    serde_json::from_str(&out).unwrap()
}

fn filters(ns: &NetNs, parent: &str) -> String {
    cmd::run(
        ns.command("tc")
            .args(["filter", "show", "dev", EXT_IFACE, parent]),
    )
    .unwrap()
}

fn scrape(ns: &NetNs) -> String {
    cmd::run(
        ns.command("curl")
            .args(["-sf", &format!("http://{METRICS}/metrics")]),
    )
    .unwrap()
}

/// The number of ssh-fwd's filters in one direction: in its handle, with
/// one of its programs.
fn ours(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("handle 0x55f0 ssh_fwd_"))
        .count()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn on_this_kernel_every_feature_is_present_and_tc_goes_through_tcx() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &["--attach", "tc", "--metrics-addr", METRICS],
    )
    .unwrap();
    let log = bed.agents[0].log();
    assert!(!log.contains("kernel feature missing"), "{log}");
    let metrics = scrape(&bed.topo.nodes[0].ns);
    for feature in [
        "tcx",
        "xdp_link",
        "ring_buffer",
        "batch_map_ops",
        "cgroup_getpeername",
    ] {
        assert!(
            metrics.contains(&format!(
                "ssh_fwd_kernel_feature{{feature=\"{feature}\"}} 1"
            )),
            "{feature}: {metrics}"
        );
    }
    assert!(metrics.contains("ssh_fwd_tc_attach_info{mechanism=\"tcx\"} 1"));
    let status = status(&bed);
    assert_eq!(status["tc_mechanism"], "tcx", "{status}");
    assert_eq!(
        status["missing_features"],
        serde_json::json!([]),
        "{status}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn without_tcx_tc_goes_through_clsact_next_to_a_foreign_filter_and_keeps_sessions() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    // A site's own filters, in priorities ssh-fwd does not own.
    let site = &topo.nodes[0].ns;
    cmd::run(
        site.command("tc")
            .args(["qdisc", "add", "dev", EXT_IFACE, "clsact"]),
    )
    .unwrap();
    for parent in ["ingress", "egress"] {
        cmd::run(site.command("tc").args([
            "filter",
            "add",
            "dev",
            EXT_IFACE,
            parent,
            "pref",
            "100",
            "protocol",
            "all",
            "bpf",
            "bytecode",
            "1,6 0 0 0,",
        ]))
        .unwrap();
    }
    let pretend = format!("{PRETEND}=tcx");
    let env = [pretend.as_str()];
    let extra = ["--attach", "tc", "--metrics-addr", METRICS];
    let mut bed =
        Bed::start_env(topo, &[("job", FRONTEND, "10.244.1.5:22")], &env, &extra).unwrap();
    let node = &bed.topo.nodes[0].ns;
    let log = bed.agents[0].log();
    assert_eq!(
        bed.agents[0].count_in_log("kernel feature missing: tcx"),
        1,
        "one line naming the feature: {log}"
    );
    assert!(log.contains("clsact"), "{log}");
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    for parent in ["ingress", "egress"] {
        let shown = filters(node, parent);
        assert_eq!(ours(&shown), 1, "{parent}: {shown}");
        assert!(shown.contains(FOREIGN), "{parent}: {shown}");
        assert!(shown.contains("direct-action"), "{parent}: {shown}");
    }
    let metrics = scrape(node);
    assert!(
        metrics.contains("ssh_fwd_kernel_feature{feature=\"tcx\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ssh_fwd_tc_attach_info{mechanism=\"clsact\"} 1"),
        "{metrics}"
    );
    let hooks = bed.bpffs[0].list_of("hooks").unwrap();
    let ext: Vec<&Value> = hooks
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["target"] == "interface")
        .collect();
    assert!(
        !ext.is_empty() && ext.iter().all(|h| h["mechanism"] == "clsact"),
        "{hooks}"
    );
    let pods: Vec<&Value> = hooks
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["target"] == "pod-interface")
        .collect();
    assert!(
        !pods.is_empty() && pods.iter().all(|h| h["mechanism"] == "clsact"),
        "the reply program in a filter too: {hooks}"
    );
    assert_eq!(status(&bed)["tc_mechanism"], "clsact");

    // Restart: the new agent's programs replace the old ones in the same
    // filters, under an open session.
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    session.echo("before").unwrap();
    bed.agents[0].stop().unwrap();
    session.echo("agent-down").unwrap();
    bed.agents[0] = Agent::start_env(
        &bed.topo.nodes[0].ns,
        &env,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &extra,
    )
    .unwrap();
    assert!(bed.agents[0].log().contains("adopted the pinned maps"));
    session.echo("agent-back").unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    for parent in ["ingress", "egress"] {
        let shown = filters(node, parent);
        assert_eq!(ours(&shown), 1, "replaced, not added: {parent}: {shown}");
        assert!(shown.contains(FOREIGN), "{parent}: {shown}");
    }

    // Teardown deletes only ssh-fwd's filters.
    bed.agents[0].stop().unwrap();
    // In the node's namespace: filters are found by interface, where a
    // link is found by its pin.
    cmd::run(
        bed.topo.nodes[0]
            .ns
            .command(agent::binary().unwrap().to_str().unwrap())
            .arg("teardown")
            .arg("--bpffs")
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    for parent in ["ingress", "egress"] {
        let shown = filters(node, parent);
        assert_eq!(ours(&shown), 0, "{parent}: {shown}");
        assert!(shown.contains(FOREIGN), "{parent}: {shown}");
    }
    drop(session);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_tcx_agent_after_a_clsact_one_moves_the_programs_to_tcx_under_a_session() {
    privilege::require();
    let pretend = format!("{PRETEND}=tcx");
    let env = [pretend.as_str()];
    let mut bed = Bed::start_env(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &env,
        &["--attach", "tc"],
    )
    .unwrap();
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &["--attach", "tc"],
    )
    .unwrap();
    session.echo("on-tcx").unwrap();
    for parent in ["ingress", "egress"] {
        assert_eq!(ours(&filters(&bed.topo.nodes[0].ns, parent)), 0, "{parent}");
    }
    let hooks = bed.bpffs[0].list_of("hooks").unwrap();
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["target"] == "interface")
            .all(|h| h["mechanism"] == "tcx"),
        "{hooks}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn without_xdp_auto_takes_tc_and_xdp_is_refused_with_the_way_out() {
    privilege::require();
    let bed = Bed::start_env(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &[&format!("{PRETEND}=xdp_helpers")],
        &["--attach", "auto"],
    )
    .unwrap();
    assert_eq!(
        bed.agents[0].count_in_log("kernel feature missing: xdp_helpers"),
        1
    );
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let node = &bed.topo.nodes[0].ns;
    let binary = agent::binary().unwrap();
    let refused = agent::run_failing_as(
        node,
        "env",
        &[
            format!("{PRETEND}=xdp_link").as_str(),
            binary.to_str().unwrap(),
            "agent",
            "--iface",
            EXT_IFACE,
            "--mappings",
            bed.mappings.to_str().unwrap(),
            "--bpffs",
            "/sys/fs/bpf/ssh-fwd-kernels-refused",
            "--attach",
            "xdp",
            "--hairpin",
            "off",
        ],
    )
    .unwrap();
    assert!(refused.contains("xdp_link"), "{refused}");
    assert!(refused.contains("--attach tc"), "{refused}");
    assert!(!refused.contains("verifier"), "{refused}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn what_the_data_path_cannot_load_without_is_refused_naming_the_feature() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("m.yaml");
    agent::write_mappings(&mappings, &[("job", FRONTEND, "10.244.1.5:22")]).unwrap();
    let binary = agent::binary().unwrap();
    let refused = agent::run_failing_as(
        node,
        "env",
        &[
            format!("{PRETEND}=ring_buffer").as_str(),
            binary.to_str().unwrap(),
            "agent",
            "--iface",
            EXT_IFACE,
            "--mappings",
            mappings.to_str().unwrap(),
            "--bpffs",
            "/sys/fs/bpf/ssh-fwd-kernels-refused",
            "--hairpin",
            "off",
        ],
    )
    .unwrap();
    assert!(refused.contains("ring_buffer"), "{refused}");
    assert!(refused.contains("5.8"), "{refused}");
    assert!(refused.contains("docs/kernels.md"), "{refused}");
    // Refused before anything was made.
    assert!(!std::path::Path::new("/sys/fs/bpf/ssh-fwd-kernels-refused").exists());
}

/// Each table's bytes in `ssh-fwd status`, by name.
fn table_memory(status: &Value) -> std::collections::BTreeMap<String, u64> {
    status["table_memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["table"].as_str().unwrap().to_owned(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// What the estimate says every pinned table takes on this machine: as
/// made, but for `SSH_IPS` and `SSH_IPS6`, which grow, and hold the SSH
/// IPv4 address and, with IPv6, the IPv6 one (the tables not pinned are not
/// in `status`).
fn estimated(ipv6: bool) -> std::collections::BTreeMap<String, u64> {
    use ssh_fwd::datapath::{footprint::estimate, object::Settings};
    use ssh_fwd_common::maps::{ALL_MAPS, SSH_IPS, SSH_IPS6};
    let cpus = u32::try_from(aya::util::nr_cpus().unwrap()).unwrap();
    let defs = estimate::definitions(&Settings {
        ipv6,
        ..Settings::default()
    })
    .unwrap();
    defs.iter()
        .filter(|(name, _)| ALL_MAPS.contains(&name.as_str()))
        .map(|(name, d)| {
            let held = if name == SSH_IPS || (ipv6 && name == SSH_IPS6) {
                d.per_entry(cpus)
            } else {
                0
            };
            (name.clone(), d.bytes(cpus) + held)
        })
        .collect()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_tables_take_what_the_estimate_says_and_ipv6_ones_only_where_served() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("job", FRONTEND, "10.244.1.5:22")],
        &["--metrics-addr", METRICS],
    )
    .unwrap();
    // No IPv6 --ssh-ip or mapping: the IPv6 tables are made with one entry.
    let first = status(&bed);
    let counted = table_memory(&first);
    assert_eq!(counted, estimated(false), "{first}");
    assert!(
        counted["CONNS6"] < 4096 && counted["HALF_OPEN6"] < 4096,
        "{counted:?}"
    );
    let text = scrape(&bed.topo.nodes[0].ns);
    let line = format!(
        "ssh_fwd_table_memory_bytes{{table=\"CONNS\"}} {}",
        counted["CONNS"]
    );
    assert!(text.contains(&line), "{line} in\n{text}");
    assert!(
        bed.agents[0].log().contains("kernel memory of the tables:"),
        "{}",
        bed.agents[0].log()
    );

    // Serving IPv6 from the next start makes them at full size, under a
    // session that keeps flowing.
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    bed.agents[0].stop().unwrap();
    let v4 = crate::common::EXTERNAL_IP;
    let v6 = ssh_fwd_tests::topology::EXTERNAL_IP6;
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &["--ssh-ip", v4, "--ssh-ip", v6],
    )
    .unwrap();
    session.echo("ipv6-on").unwrap();
    assert_eq!(table_memory(&status(&bed)), estimated(true));
    assert!(
        bed.agents[0].log().contains("IPv6 is served now"),
        "{}",
        bed.agents[0].log()
    );

    // And back.
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &[],
    )
    .unwrap();
    session.echo("ipv6-off").unwrap();
    assert_eq!(table_memory(&status(&bed)), estimated(false));
    // A file that gains an IPv6 mapping now is refused, naming the fix,
    // and the running mappings stay.
    agent::write_mappings(
        &bed.mappings,
        &[
            ("job", FRONTEND, "10.244.1.5:22"),
            ("job6", "[fd00:198::10]:8022", "[fd00:244:1::5]:22"),
        ],
    )
    .unwrap();
    bed.agents[0]
        .wait_for_log("mappings file rejected", std::time::Duration::from_secs(10))
        .unwrap();
    let log = bed.agents[0].log();
    assert!(
        log.contains("mapping job6 has the IPv6 frontend")
            && log.contains("restart the agent to make them"),
        "{log}"
    );
    session.echo("still").unwrap();
}
