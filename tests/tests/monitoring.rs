//! deploy/monitoring against the real tools: promtool checks the rules and
//! runs their unit tests; a real Prometheus scrapes a real agent and a real
//! controller in a node namespace, fires the alerts for a connection table
//! past 80% and an exhausted port range, and answers every query of the
//! dashboard. The live `/metrics` are checked too: every family has a help
//! text and its unit in its name, and docs/operations.md lists them all.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::{SocketAddrV4, TcpListener, TcpStream},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use crate::common::EXTERNAL_IP;
use serde_json::{Value, json};
use ssh_fwd::vocabulary;
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, Topology,
    agent::write_mappings,
    cmd,
    fake_api::{FakeApi, Kind},
    privilege,
    prometheus::{self, Prometheus},
    topology::EXT_IFACE,
};

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/monitoring");
const OPERATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
const AGENT_METRICS: &str = "127.0.0.1:9105";
const CONTROLLER_METRICS: &str = "127.0.0.1:9106";
/// The smallest `--conn-table-size`, and the connections that fill it past
/// 80%.
const TABLE: usize = 1024;
const FILL: usize = 850;
/// Where the pod's server listens: it speaks first, as sshd does, which is
/// what makes a connection take room in the table.
const BANNER_PORT: u16 = 2222;
const FRONTEND_PORT: u16 = 8022;
/// The controller's whole range: two ports for three SSH pods.
const PORT_RANGE: &str = "8100-8101";

/// The alerts this test makes fire, and some that must stay silent.
const FIRING: [&str; 3] = [
    "SshFwdConnectionTableNearlyFull",
    "SshFwdPortRangeNearlyExhausted",
    "SshFwdNoFreePort",
];
const SILENT: [&str; 5] = [
    "SshFwdAgentNotReady",
    "SshFwdConnectionTableFull",
    "SshFwdDatapathUnreadable",
    "SshFwdHairpinNotAttached",
    "SshFwdNoControllerLeader",
];

