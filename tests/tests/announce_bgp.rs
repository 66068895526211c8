//! `--announce route` with BIRD 2: the routed two-node cluster
//! (`cluster.rs`) without its static route to the SSH IP. Each node runs
//! the agent with `--announce route --announce-table 100` and a BIRD that
//! learns table 100 and exports it over BGP to the router, whose BIRD
//! installs what it learns with ECMP. Stopping the agent of the node the
//! client's flow enters withdraws its route: the router sends the SSH IP
//! to the other node only, open sessions to pods on both nodes go on, and
//! new logins land.

use std::time::Duration;

use crate::common::Session;
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs,
    agent::write_mappings,
    bird::Bird,
    cluster::{Cluster, NODE_IPS, Wiring},
    cmd, privilege,
    topology::{EXT_IFACE, EXTERNAL_IP},
};

const TABLE: &str = "100";
const ROUTER_IPS: [&str; 2] = ["203.0.113.1", "203.0.113.5"];

fn node_bird(n: usize) -> String {
    format!(
        r#"router id {me};
ipv4 table ssh_ips;
protocol device {{ scan time 1; }}
protocol kernel ssh_table {{
    kernel table {TABLE};
    learn;
    scan time 1;
    ipv4 {{ table ssh_ips; import all; export none; }};
}}
protocol bgp uplink {{
    local {me} as {asn};
    neighbor {router} as 65000;
    hold time 3; keepalive time 1; connect retry time 1; connect delay time 1; error wait time 1, 2;
    ipv4 {{ table ssh_ips; import none; export all; next hop self; }};
}}
"#,
        me = NODE_IPS[n],
        asn = 65001 + n,
        router = ROUTER_IPS[n],
    )
}

fn router_bird() -> String {
    let mut conf = format!(
        "router id {};\nprotocol device {{ scan time 1; }}\n\
         protocol kernel {{ merge paths on; ipv4 {{ import none; export all; }}; }}\n",
        ROUTER_IPS[0]
    );
    for n in 0..2 {
        conf.push_str(&format!(
            "protocol bgp node{n} {{\n    local {} as 65000;\n    neighbor {} as {};\n    \
             hold time 3; keepalive time 1; connect retry time 1; connect delay time 1; error wait time 1, 2;\n    \
             ipv4 {{ import all; export none; }};\n}}\n",
            ROUTER_IPS[n],
            NODE_IPS[n],
            65001 + n
        ));
    }
    conf
}

/// The router's next hops for the SSH IP.
fn next_hops(router: &NetNs) -> Vec<String> {
    let out =
        cmd::run(router.command("ip").args(["route", "show", EXTERNAL_IP])).unwrap_or_default();
    out.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "via")
        .map(|w| w[1].to_owned())
        .collect()
}

fn wait_for_hops(router: &NetNs, want: &[&str], why: &str, birds: &[(&NetNs, &Bird)]) {
    let ok = cmd::wait_until(Duration::from_secs(20), || {
        let mut hops = next_hops(router);
        hops.sort();
        hops == want
    });
    if !ok {
        let shown: Vec<String> = birds
            .iter()
            .map(|(ns, b)| b.show(ns, "protocols all"))
            .collect();
        panic!(
            "{why}: the router's next hops are {:?}, not {want:?}\n{}",
            next_hops(router),
            shown.join("\n")
        );
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bird_learns_ecmp_routes_from_ready_nodes_and_a_stopped_node_is_withdrawn() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(1, 2).unwrap();
    cluster
        .router
        .ip(&["route", "del", &format!("{EXTERNAL_IP}/32")])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(
        &mappings,
        &[
            ("on-a", "198.18.0.10:8022", "10.244.1.5:22"),
            ("on-b", "198.18.0.10:8023", "10.244.2.5:22"),
        ],
    )
    .unwrap();
    let bpffs = [Bpffs::new().unwrap(), Bpffs::new().unwrap()];
    let extra = [
        "--ssh-ip",
        EXTERNAL_IP,
        "--announce",
        "route",
        "--announce-table",
        TABLE,
    ];
    let mut agents: Vec<Agent> = (0..2)
        .map(|n| {
            Agent::start(
                &cluster.nodes[n],
                &[EXT_IFACE],
                &mappings,
                &bpffs[n],
                &extra,
            )
            .unwrap()
        })
        .collect();
    for agent in &mut agents {
        agent
            .wait_for_log(
                "the SSH IPs' routes are in the table",
                Duration::from_secs(5),
            )
            .unwrap();
    }
    for (n, node) in cluster.nodes.iter().enumerate() {
        let table = cmd::run(node.command("ip").args(["route", "show", "table", TABLE])).unwrap();
        assert!(
            table.contains(EXTERNAL_IP) && table.contains("proto 177"),
            "node {n}: {table}"
        );
    }
    let birds = [
        Bird::start(&cluster.nodes[0], "node0", &node_bird(0), dir.path()).unwrap(),
        Bird::start(&cluster.nodes[1], "node1", &node_bird(1), dir.path()).unwrap(),
        Bird::start(&cluster.router, "router", &router_bird(), dir.path()).unwrap(),
    ];
    let shown = [
        (&cluster.nodes[0], &birds[0]),
        (&cluster.nodes[1], &birds[1]),
        (&cluster.router, &birds[2]),
    ];
    wait_for_hops(
        &cluster.router,
        &[NODE_IPS[0], NODE_IPS[1]],
        "ECMP from both nodes",
        &shown,
    );

    let ssh = cluster.ssh();
    assert_eq!(
        ssh.run(&cluster.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1"
    );
    assert_eq!(
        ssh.run(&cluster.client, EXTERNAL_IP, 8023, "hostname")
            .unwrap(),
        "pod-2"
    );
    let mut sessions = [
        Session::open(&ssh, &cluster.client, 8022).unwrap(),
        Session::open(&ssh, &cluster.client, 8023).unwrap(),
    ];
    // The client's flows hash to one of the two next hops: stop that one.
    let dnat = |n: usize| {
        bpffs[n].list().unwrap()["counters"]["dnat"]
            .as_u64()
            .unwrap_or(0)
    };
    let entry = usize::from(dnat(1) > dnat(0));
    let other = 1 - entry;
    agents[entry].stop().unwrap();
    let table = cmd::run(
        cluster.nodes[entry]
            .command("ip")
            .args(["route", "show", "table", TABLE]),
    )
    .unwrap();
    assert!(
        !table.contains(EXTERNAL_IP),
        "node {entry}'s route withdrawn: {table}"
    );
    wait_for_hops(
        &cluster.router,
        &[NODE_IPS[other]],
        "node {entry} withdrawn",
        &shown,
    );

    for (i, s) in sessions.iter_mut().enumerate() {
        s.echo(&format!("after-{i}")).unwrap();
    }
    assert_eq!(
        ssh.run(&cluster.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1"
    );
    assert_eq!(
        ssh.run(&cluster.client, EXTERNAL_IP, 8023, "hostname")
            .unwrap(),
        "pod-2"
    );
    let before = dnat(other);
    assert_eq!(
        ssh.run(&cluster.client, EXTERNAL_IP, 8023, "hostname")
            .unwrap(),
        "pod-2"
    );
    assert!(dnat(other) > before, "the new logins enter node {other}");
    eprintln!(
        "BGP: node {entry} stopped, its route withdrawn; sessions and logins through node {other}"
    );
    agents[other].stop().unwrap();
}
