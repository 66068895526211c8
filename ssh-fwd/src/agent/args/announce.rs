//! `ssh-fwd agent`'s flags for getting the SSH IPs to the node
//! (`docs/announce.md`).

use std::time::Duration;

use crate::k8s::label_selector::LabelSelector;

/// `--announce`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AnnounceMode {
    /// The network brings the SSH IPs to the nodes (a static route, ECMP,
    /// BGP, an address on a router).
    #[default]
    Off,
    /// The data path answers ARP (IPv4) and neighbour solicitations
    /// (IPv6) for each `--ssh-ip` on the external interfaces.
    L2,
    /// A host route (/32, /128) per `--ssh-ip` in `--announce-table`, for
    /// a BGP speaker on the node to export.
    Route,
}

#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Announcing the SSH IP")]
pub struct AnnounceArgs {
    /// How the SSH IPs reach this node. `off`: your network routes them
    /// here. `l2`: the data path answers ARP requests (IPv4) and neighbour
    /// solicitations (IPv6) for each --ssh-ip on the external interfaces
    /// with the interface's MAC, and the agent sends gratuitous ARPs or
    /// unsolicited neighbour advertisements when it starts announcing; the
    /// address is never put on an interface, so the node's own services
    /// never become reachable on it. Without --kubernetes this node answers
    /// unconditionally: for a single ingress node. `route`: the agent
    /// keeps a host route (/32, /128) for each --ssh-ip in --announce-table
    /// while the node is ready (attached, synced, an external interface
    /// up) and removes it when not; a BGP speaker on the node (BIRD, FRR)
    /// exports that table to your routers.
    #[arg(long, value_enum, default_value_t = AnnounceMode::Off)]
    pub announce: AnnounceMode,

    /// With `--announce route`: the routing table the routes go in (not
    /// main, local or default: one your BGP speaker exports).
    #[arg(long, value_name = "TABLE")]
    pub announce_table: Option<u32>,

    /// With `--announce l2`: send the gratuitous ARPs (and neighbour
    /// advertisements) again this often, for switches whose tables age out
    /// before anyone asks. Off by default: they go out only when
    /// announcing starts.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub announce_garp_interval: Option<Duration>,

    /// With --kubernetes and `--announce l2`: one node answers for each SSH
    /// IP, the holder of its Lease. A holder that does not renew for this
    /// long loses it to another ready node. Whole seconds (a Lease counts
    /// in seconds). A holder of an IPv4 SSH IP whose node dies goes
    /// sooner: the standbys probe its data path with ARP (see
    /// --announce-renew).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::args::duration)]
    pub announce_lease_duration: Duration,

    /// How often the holder renews an SSH IP's Lease; each renewal is
    /// given up after this long. At most a third of
    /// --announce-lease-duration, so a holder gets three tries. Standbys
    /// probe the holder's data path with ARP five times as often, and take
    /// over one heard before that leaves three probes unanswered and is
    /// late to renew (failover in well under a second).
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = crate::args::duration)]
    pub announce_renew: Duration,

    /// Namespace of the SSH IPs' Leases (default: this pod's namespace
    /// from POD_NAMESPACE, else ssh-fwd).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE",
        default_value = "ssh-fwd"
    )]
    pub lease_namespace: String,

    /// With --kubernetes and `--announce l2`: only a node whose Node
    /// object matches this label selector (as `kubectl -l` takes it) may
    /// hold an SSH IP; one that stops matching gives it up. Read from this
    /// node's Node (--node-name) every 5 s. Default: every node the
    /// DaemonSet runs on.
    #[arg(long, value_name = "SELECTOR", value_parser = node_selector)]
    pub announce_nodes: Option<LabelSelector>,
}

fn node_selector(text: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(text).map_err(|e| format!("--announce-nodes: {e}"))
}

