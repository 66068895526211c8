//! The shared settings (deploy/base/config.env): each key a flag of a
//! workload that mounts them, described in deploy/README.md, and a change
//! rolls the pods.

use std::{collections::BTreeSet, path::Path};

use clap::CommandFactory as _;
use serde_json::Value;
use ssh_fwd::cli::Cli;

use super::{DEPLOY, find, render, shared_config};

/// The workloads' pod specs, as rendered.
fn workload_pods(docs: &[Value]) -> String {
    [
        ("DaemonSet", "ssh-fwd-agent"),
        ("Deployment", "ssh-fwd-controller"),
    ]
    .iter()
    .map(|(kind, name)| find(docs, kind, name)["spec"]["template"]["spec"].to_string())
    .collect()
}

/// The long flag names of `command`.
fn flag_names(command: &str) -> BTreeSet<String> {
    let cli = Cli::command();
    let sub = cli.find_subcommand(command).unwrap();
    (sub.get_arguments().filter_map(clap::Arg::get_long))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_shared_setting_is_read_by_a_workload_and_described_in_the_readme() {
    let docs = render("base");
    let keys: BTreeSet<String> = shared_config(&docs).data.unwrap().into_keys().collect();
    assert!(keys.len() >= 12, "{keys:?}");
    let (agent, controller) = (flag_names("agent"), flag_names("controller"));
    let readme = std::fs::read_to_string(Path::new(DEPLOY).join("README.md")).unwrap();
    let table = readme
        .split_once("\n## The shared settings\n")
        .expect("deploy/README.md has a `## The shared settings` section")
        .1;
    let table = table.split("\n## ").next().unwrap();
    let described: BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect();
    for key in &keys {
        assert!(
            agent.contains(key) || controller.contains(key),
            "{key}: a flag of neither the agent nor the controller"
        );
    }
    assert_eq!(
        described, keys,
        "deploy/README.md's table of shared settings must list exactly the ConfigMap's keys"
    );
}

#[test]
fn a_changed_setting_rolls_the_agents_and_the_controller() {
    let before = render("base");
    let after = render::render_kustomization(
        "changed-setting",
        "resources: [DEPLOY/base]\n\
         configMapGenerator:\n\
         - name: ssh-fwd-config\n  behavior: merge\n  literals: [ssh-ip=192.0.2.11]\n",
    )
    .unwrap();
    let name = |docs: &[Value]| shared_config(docs).metadata.name.unwrap();
    assert_ne!(
        name(&before),
        name(&after),
        "a new ConfigMap for new settings"
    );
    // The pod templates name it, so each workload rolls out.
    for docs in [&before, &after] {
        let pods = workload_pods(docs);
        assert_eq!(
            pods.matches(&format!("\"name\":\"{}\"", name(docs)))
                .count(),
            2,
            "both workloads mount the ConfigMap by its hashed name: {pods}"
        );
    }
    assert_ne!(workload_pods(&before), workload_pods(&after));
}
