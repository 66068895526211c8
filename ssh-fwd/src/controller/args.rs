//! `ssh-fwd controller`'s flags. Doc comments here are the `--help` text.

mod check;

use std::{path::PathBuf, time::Duration};

pub use check::{FlagError, check, ssh_ips};

use crate::{args::ServiceStyle, vocabulary};

/// The longest `--port-reuse-after`: a day is past any client's retry,
/// and with a longer one every port of a busy range stays quarantined, so
/// every job would get one cut short.
pub const MAX_PORT_REUSE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses `--port-reuse-after`: 0 (off), or from a second to a day.
pub fn port_reuse_after(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 10m, 1h or 0 (no quarantine): {e}"))?;
    if !d.is_zero() && d < Duration::from_secs(1) {
        return Err(format!(
            "`{s}` is under a second, which quarantines nothing: give at least 1s, or 0 to turn the quarantine off"
        ));
    }
    if d > MAX_PORT_REUSE_AFTER {
        return Err(format!(
            "`{s}` is over a day: a busy range would keep every port quarantined and cut each quarantine short; give at most 24h"
        ));
    }
    Ok(d)
}

#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// The external SSH IP the Services expose (one of the agents'
    /// --ssh-ip), IPv4 or IPv6. Given twice, one of each family: the
    /// Services are dual-stack (RequireDualStack) and expose both, and the
    /// first is the one published (the ssh command, the endpoint
    /// annotation and variable).
    #[arg(long = "ssh-ip", value_name = "IP", required = true)]
    pub ssh_ips: Vec<std::net::IpAddr>,

    /// The host name users type in `ssh USER@HOST -p PORT` (default: the IP).
    #[arg(long, value_name = "HOST")]
    pub ssh_hostname: Option<String>,

    /// Ports handed out, inclusive; must lie within the agents' --port-range.
    /// The default avoids the node's well-known ports and the NodePort
    /// range, as the agents' does.
    #[arg(long, value_name = "FIRST-LAST", default_value = crate::args::node_ports::DEFAULT_PORT_RANGE, value_parser = crate::args::port_range)]
    pub port_range: std::ops::RangeInclusive<u16>,

    /// How long the port of an SSH job that ended goes to no other job (its
    /// quarantine), so that a client coming back for the old job does not
    /// reach the next one; kept on the port's reservation, so a restart or
    /// failover keeps it. When every other port is taken, the port
    /// quarantined longest is handed out all the same, and its pod gets a
    /// PortQuarantineCut Warning. 0 turns the quarantine off: a freed port
    /// may go to the next job at once.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = port_reuse_after)]
    pub port_reuse_after: Duration,

    /// The user name shown in the published ssh command.
    #[arg(long, value_name = "USER", default_value = "ucloud")]
    pub ssh_user: String,

    /// How the Service exposes the SSH IP. `loadbalancer`: type LoadBalancer
    /// of class ssh-fwd.io/ssh, with this controller writing its status.
    /// `externalips`: spec.externalIPs (deprecated since Kubernetes 1.36; for
    /// clusters that still run an older ssh-fwd agent or other tooling that
    /// only reads externalIPs). (Formerly --service-style, which still
    /// works.)
    #[arg(
        long = "expose-as",
        alias = "service-style",
        value_name = "STYLE",
        value_enum,
        default_value_t = ServiceStyle::Loadbalancer
    )]
    pub service_style: ServiceStyle,

    /// The agents' --honour-styles: the Service shapes whose SSH IP they
    /// honour; --expose-as must be one of them. With `externalips`,
    /// someone else's externalIPs Service holds the ports it lists that
    /// nobody was granted (anyone who may write a Service can make one),
    /// and the controller hands those out to no pod; a port it granted
    /// stays with its pod whatever such a Service lists. (Formerly
    /// --service-styles, which still works.)
    #[arg(
        long = "honour-styles",
        alias = "service-styles",
        value_name = "STYLES",
        value_enum,
        value_delimiter = ',',
        default_value = "loadbalancer"
    )]
    pub service_styles: Vec<ServiceStyle>,

    /// The agents' --selector: the Services they honour. The controller
    /// reads only its own Services and these (they may hold ports on the
    /// SSH IP), and never the rest of the cluster's.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = vocabulary::DEFAULT_SELECTOR
    )]
    pub selector: String,

    /// Kubeconfig file (default: in-cluster, then KUBECONFIG, then
    /// ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the leader-election Lease (default: this pod's
    /// namespace from POD_NAMESPACE, else ssh-fwd).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE",
        default_value = "ssh-fwd"
    )]
    pub lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "ssh-fwd-controller")]
    pub lease_name: String,

    /// This replica's name in the Lease (default: POD_NAME, else the host
    /// name).
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub identity: Option<String>,

    /// How long a Lease stays valid without renewal; a standby takes over
    /// after this when the leader dies.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::args::duration)]
    pub lease_duration: Duration,

    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// The shortest time between two writes of a pod's
    /// ssh-fwd.io/last-activity and ssh-fwd.io/ssh-connections annotations,
    /// mirrored from the agents' activity ConfigMaps in the
    /// --lease-namespace; 0s turns the mirror off.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::args::duration_or_off)]
    pub activity_interval: Duration,

    /// How often everything is reconciled even without changes.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::args::duration)]
    pub resync_interval: Duration,

    /// When a pod's ssh command is published (the SSHReady event, the
    /// endpoint annotation). `served`: once the pod is Ready and every
    /// node that receives the SSH IP reports the port mapped to it in its
    /// data path (the agents' ConfigMaps ssh-fwd-served-NODE in the
    /// --lease-namespace). `ready`: once the pod is Ready. `granted`: once
    /// the port is granted, before either.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = super::served::PublishWhen::Served)]
    pub publish_when: super::served::PublishWhen,

    /// With --publish-when served: how long a Ready pod's ssh command waits
    /// for the agents' reports before it is published anyway, with a
    /// Warning event (SSHUnconfirmed) naming the nodes that did not report
    /// it (agents down, older than the controller, or not in Kubernetes
    /// mode).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::args::duration)]
    pub publish_wait: Duration,

    #[command(flatten)]
    pub admission: super::webhook::AdmissionArgs,

    #[command(flatten)]
    pub host_ca: super::host_certs::HostCaArgs,

    #[command(flatten)]
    pub config: crate::args::ConfigFlag,
}

