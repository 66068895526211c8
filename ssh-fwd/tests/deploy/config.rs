//! The shared settings (deploy/base/config.env): each read by a workload
//! and described in deploy/README.md, and a change rolls the pods.

use std::{collections::BTreeSet, path::Path};

use serde_json::Value;

use super::{DEPLOY, find, render, shared_config};

fn workload_args(docs: &[Value]) -> String {
    [
        ("DaemonSet", "ssh-fwd-agent"),
        ("Deployment", "ssh-fwd-controller"),
    ]
    .iter()
    .map(|(kind, name)| {
        find(docs, kind, name)["spec"]["template"]["spec"]["containers"].to_string()
    })
    .collect()
}

#[test]
fn every_shared_setting_is_read_by_a_workload_and_described_in_the_readme() {
    let docs = render("base");
    let keys: BTreeSet<String> = shared_config(&docs).data.unwrap().into_keys().collect();
    assert!(keys.len() >= 12, "{keys:?}");
    let used = workload_args(&docs);
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
            used.contains(&format!("$({key})")),
            "{key}: no workload reads it"
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
         - name: ssh-fwd-config\n  behavior: merge\n  literals: [SSH_IP=192.0.2.11]\n",
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
        let args = workload_args(docs);
        assert_eq!(
            args.matches(&format!("\"name\":\"{}\"", name(docs)))
                .count(),
            2,
            "both workloads read the ConfigMap by its hashed name: {args}"
        );
    }
    assert_ne!(workload_args(&before), workload_args(&after));
}
