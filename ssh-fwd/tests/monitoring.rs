//! deploy/monitoring checked against itself, deploy/base and the docs: the
//! PrometheusRule carries the rules file's groups; every alert has a
//! severity, a summary naming its node or pod and a runbook that exists;
//! every alert has a promtool unit test; the component's monitors select
//! the workloads' metrics ports; the dashboard has a row per concern. What
//! Prometheus itself makes of them is `tests/tests/monitoring.rs`.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking, with the error shown"
)]

use std::{collections::BTreeSet, path::Path};

use serde_json::Value;

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/monitoring");
const BASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base");
const OPERATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
const RUNBOOKS: &str = "https://github.com/ssh-fwd/ssh-fwd/blob/main/docs/operations.md#";

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn monitoring(name: &str) -> Value {
    yaml(&Path::new(MONITORING).join(name))
}

/// Every alerting rule of rules.yaml.
fn alerts() -> Vec<Value> {
    monitoring("rules.yaml")["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// GitHub's anchor for a heading: lowercased, punctuation dropped, spaces
/// as dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of the headings under `## Alerts` in docs/operations.md.
fn alert_anchors() -> BTreeSet<String> {
    let text = std::fs::read_to_string(OPERATIONS).unwrap();
    let section = text
        .split_once("\n## Alerts\n")
        .expect("docs/operations.md has an `## Alerts` section")
        .1;
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(slug)
        .collect()
}

#[test]
fn the_prometheus_rule_carries_exactly_the_groups_of_the_rules_file() {
    let plain = monitoring("rules.yaml");
    let operator = monitoring("prometheus-rule.yaml");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        operator["spec"]["groups"], plain["groups"],
        "deploy/monitoring/prometheus-rule.yaml's spec.groups must be rules.yaml's groups, \
         indented under spec:"
    );
}

#[test]
fn every_alert_has_a_severity_a_summary_naming_its_object_and_a_runbook_in_the_operations_guide() {
    let anchors = alert_anchors();
    let alerts = alerts();
    assert!(alerts.len() >= 15, "{} alerts", alerts.len());
    for rule in &alerts {
        let name = rule["alert"].as_str().unwrap();
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        let summary = rule["annotations"]["summary"].as_str().unwrap_or_default();
        assert!(
            [
                "{{ $labels.node }}",
                "{{ $labels.pod }}",
                "{{ $labels.namespace }}"
            ]
            .iter()
            .any(|label| summary.contains(label)),
            "{name}: the summary names no node, pod or namespace: {summary:?}"
        );
        let runbook = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        let anchor = runbook
            .strip_prefix(RUNBOOKS)
            .unwrap_or_else(|| panic!("{name}: runbook_url {runbook:?} is not in {RUNBOOKS}"));
        assert_eq!(anchor, slug(name), "{name}: runbook anchor");
        assert!(
            anchors.contains(anchor),
            "{name}: docs/operations.md has no `### {name}` under `## Alerts`"
        );
    }
}

#[test]
fn every_alert_has_a_promtool_unit_test() {
    let tests = monitoring("rules.test.yaml");
    assert_eq!(tests["rule_files"][0], "rules.yaml");
    let tested: BTreeSet<&str> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|t| !t["exp_alerts"].as_array().unwrap().is_empty())
        .map(|t| t["alertname"].as_str().unwrap())
        .collect();
    let alerts = alerts();
    let defined: BTreeSet<&str> = alerts
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(tested, defined, "alerts without a firing promtool test");
}

/// The metrics port of the first container of `workload` in deploy/base.
fn metrics_port(file: &str) -> (Value, Value) {
    let workload = yaml(&Path::new(BASE).join(file));
    let template = &workload["spec"]["template"];
    let port = template["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .unwrap_or_else(|| panic!("{file} has no port named metrics"))
        .clone();
    (template["metadata"]["labels"].clone(), port)
}

fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector["matchLabels"].as_object().unwrap();
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels[k] == *v)
}

#[test]
fn the_component_scrapes_the_metrics_ports_of_the_agent_and_the_controller() {
    let component = monitoring("kustomization.yaml");
    assert_eq!(component["kind"], "Component");
    let listed: BTreeSet<String> = component["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    let manifests: BTreeSet<String> = std::fs::read_dir(MONITORING)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .filter(|n| {
            ![
                "kustomization.yaml",
                "rules.yaml",
                "rules.test.yaml",
                "scrape-configs.yaml",
            ]
            .contains(&n.as_str())
        })
        .collect();
    assert_eq!(listed, manifests, "the component must list every manifest");

    let (agent_labels, agent_port) = metrics_port("agent-daemonset.yaml");
    let pod_monitor = monitoring("agent-podmonitor.yaml");
    assert_eq!(pod_monitor["kind"], "PodMonitor");
    assert!(selects(&pod_monitor["spec"]["selector"], &agent_labels));
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["port"],
        agent_port["name"]
    );

    let (controller_labels, controller_port) = metrics_port("controller-deployment.yaml");
    let service = monitoring("controller-metrics-service.yaml");
    assert!(selects(
        &serde_json::json!({"matchLabels": service["spec"]["selector"]}),
        &controller_labels
    ));
    assert_eq!(
        service["spec"]["ports"][0]["port"],
        controller_port["containerPort"]
    );
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"],
        controller_port["name"]
    );
    let service_monitor = monitoring("controller-servicemonitor.yaml");
    assert_eq!(service_monitor["kind"], "ServiceMonitor");
    assert!(selects(
        &service_monitor["spec"]["selector"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        service_monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    for doc in [&pod_monitor, &service, &service_monitor] {
        assert_eq!(doc["metadata"]["namespace"], "ssh-fwd", "{doc}");
    }

    // The plain example keeps the same pods' metrics ports.
    let scrape = monitoring("scrape-configs.yaml");
    let jobs: Vec<String> = scrape["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            job["relabel_configs"][0]["regex"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        jobs,
        [
            format!(
                "{};metrics",
                agent_labels["app.kubernetes.io/name"].as_str().unwrap()
            ),
            format!(
                "{};metrics",
                controller_labels["app.kubernetes.io/name"]
                    .as_str()
                    .unwrap()
            ),
        ]
    );
}

/// Every PromQL expression of the dashboard, by panel title.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["panels"]
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
        .collect()
}

#[test]
fn the_dashboard_has_a_row_per_concern_and_every_panel_a_query() {
    let text = std::fs::read_to_string(Path::new(MONITORING).join("dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        rows,
        [
            "Traffic per mapping",
            "Connections",
            "Attacks",
            "Control plane",
            "Controller"
        ]
    );
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", panel["title"]);
        assert!(targets.iter().all(|t| t["expr"].as_str().is_some()));
    }
    assert!(dashboard_queries(&dashboard).len() >= 20);
}
