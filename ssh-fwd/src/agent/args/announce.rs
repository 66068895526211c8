//! `ssh-fwd agent`'s flags for getting the SSH IPs to the node
//! (`docs/announce.md`).

use std::time::Duration;

/// `--announce`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AnnounceMode {
    /// The network brings the SSH IPs to the nodes (a static route, ECMP,
    /// BGP, an address on a router).
    #[default]
    Off,
    /// The data path answers ARP for each `--ssh-ip` on the external
    /// interfaces.
    L2,
}

#[derive(Clone, Debug, clap::Args)]
pub struct AnnounceArgs {
    /// How the SSH IPs reach this node. `off`: your network routes them
    /// here. `l2`: the data path answers ARP requests for each --ssh-ip on
    /// the external interfaces with the interface's MAC, and the agent
    /// sends gratuitous ARPs when it starts announcing; the address is
    /// never put on an interface, so the node's own services never become
    /// reachable on it. Without --kubernetes this node answers
    /// unconditionally: for a single ingress node.
    #[arg(long, value_enum, default_value_t = AnnounceMode::Off)]
    pub announce: AnnounceMode,

    /// With `--announce l2`: send the gratuitous ARPs again this often,
    /// for switches whose tables age out before anyone asks. Off by
    /// default: a gratuitous ARP goes out only when announcing starts.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration)]
    pub announce_garp_interval: Option<Duration>,
}

/// The checks that need more than one flag, each refusal naming the fix.
/// `ssh_ips` are the `--ssh-ip`s.
pub fn check(args: &AnnounceArgs, ssh_ips: &[std::net::Ipv4Addr]) -> Result<(), String> {
    if args.announce == AnnounceMode::Off {
        if args.announce_garp_interval.is_some() {
            return Err("--announce-garp-interval needs --announce l2".into());
        }
        return Ok(());
    }
    if ssh_ips.is_empty() {
        return Err(
            "--announce l2 answers ARP for each --ssh-ip, and none is given: add --ssh-ip IP \
             for every address this node should attract"
                .into(),
        );
    }
    if let Some(every) = args.announce_garp_interval
        && every < Duration::from_secs(1)
    {
        return Err(format!(
            "--announce-garp-interval {}: use 1s or more (a switch's table ages out in minutes)",
            humantime::format_duration(every)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    const FILE: [&str; 4] = ["--iface", "eth0", "--mappings", "m.yaml"];

    fn checked(extra: &[&str]) -> Result<(), String> {
        let args =
            parse(FILE.into_iter().chain(extra.iter().copied())).map_err(|e| e.to_string())?;
        check(&args.announce, &args.ssh_ips)
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