/// The checks that need more than one flag, each refusal naming the fix.
/// `ssh_ips` are the `--ssh-ip`s.
pub fn check(agent: &super::AgentArgs) -> Result<(), String> {
    let (args, ssh_ips) = (&agent.announce, &agent.ssh_ips);
    if args.announce_nodes.is_some() && !agent.kubernetes {
        return Err("--announce-nodes selects Nodes: it needs --kubernetes".into());
    }
    if args.announce != AnnounceMode::L2 && args.announce_garp_interval.is_some() {
        return Err("--announce-garp-interval needs --announce l2".into());
    }
    if args.announce != AnnounceMode::L2 && args.announce_nodes.is_some() {
        return Err("--announce-nodes needs --announce l2".into());
    }
    if args.announce != AnnounceMode::Route && args.announce_table.is_some() {
        return Err("--announce-table needs --announce route".into());
    }
    if args.announce == AnnounceMode::Off {
        return Ok(());
    }
    if ssh_ips.is_empty() {
        let what = match args.announce {
            AnnounceMode::Route => "--announce route keeps a route for each --ssh-ip",
            _ => "--announce l2 answers ARP and neighbour solicitations for each --ssh-ip",
        };
        return Err(format!(
            "{what}, and none is given: add --ssh-ip IP for every address (IPv4 or IPv6) this \
             node should attract"
        ));
    }
    if args.announce == AnnounceMode::Route {
        return match args.announce_table {
            None => Err(
                "--announce route needs --announce-table N: the routing table your BGP \
                         speaker exports (100, say)"
                    .into(),
            ),
            Some(t @ (0 | 253..=255)) => Err(format!(
                "--announce-table {t} is the kernel's own (unspec, default, main or local): \
                 use a table of its own (100, say) and export that"
            )),
            Some(_) => Ok(()),
        };
    }
    if let Some(every) = args.announce_garp_interval
        && every < Duration::from_secs(1)
    {
        return Err(format!(
            "--announce-garp-interval {}: use 1s or more (a switch's table ages out in minutes)",
            humantime::format_duration(every)
        ));
    }
    lease_timing(args.announce_lease_duration, args.announce_renew)
}