#[test]
#[ignore = "needs promtool (Debian's prometheus): `cargo xtask test` installs and runs it"]
fn promtool_accepts_the_rules_and_every_alerts_unit_test_passes() {
    privilege::require();
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "rules.test.yaml"],
    ] {
        let out = cmd::run(Command::new("promtool").args(args).current_dir(MONITORING));
        assert!(out.is_ok(), "promtool {args:?}: {out:?}");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_real_prometheus_fires_the_table_and_port_range_alerts_and_answers_every_dashboard_query() {
    privilege::require();
    raise_file_limit(4 * FILL as u64);
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let dir = tempfile::tempdir().unwrap();

    let mappings = dir.path().join("mappings.yaml");
    let frontend = format!("{EXTERNAL_IP}:{FRONTEND_PORT}");
    let backend = format!("{}:{BANNER_PORT}", topo.pods[0].ip);
    write_mappings(&mappings, &[("job", &frontend, &backend)]).unwrap();
    let bpffs = Bpffs::new().unwrap();
    let table = TABLE.to_string();
    let agent_args = [
        "--conn-table-size",
        &table,
        "--conns-per-source",
        "0",
        "--metrics-addr",
        AGENT_METRICS,
    ];
    let _agent = Agent::start(node, &[EXT_IFACE], &mappings, &bpffs, &agent_args).unwrap();

    let api = FakeApi::start(node).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let controller_args: Vec<String> = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--ssh-ip",
        EXTERNAL_IP,
        "--identity",
        "e2e",
        "--lease-namespace",
        "ssh-fwd",
        "--port-range",
        PORT_RANGE,
        "--metrics-addr",
        CONTROLLER_METRICS,
    ]
    .map(String::from)
    .to_vec();
    let _controller =
        Agent::start_controller(node, dir.path().join("controller.log"), &controller_args).unwrap();

    let rules =
        without_for(&std::fs::read_to_string(Path::new(MONITORING).join("rules.yaml")).unwrap());
    let prometheus = Prometheus::start(node, PROMETHEUS_YML, &[("rules.yaml", &rules)]).unwrap();

    // Counters at zero scraped first: an increase needs a sample before it.
    let scraped = cmd::wait_until(Duration::from_secs(10), || {
        [
            "ssh_fwd_controller_warnings_total",
            "ssh_fwd_reconciles_total",
        ]
        .iter()
        .all(|q| {
            prometheus
                .query(q)
                .is_ok_and(|a| a["result"].as_array().is_some_and(|r| !r.is_empty()))
        })
    });
    assert!(scraped, "prometheus scraped neither binary within 10 s");
    // Three SSH pods for two ports, and a table filled past 80%.
    let started = Instant::now();
    for n in 0..3 {
        api.apply(Kind::Pod, ssh_pod(n));
    }
    let _held = fill_the_table(&topo.client, &topo.pods[0].ns);
    let filled = started.elapsed();
    let deadline = Duration::from_secs(45);
    let mut firing = Vec::new();
    let all_fired = cmd::wait_until(deadline, || {
        firing = prometheus.firing().unwrap_or_default();
        FIRING
            .iter()
            .all(|name| firing.iter().any(|a| a["labels"]["alertname"] == *name))
    });
    assert!(
        all_fired,
        "within {deadline:?}, firing: {firing:#?}\ncontroller's /metrics:\n{}\nprometheus log:\n{}",
        prometheus::get_in(node, CONTROLLER_METRICS, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default(),
        prometheus.log()
    );
    println!(
        "table filled {filled:?} after the start; all of {FIRING:?} firing {:?} after the start",
        started.elapsed()
    );
    for alert in &firing {
        let name = alert["labels"]["alertname"].as_str().unwrap();
        assert!(!SILENT.contains(&name), "{name} fires: {alert:#}");
        if name == "SshFwdConnectionTableNearlyFull" {
            assert_eq!(alert["labels"]["node"], "e2e-node", "{alert:#}");
            let summary = alert["annotations"]["summary"].as_str().unwrap();
            assert!(summary.contains("on node e2e-node is 8"), "{summary}");
        } else if FIRING.contains(&name) {
            assert_eq!(alert["labels"]["pod"], "e2e-controller", "{alert:#}");
        }
    }

    let families = live_families(node);
    every_query_names_live_families_and_answers(&prometheus, &families);
    every_family_has_help_and_its_unit(&families);
    the_operations_guide_lists_every_family(&families);
}

/// The Prometheus configuration: both binaries every second, with the
/// labels the alerts name (Kubernetes service discovery sets them in a
/// cluster: scrape-configs.yaml).
const PROMETHEUS_YML: &str = "\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: ssh-fwd-agent
    static_configs:
      - targets: ['127.0.0.1:9105']
        labels: {node: e2e-node}
  - job_name: ssh-fwd-controller
    static_configs:
      - targets: ['127.0.0.1:9106']
        labels: {namespace: ssh-fwd, pod: e2e-controller}
";

/// The shipped rules with every `for:` at 0s, so that an alert fires at
/// the first evaluation that finds its condition: the promtool unit tests
/// hold the durations, this test what the expressions make of real
/// metrics.
fn without_for(rules: &str) -> String {
    let out: Vec<String> = rules
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: 0s", &line[..line.len() - line.trim_start().len()]),
            None => line.to_owned(),
        })
        .collect();
    assert!(out.iter().any(|l| l.ends_with("for: 0s")));
    out.join("\n")
}