/// Parses `ssh-fwd controller`'s flags alone (`argv` without the program and
/// subcommand names), for tests of the modules that take them.
#[cfg(test)]
pub fn parse<'a>(argv: impl IntoIterator<Item = &'a str>) -> Result<ControllerArgs, clap::Error> {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        args: ControllerArgs,
    }
    Only::try_parse_from(std::iter::once("controller").chain(argv)).map(|o| o.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_quarantine_is_ten_minutes_unless_told_and_zero_turns_it_off() {
        let base = ["--ssh-ip", "198.18.0.10"];
        assert_eq!(
            parse(base).unwrap().port_reuse_after,
            Duration::from_secs(600)
        );
        let with = |value| parse(base.into_iter().chain(["--port-reuse-after", value]));
        assert_eq!(with("0").unwrap().port_reuse_after, Duration::ZERO);
        assert_eq!(with("24h").unwrap().port_reuse_after, MAX_PORT_REUSE_AFTER);
    }

    #[test]
    fn a_port_quarantine_that_means_nothing_is_refused_naming_the_flag_and_the_fix() {
        let with = |value| {
            let flag = format!("--port-reuse-after={value}");
            parse(["--ssh-ip", "198.18.0.10", &flag])
                .unwrap_err()
                .to_string()
        };
        for (value, fix) in [
            ("500ms", "at least 1s, or 0 to turn the quarantine off"),
            ("2d", "at most 24h"),
            ("ten minutes", "a duration like 10m"),
            ("-5m", "a duration like 10m"),
        ] {
            let error = with(value);
            assert!(error.contains("--port-reuse-after"), "{value}: {error}");
            assert!(error.contains(fix), "{value}: {error}");
        }
    }
}