/// `--announce-lease-duration` and `--announce-renew` against each other.
fn lease_timing(duration: Duration, renew: Duration) -> Result<(), String> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    if duration < Duration::from_secs(1) || duration.subsec_nanos() != 0 {
        return Err(format!(
            "--announce-lease-duration {}: use whole seconds, 1s or more (a Lease counts in \
             seconds)",
            show(duration)
        ));
    }
    if renew < Duration::from_millis(100) || renew * 3 > duration {
        return Err(format!(
            "--announce-renew {} with --announce-lease-duration {}: renew at least every \
             third of the Lease ({} or less) and not under 100ms, or lengthen the Lease",
            show(renew),
            show(duration),
            show(duration / 3)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    const FILE: [&str; 4] = ["--external-iface", "eth0", "--mappings", "m.yaml"];

    fn checked(extra: &[&str]) -> Result<(), String> {
        let args =
            parse(FILE.into_iter().chain(extra.iter().copied())).map_err(|e| e.to_string())?;
        check(&args)
    }

    #[test]
    fn nothing_is_announced_unless_asked() {
        let args = parse(FILE).unwrap();
        assert_eq!(args.announce.announce, AnnounceMode::Off);
        assert_eq!(args.announce.announce_garp_interval, None);
        assert_eq!(checked(&[]), Ok(()));
    }

    #[test]
    fn layer_2_without_an_ssh_ip_is_refused_with_the_fix() {
        let e = checked(&["--announce", "l2"]).unwrap_err();
        assert!(e.contains("add --ssh-ip"), "{e}");
        assert_eq!(
            checked(&["--announce", "l2", "--ssh-ip", "198.18.0.10"]),
            Ok(())
        );
    }

    #[test]
    fn an_ipv6_ssh_ip_alone_is_announced_in_either_mode() {
        let v6 = ["--ssh-ip", "fd00:198::10"];
        assert_eq!(checked(&[&v6[..], &["--announce", "l2"]].concat()), Ok(()));
        let route = [&v6[..], &["--announce", "route", "--announce-table", "100"]].concat();
        assert_eq!(checked(&route), Ok(()));
    }

    #[test]
    fn the_nodes_that_may_announce_are_a_label_selector_in_kubernetes_mode() {
        let kube = [
            "--external-iface",
            "eth0",
            "--kubernetes",
            "--ssh-ip",
            "198.18.0.10",
        ];
        let with = |extra: &[&str]| {
            let args =
                parse(kube.into_iter().chain(extra.iter().copied())).map_err(|e| e.to_string())?;
            check(&args)
        };
        assert_eq!(
            with(&[
                "--announce",
                "l2",
                "--announce-nodes",
                "ssh-fwd.io/ingress=true"
            ]),
            Ok(())
        );
        let bad = with(&["--announce", "l2", "--announce-nodes", "zone in a"]).unwrap_err();
        assert!(bad.contains("--announce-nodes: `zone in a`"), "{bad}");
        let off = with(&["--announce-nodes", "x=y"]).unwrap_err();
        assert!(off.contains("needs --announce l2"), "{off}");
        assert!(
            checked(&[
                "--announce",
                "l2",
                "--ssh-ip",
                "198.18.0.10",
                "--announce-nodes",
                "x"
            ])
            .is_err(),
            "needs --kubernetes"
        );
    }

    #[test]
    fn routes_need_a_table_of_their_own() {
        let route = ["--announce", "route", "--ssh-ip", "198.18.0.10"];
        let e = checked(&route).unwrap_err();
        assert!(e.contains("needs --announce-table N"), "{e}");
        assert_eq!(
            checked(&[&route[..], &["--announce-table", "100"]].concat()),
            Ok(())
        );
        let main = checked(&[&route[..], &["--announce-table", "254"]].concat()).unwrap_err();
        assert!(main.contains("use a table of its own"), "{main}");
        let lonely = checked(&["--announce", "route", "--announce-table", "100"]).unwrap_err();
        assert!(
            lonely.contains("keeps a route for each --ssh-ip"),
            "{lonely}"
        );
        let stray = checked(&["--announce-table", "100"]).unwrap_err();
        assert!(stray.contains("needs --announce route"), "{stray}");
    }

    #[test]
    fn lease_timings_that_cannot_work_are_refused_with_the_fix() {
        let l2 = ["--announce", "l2", "--ssh-ip", "198.18.0.10"];
        let args = parse(FILE.into_iter().chain(l2)).unwrap();
        assert_eq!(
            args.announce.announce_lease_duration,
            Duration::from_secs(2)
        );
        assert_eq!(args.announce.announce_renew, Duration::from_millis(500));
        let with = |extra: &[&str]| checked(&[&l2[..], extra].concat());
        assert_eq!(with(&["--announce-renew", "600ms"]), Ok(()));
        let slow = with(&["--announce-renew", "1s"]).unwrap_err();
        assert!(slow.contains("every third of the Lease (666ms"), "{slow}");
        let part = with(&["--announce-lease-duration", "1500ms"]).unwrap_err();
        assert!(part.contains("use whole seconds"), "{part}");
        let fast = with(&["--announce-renew", "10ms"]).unwrap_err();
        assert!(fast.contains("not under 100ms"), "{fast}");
        assert_eq!(
            with(&["--announce-lease-duration", "15s", "--announce-renew", "5s"]),
            Ok(())
        );
    }

    #[test]
    fn gratuitous_arps_repeat_only_when_announcing_and_at_most_once_a_second() {
        let l2 = ["--announce", "l2", "--ssh-ip", "198.18.0.10"];
        let ok = [&l2[..], &["--announce-garp-interval", "30s"]].concat();
        assert_eq!(checked(&ok), Ok(()));
        let fast = [&l2[..], &["--announce-garp-interval", "100ms"]].concat();
        assert!(checked(&fast).unwrap_err().contains("use 1s or more"));
        let alone = checked(&["--announce-garp-interval", "30s"]).unwrap_err();
        assert!(alone.contains("needs --announce l2"), "{alone}");
        assert!(checked(&["--announce", "l3"]).unwrap_err().contains("l3"));
    }
}