fn ssh_pod(n: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("job-{n}"), "namespace": "jobs",
                     "labels": {vocabulary::SSH: "enabled"}},
        "spec": {"containers": [{"name": "job", "image": "hpc-job"}]},
        "status": {"phase": "Running", "podIP": format!("10.244.1.{}", 10 + n),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Opens [`FILL`] connections from `client` through the frontend to a
/// server in `pod` that greets each one, and returns both ends, open.
/// Each client reads its greeting, so each connection is one the server
/// confirmed: it holds an entry of the table.
fn fill_the_table(client: &NetNs, pod: &NetNs) -> (Vec<TcpStream>, Vec<TcpStream>) {
    std::thread::scope(|s| {
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let server = s.spawn(move || {
            pod.enter_on_this_thread().unwrap();
            let listener = TcpListener::bind(("0.0.0.0", BANNER_PORT)).unwrap();
            listener.set_nonblocking(true).unwrap();
            bound_tx.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut accepted = Vec::new();
            while accepted.len() < FILL && Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        stream.write_all(b"SSH-2.0-banner\r\n").unwrap();
                        accepted.push(stream);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
            accepted
        });
        bound_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let clients = s.spawn(move || {
            client.enter_on_this_thread().unwrap();
            let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), FRONTEND_PORT);
            (0..FILL)
                .map(|n| {
                    let mut stream = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5))
                        .unwrap_or_else(|e| panic!("connection {n}: {e}"));
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    let mut greeting = [0u8; 8];
                    stream
                        .read_exact(&mut greeting)
                        .unwrap_or_else(|e| panic!("connection {n}'s greeting: {e}"));
                    assert_eq!(&greeting, b"SSH-2.0-");
                    stream
                })
                .collect::<Vec<_>>()
        });
        let clients = clients.join().unwrap();
        let servers = server.join().unwrap();
        assert_eq!(servers.len(), FILL);
        (clients, servers)
    })
}

/// Room for both ends of every connection in this process.
fn raise_file_limit(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to an rlimit.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) };
    assert_eq!(got, 0, "{}", std::io::Error::last_os_error());
    if limit.rlim_cur >= wanted {
        return;
    }
    limit.rlim_cur = wanted.min(limit.rlim_max);
    // SAFETY: a valid pointer to an rlimit.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
}

/// Families with a sample per announced SSH IP, and none (so no family in
/// `/metrics`) from an agent that announces nothing, as this test's: the
/// rules may read them if the operations guide lists them.
const ANNOUNCING_ONLY: [&str; 2] = ["ssh_fwd_announce_configured", "ssh_fwd_announcing"];

/// One metric family as `/metrics` describes it.
#[derive(Debug, Default)]
struct MetricFamily {
    kind: String,
    help: String,
    /// Which binaries export it: agent, controller or both.
    from: BTreeSet<&'static str>,
    samples: usize,
}

/// A sample's name without the suffixes its family adds.
fn family_of(name: &str) -> &str {
    ["_total", "_bucket", "_sum", "_count", "_created"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

/// Every family the agent and the controller export now, by name.
fn live_families(node: &NetNs) -> BTreeMap<String, MetricFamily> {
    let mut families: BTreeMap<String, MetricFamily> = BTreeMap::new();
    for (from, addr) in [("agent", AGENT_METRICS), ("controller", CONTROLLER_METRICS)] {
        let (status, body) = prometheus::get_in(node, addr, "/metrics").unwrap();
        assert_eq!(status, 200, "{body}");
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                let family = families.entry(name.to_owned()).or_default();
                family.kind = kind.to_owned();
                family.from.insert(from);
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                families.entry(name.to_owned()).or_default().help = help.to_owned();
            } else if !line.starts_with('#') && !line.is_empty() {
                let name = line.split(['{', ' ']).next().unwrap();
                if let Some(family) = families.get_mut(family_of(name)) {
                    family.samples += 1;
                }
            }
        }
    }
    assert!(families.len() > 30, "{families:#?}");
    families
}

