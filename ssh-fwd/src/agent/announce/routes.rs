//! `--announce route`: a host route per SSH IP (/32, or /128 for IPv6) in
//! `--announce-table` while this node is ready (attached, synced, an
//! external interface up), none while it is not, and none once the agent
//! exits (SIGTERM: a drain). A
//! BGP speaker on the node exports the table, so the routers send the SSH
//! IPs only to ready nodes; which node forwards matters to no session,
//! whose state lives on its pod's node.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, watch};

use crate::datapath::{
    netdev::{self, Link, Netlink},
    routes::Routes,
};

/// How often readiness is looked at besides on link events.
const EVERY: Duration = Duration::from_millis(500);

/// Pure: the interface the routes point out of, if this node is ready:
/// the first external interface that is up.
pub fn out_of(ready: bool, external: &BTreeSet<String>, links: &[Link]) -> Option<u32> {
    if !ready {
        return None;
    }
    links
        .iter()
        .filter(|l| l.up && external.contains(&l.name))
        .map(|l| l.index)
        .min()
}

/// Runs until `stop`, then withdraws every route.
pub async fn run(
    table: u32,
    ssh_ips: Vec<IpAddr>,
    external: BTreeSet<String>,
    ready: impl Fn() -> bool,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let routes = Routes::open(table)?;
    let netlink = Netlink::open()?;
    let (tx, mut links_changed) = mpsc::channel(1);
    if let Err(e) = netdev::watch_links(tx) {
        tracing::warn!(
            error = format!("{e:#}"),
            "no link events; interfaces are read every 500 ms"
        );
    }
    let mut tick = tokio::time::interval(EVERY);
    let mut routed: Option<u32> = None;
    let mut warned = None::<Instant>;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(()) = links_changed.recv() => {}
            _ = stop.changed() => break,
        }
        let links = netlink.links().await.unwrap_or_default();
        let want = out_of(ready(), &external, &links);
        if let Err(e) = sync(&routes, &ssh_ips, want).await {
            if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                tracing::warn!(
                    error = format!("{e:#}"),
                    table,
                    "cannot update the SSH IPs' routes; retrying"
                );
                warned = Some(Instant::now());
            }
            continue;
        }
        if want != routed {
            match want {
                Some(ifindex) => tracing::info!(
                    table,
                    iface = netdev::name_of(ifindex).unwrap_or_default(),
                    "ready: the SSH IPs' routes are in the table"
                ),
                None => tracing::info!(
                    table,
                    "not ready (not synced, or no external interface up): the SSH IPs' routes are withdrawn"
                ),
            }
            routed = want;
        }
    }
    if let Err(e) = sync(&routes, &ssh_ips, None).await {
        tracing::warn!(
            error = format!("{e:#}"),
            table,
            "could not withdraw the SSH IPs' routes"
        );
    } else {
        tracing::info!(table, "exiting: the SSH IPs' routes are withdrawn");
    }
    Ok(())
}

/// Makes the table hold a route for each SSH IP out of `out` (none: no
/// route), and no other route of ours.
async fn sync(routes: &Routes, ssh_ips: &[IpAddr], out: Option<u32>) -> anyhow::Result<()> {
    let installed = routes.installed().await?;
    let wanted: BTreeSet<IpAddr> = match out {
        Some(_) => ssh_ips.iter().copied().collect(),
        None => BTreeSet::new(),
    };
    for ip in installed.difference(&wanted) {
        routes.remove(*ip).await?;
    }
    if let Some(ifindex) = out {
        // Replaced every time: an interface that came back may have
        // another index, and replacing an equal route changes nothing.
        for ip in &wanted {
            routes.add(*ip, ifindex).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, name: &str, up: bool) -> Link {
        Link {
            index,
            name: name.into(),
            up,
            ..Link::default()
        }
    }

    #[test]
    fn routes_point_out_of_an_external_interface_that_is_up_and_only_when_ready() {
        let external = BTreeSet::from(["ext0".to_owned(), "ext1".to_owned()]);
        let links = [
            link(2, "ext0", false),
            link(3, "ext1", true),
            link(4, "eth9", true),
        ];
        assert_eq!(out_of(true, &external, &links), Some(3));
        assert_eq!(out_of(false, &external, &links), None, "not ready");
        let down = [link(2, "ext0", false), link(3, "ext1", false)];
        assert_eq!(
            out_of(true, &external, &down),
            None,
            "no external interface up"
        );
    }
}
