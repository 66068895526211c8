//! The node's activity, published for the controller in Kubernetes mode:
//! the ConfigMap `ssh-fwd-activity-NODE` of the agent's namespace
//! ([`crate::k8s::activity`]), written when what it would hold changed and
//! at most once per `--activity-interval`, created if absent
//! ([`NodeConfigMap`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use kube::Api;

use super::Board;
use crate::{
    agent::node_config_map::NodeConfigMap,
    datapath::conntrack::activity::Activity,
    k8s::activity::{Report, config_map_name, data_key},
    vocabulary,
};

/// The ConfigMap's data for `activity`: a key for each frontend, of either
/// family, that carried a packet or holds a connection.
pub fn data(activity: &BTreeMap<SocketAddr, Activity>) -> BTreeMap<String, String> {
    activity
        .iter()
        .filter(|(_, a)| a.last.is_some() || a.open > 0)
        .map(|(frontend, a)| {
            let report = serde_json::to_string(&Report::new(a.last, a.open)).unwrap_or_default();
            (data_key(frontend.ip(), frontend.port()), report)
        })
        .collect()
}

/// Starts publishing in Kubernetes mode with `--node-name`; `None` (and
/// why, told) otherwise.
pub fn spawn(
    args: &crate::agent::AgentArgs,
    client: Option<kube::Client>,
    board: &Board,
) -> Option<tokio::task::JoinHandle<()>> {
    let client = client?;
    let Some(node) = args.node_name.clone() else {
        tracing::info!(
            "no --node-name (NODE_NAME): this node's SSH activity is in /metrics only, and the \
             controller cannot mirror it onto pods"
        );
        return None;
    };
    Some(tokio::spawn(run(
        client,
        node,
        args.activity_interval,
        board.clone(),
    )))
}

/// Publishes `board` for ever; a failed write is told once and tried
/// again at the next interval.
pub async fn run(client: kube::Client, node: String, every: Duration, board: Board) {
    let target = NodeConfigMap::new(
        client.clone(),
        Api::default_namespaced(client),
        config_map_name(&node),
        node,
        vocabulary::ACTIVITY,
    );
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the ConfigMap holds, as far as this agent knows.
    let mut written: Option<BTreeMap<String, String>> = None;
    let mut failing = false;
    loop {
        tick.tick().await;
        // Before the first sweep nothing is known: writing would say that
        // nothing is open.
        let Some(activity) = board.snapshot() else {
            continue;
        };
        let data = data(&activity);
        if written.as_ref() == Some(&data) {
            continue;
        }
        let known: Option<BTreeSet<String>> = written.as_ref().map(|w| w.keys().cloned().collect());
        match target.replace(known.as_ref(), &data).await {
            Ok(()) => {
                written = Some(data);
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        config_map = target.name(),
                        "cannot publish this node's SSH activity; the controller keeps the \
                         pods' last-activity annotations as they are until it works (retrying)"
                    );
                }
                failing = true;
                written = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{net::Ipv4Addr, time::SystemTime};

    use super::*;

    #[test]
    fn data_holds_frontends_with_a_packet_or_a_connection() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let ip = Ipv4Addr::new(203, 0, 113, 10);
        let activity = [
            (
                SocketAddr::from((ip, 2222)),
                Activity {
                    open: 1,
                    last: Some(at),
                },
            ),
            (
                SocketAddr::from((ip, 2223)),
                Activity {
                    open: 0,
                    last: None,
                },
            ),
        ]
        .into();
        let data = data(&activity);
        assert_eq!(
            data,
            [(
                "203.0.113.10_2222".to_owned(),
                r#"{"lastActivity":"2026-01-02T03:04:05Z","openConnections":1}"#.to_owned()
            )]
            .into()
        );
    }

    #[test]
    fn an_ipv6_frontend_is_reported_beside_an_ipv4_one() {
        let ip6 = std::net::Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10);
        let activity = [
            (
                SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), 2222)),
                Activity {
                    open: 1,
                    last: None,
                },
            ),
            (
                SocketAddr::from((ip6, 2222)),
                Activity {
                    open: 2,
                    last: None,
                },
            ),
        ]
        .into();
        let data = data(&activity);
        assert_eq!(
            data,
            [
                (
                    "203.0.113.10_2222".to_owned(),
                    r#"{"openConnections":1}"#.to_owned()
                ),
                (
                    "fd00-198--10_2222".to_owned(),
                    r#"{"openConnections":2}"#.to_owned()
                ),
            ]
            .into()
        );
    }
}
