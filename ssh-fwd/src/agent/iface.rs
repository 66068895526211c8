//! The external interfaces this agent attaches to, chosen once at start:
//! the rules of its Node's `ssh-fwd.io/iface` annotation (Kubernetes mode
//! with `--node-name`), else `--external-iface`'s, applied to the node's interfaces
//! and routes ([`external_iface`]), waited for up to `--iface-wait`. Each
//! choice is logged in one line and exported as
//! `ssh_fwd_external_interface_info`.
//!
//! Trust: the annotation is written by whoever may update Nodes, cluster
//! administrators and the node's own kubelet, never a tenant; it only
//! picks among this node's own interfaces.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
};

use super::AgentArgs;
use crate::{
    datapath::{
        external_iface::{self, Chosen, IfaceRule, Seen, Unresolved},
        netdev::Netlink,
    },
    mapping,
    vocabulary::IFACE,
};

/// How often the rules are tried again while nothing satisfies them.
const RETRY: Duration = Duration::from_secs(1);
/// How long one read of the Node may take.
const NODE_READ: Duration = Duration::from_secs(5);

/// `ssh_fwd_external_interface_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IfaceLabels {
    pub iface: String,
    /// The rule's kind: `name`, `pattern`, `default-route`, `route-to`.
    pub chosen_by: String,
    /// The rule as written (`bond+`, `auto:192.0.2.1`).
    pub rule: String,
    /// `flag` (`--external-iface`) or `node-annotation`.
    pub source: String,
}

/// Where the rules came from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    Flag,
    /// The annotation of this Node.
    Node(String),
}

impl Origin {
    fn label(&self) -> &'static str {
        match self {
            Self::Flag => "flag",
            Self::Node(_) => "node-annotation",
        }
    }

    /// The rule as the operator wrote it, and where.
    fn written(&self, rule: &IfaceRule) -> String {
        match self {
            Self::Flag => format!("--external-iface {rule}"),
            Self::Node(node) => format!("Node {node}'s annotation {IFACE}={rule}"),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Flag => "--external-iface".into(),
            Self::Node(node) => format!("Node {node}'s annotation {IFACE}"),
        }
    }
}

/// The external interfaces' names, once the rules pick them; fails when
/// they pick nothing within `--iface-wait`, or cannot.
pub async fn choose(
    args: &AgentArgs,
    client: Option<kube::Client>,
    metric: &Family<IfaceLabels, Gauge>,
) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + args.iface_wait;
    let (rules, origin) = match (client, &args.node_name) {
        (Some(client), Some(node)) => match annotated(&Api::all(client), node, deadline).await? {
            Some(rules) => (rules, Origin::Node(node.clone())),
            None => (args.ifaces.clone(), Origin::Flag),
        },
        _ => (args.ifaces.clone(), Origin::Flag),
    };
    let families = families(&args.ssh_ips);
    let chosen = wait_for(&rules, &origin, &families, args.iface_wait, deadline).await?;
    for c in &chosen {
        tracing::info!(
            iface = c.name,
            chosen_by = c.rule.kind(),
            rule = %c.rule,
            source = origin.label(),
            why = c.why,
            "external interface {}: {} ({})",
            c.name,
            c.why,
            origin.written(&c.rule)
        );
        metric
            .get_or_create(&IfaceLabels {
                iface: c.name.clone(),
                chosen_by: c.rule.kind().into(),
                rule: c.rule.to_string(),
                source: origin.label().into(),
            })
            .set(1);
    }
    Ok(chosen.into_iter().map(|c| c.name).collect())
}

/// The families whose default routes `auto` follows: the SSH IPs', or
/// both without any.
fn families(ssh_ips: &[std::net::IpAddr]) -> Vec<mapping::Family> {
    let mut families: Vec<mapping::Family> =
        ssh_ips.iter().map(|ip| mapping::Family::of(*ip)).collect();
    families.sort_unstable();
    families.dedup();
    if families.is_empty() {
        families = vec![mapping::Family::V4, mapping::Family::V6];
    }
    families
}

/// Tries the rules until they pick something, a rule cannot be satisfied
/// by waiting, or the deadline passes.
async fn wait_for(
    rules: &[IfaceRule],
    origin: &Origin,
    families: &[mapping::Family],
    wait: Duration,
    deadline: Instant,
) -> anyhow::Result<Vec<Chosen>> {
    let netlink = Netlink::open()?;
    let started = Instant::now();
    let mut waiting = false;
    loop {
        let seen = Seen::read(&netlink, rules).await?;
        let error = match external_iface::choose(rules, &seen, families) {
            Ok(chosen) => {
                if waiting {
                    tracing::info!(
                        waited = %humantime::format_duration(round(started.elapsed())),
                        "the external interface is there"
                    );
                }
                return Ok(chosen);
            }
            Err(e) => e,
        };
        let now = Instant::now();
        if !error.may_appear_later() || now >= deadline {
            return Err(failed(&error, origin, waiting.then_some(wait)));
        }
        if !waiting {
            tracing::warn!(
                error = %error,
                wait = %humantime::format_duration(wait),
                "waiting for the external interface ({}); trying every second until \
                 --iface-wait is over",
                origin.describe()
            );
            waiting = true;
        }
        tokio::time::sleep(RETRY.min(deadline - now)).await;
    }
}