/// The metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ssh_fwd_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// Every dashboard query, its variables set as Grafana would for "all
/// nodes", answers a vector; every metric it names is a live family; and
/// it answers something unless a family it reads has no sample yet (a
/// counter by a label no event has set, such as the webhook's outcomes
/// when no webhook is served). The rules' expressions name live families
/// too.
fn every_query_names_live_families_and_answers(
    prometheus: &Prometheus<'_>,
    families: &BTreeMap<String, MetricFamily>,
) {
    let text = std::fs::read_to_string(Path::new(MONITORING).join("dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let queries: Vec<(String, String)> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_owned()))
        })
        .collect();
    assert!(queries.len() >= 20);
    let mut empty = Vec::new();
    for (panel, expr) in &queries {
        let promql = expr
            .replace("$__rate_interval", "1m")
            .replace("$node", ".*");
        let names = metric_names(&promql);
        assert!(!names.is_empty(), "{panel}: {expr} reads no ssh-fwd metric");
        for name in &names {
            assert!(
                families.contains_key(family_of(name)),
                "{panel}: {expr} reads {name}, which neither binary exports"
            );
        }
        let answer = prometheus
            .query(&promql)
            .unwrap_or_else(|e| panic!("{panel}: {expr}: {e:#}"));
        assert_eq!(answer["resultType"], "vector", "{panel}: {expr}: {answer}");
        let results = answer["result"].as_array().unwrap();
        let may_be_empty = names
            .iter()
            .any(|name| families[family_of(name)].samples == 0);
        if results.is_empty() {
            assert!(may_be_empty, "{panel}: {expr} answers nothing");
            empty.push(expr.clone());
        }
    }
    println!(
        "{} dashboard queries answered; empty (no sample yet): {empty:#?}",
        queries.len()
    );
    let rules = std::fs::read_to_string(Path::new(MONITORING).join("rules.yaml")).unwrap();
    let operations = std::fs::read_to_string(OPERATIONS).unwrap();
    for line in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
    {
        for name in metric_names(line) {
            let announcing = ANNOUNCING_ONLY.contains(&name.as_str()) && operations.contains(&name);
            assert!(
                families.contains_key(family_of(&name)) || announcing,
                "the rule {line} reads {name}, which neither binary exports"
            );
        }
    }
}

/// A help text; a time in seconds and a size in bytes named so; a counter
/// never a gauge named `_total`.
fn every_family_has_help_and_its_unit(families: &BTreeMap<String, MetricFamily>) {
    for (name, family) in families {
        assert!(!family.help.trim().is_empty(), "{name} has no # HELP");
        assert!(
            !family.help.ends_with("..") || family.help.ends_with("..."),
            "{name}'s help ends with two periods: prometheus-client adds one to what is \
             registered"
        );
        let help = family.help.to_lowercase();
        let words: BTreeSet<&str> = help.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        if ["time", "delay", "duration", "latency", "seconds"]
            .iter()
            .any(|w| words.contains(w))
        {
            assert!(
                name.ends_with("_seconds"),
                "{name} ({help}) is a time: _seconds"
            );
        }
        if words.contains("bytes") {
            assert!(
                name.ends_with("_bytes"),
                "{name} ({help}) counts bytes: _bytes"
            );
        }
        assert!(
            !(family.kind != "counter" && name.ends_with("_total")),
            "{name} is a {} named like a counter",
            family.kind
        );
    }
}

/// The table of docs/operations.md's `### Metrics the binaries export`.
fn the_operations_guide_lists_every_family(families: &BTreeMap<String, MetricFamily>) {
    let mut table =
        String::from("| metric | type | from | what it says |\n| --- | --- | --- | --- |\n");
    for (name, family) in families {
        let shown = match family.kind.as_str() {
            "counter" => format!("{name}_total"),
            _ => name.clone(),
        };
        let from = if family.from.len() == 2 {
            "both".to_owned()
        } else {
            family.from.iter().next().unwrap().to_string()
        };
        table.push_str(&format!(
            "| `{shown}` | {} | {from} | {} |\n",
            family.kind,
            family.help.replace('|', "\\|")
        ));
    }
    let docs = std::fs::read_to_string(OPERATIONS).unwrap();
    let listed = docs
        .split_once("\n### Metrics the binaries export\n")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    assert!(
        listed.contains(&table),
        "docs/operations.md's `### Metrics the binaries export` must hold this table:\n\n{table}"
    );
}