fn failed(error: &Unresolved, origin: &Origin, waited: Option<Duration>) -> anyhow::Error {
    let waited = waited.map_or_else(String::new, |w| {
        format!(
            " after waiting {} (--iface-wait)",
            humantime::format_duration(w)
        )
    });
    let fix = match origin {
        Origin::Flag => String::new(),
        Origin::Node(node) => format!(
            "; the annotation replaces --external-iface on this node: change it (`kubectl annotate node \
             {node} {IFACE}=VALUE --overwrite`) or remove it (`kubectl annotate node {node} \
             {IFACE}-`)"
        ),
    };
    anyhow::anyhow!(
        "no external interface from {}{waited}: {error}{fix}",
        origin.describe()
    )
}

fn round(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The rules of the Node's annotation, `None` without one. Read until it
/// answers or `deadline` passes (at least once): taking `--external-iface` on a node
/// whose annotation could not be read would attach elsewhere, and detach
/// the previous agent's programs from the interface it names.
async fn annotated(
    nodes: &Api<Node>,
    node: &str,
    deadline: Instant,
) -> anyhow::Result<Option<Vec<IfaceRule>>> {
    let found = loop {
        let error = match tokio::time::timeout(NODE_READ, nodes.get_opt(node)).await {
            Ok(Ok(found)) => break found,
            Ok(Err(e)) => anyhow::Error::new(e),
            Err(_) => anyhow::anyhow!("no answer within {NODE_READ:?}"),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(error).with_context(|| {
                format!(
                    "reading Node {node} for its annotation {IFACE}, which chooses the external \
                     interface (the agent needs `get` on nodes; --iface-wait bounds the tries)"
                )
            });
        }
        tracing::debug!(
            node,
            error = format!("{error:#}"),
            "cannot read the Node yet"
        );
        tokio::time::sleep(RETRY.min(deadline - now)).await;
    };
    let Some(found) = found else {
        tracing::warn!(
            node,
            "Node {node} not found (is --node-name this node's name?); the external interface \
             comes from --external-iface"
        );
        return Ok(None);
    };
    let value = found
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(IFACE));
    value.map(|v| parse_annotation(node, v)).transpose()
}

/// The annotation's rules: `--external-iface`'s forms, comma-separated.
fn parse_annotation(node: &str, value: &str) -> anyhow::Result<Vec<IfaceRule>> {
    let fix = || {
        format!(
            "fix it (`kubectl annotate node {node} {IFACE}=eno1 --overwrite`: a name, a pattern \
             like eno* or bond+, auto or auto:ADDR, comma-separated) or remove it (`kubectl \
             annotate node {node} {IFACE}-`) to use --external-iface"
        )
    };
    let rules: Vec<IfaceRule> = value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::parse)
        .collect::<Result<_, String>>()
        .map_err(|e| anyhow::anyhow!("Node {node}'s annotation {IFACE}: {e}; {}", fix()))?;
    if rules.is_empty() {
        bail!("Node {node}'s annotation {IFACE} is empty; {}", fix());
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_holds_the_flags_forms_comma_separated() {
        let rules = parse_annotation("n1", "bond+, auto:192.0.2.1").unwrap();
        assert_eq!(
            rules,
            [
                IfaceRule::Pattern("bond+".into()),
                IfaceRule::RouteTo("192.0.2.1".parse().unwrap())
            ]
        );
    }

    #[test]
    fn a_bad_annotation_names_the_node_the_annotation_and_both_fixes() {
        let e = parse_annotation("n1", "eth 0").unwrap_err().to_string();
        assert!(
            e.starts_with("Node n1's annotation ssh-fwd.io/iface: `eth 0`"),
            "{e}"
        );
        assert!(
            e.contains("kubectl annotate node n1 ssh-fwd.io/iface=eno1 --overwrite")
                && e.contains("kubectl annotate node n1 ssh-fwd.io/iface-"),
            "{e}"
        );
        let e = parse_annotation("n1", " , ").unwrap_err().to_string();
        assert!(e.contains("is empty"), "{e}");
    }

    #[test]
    fn auto_follows_the_ssh_ips_families_or_both() {
        use mapping::Family::{V4, V6};
        assert_eq!(families(&[]), [V4, V6]);
        assert_eq!(families(&["198.18.0.10".parse().unwrap()]), [V4]);
        let both = [
            "2001:db8::1".parse().unwrap(),
            "198.18.0.10".parse().unwrap(),
        ];
        assert_eq!(families(&both), [V4, V6]);
    }

    #[test]
    fn a_failure_says_where_the_rules_came_from_and_for_the_annotation_how_to_change_it() {
        let e = Unresolved::PatternSeveral {
            pattern: "eno*".into(),
            matched: vec!["eno1".into(), "eno2".into()],
        };
        let flag = failed(&e, &Origin::Flag, None).to_string();
        assert!(
            flag.starts_with("no external interface from --external-iface: `eno*` matches"),
            "{flag}"
        );
        let node = failed(
            &e,
            &Origin::Node("n1".into()),
            Some(Duration::from_secs(20)),
        );
        let node = node.to_string();
        assert!(
            node.starts_with(
                "no external interface from Node n1's annotation ssh-fwd.io/iface after waiting \
                 20s (--iface-wait): `eno*`"
            ) && node.contains("kubectl annotate node n1 ssh-fwd.io/iface-"),
            "{node}"
        );
    }
}
