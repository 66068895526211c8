//! Command-line interface. Doc comments here are the `--help` text.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{attach::AttachMode, pins::DEFAULT_BPFFS};

/// eBPF/XDP-accelerated TCP forwarder: lands `ssh -p PORT user@EXTERNAL_IP` in
/// the job pod behind that port, rewriting packets in the kernel (no iptables,
/// no kube-proxy, no userspace copy).
#[derive(Debug, Parser)]
#[command(name = "ssh-fwd", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log filter (RUST_LOG syntax), e.g. `info` or `ssh_fwd=debug`.
    #[arg(long, global = true, env = "SSH_FWD_LOG", default_value = "info")]
    pub log: String,

    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach the data path to the external interfaces and keep its maps equal
    /// to the desired mappings. SIGHUP reloads; SIGTERM exits and leaves the
    /// data path forwarding (a new agent adopts it).
    Agent(AgentArgs),
    /// Print the installed mappings with their packet and byte counters, read
    /// from the pinned maps.
    List(ListArgs),
    /// Give every pod labelled `ssh-fwd.io/ssh=enabled` an SSH port: create a
    /// Service on the SSH IP that forwards a free port from --port-range to
    /// the pod's port 22, and publish the ready `ssh` command on the pod (an
    /// `ssh-fwd.io/endpoint` annotation and an Event). One replica acts at a
    /// time (leader election with a Lease).
    Controller(ControllerArgs),
    /// Detach the programs and remove every map and link the agent pinned.
    /// Stop the agent first: a running agent keeps its programs attached.
    Teardown(BpffsArg),
}

#[derive(Debug, Args)]
pub struct BpffsArg {
    /// Directory on a bpf filesystem for pinned maps and links; mounted if it
    /// is not on bpffs yet.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// External interface to attach to (repeat for several). Packets for a
    /// frontend are DNATed where they arrive; replies are reverse-NATed where
    /// they leave.
    #[arg(long = "iface", value_name = "IFACE", required = true)]
    pub ifaces: Vec<String>,

    /// Static mappings file (YAML), reloaded when it changes and on SIGHUP.
    /// A bad file is rejected as a whole and the running mappings stay.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "kubernetes",
        conflicts_with = "kubernetes"
    )]
    pub mappings: Option<PathBuf>,

    /// Take the mappings from Kubernetes Services (spec.externalIPs, or type
    /// LoadBalancer with loadBalancerClass ssh-fwd.io/ssh) and their
    /// EndpointSlices. Uses the in-cluster config, KUBECONFIG, or --kubeconfig.
    #[arg(long, requires = "ssh_ips")]
    pub kubernetes: bool,

    /// Kubeconfig file for --kubernetes (default: in-cluster, then KUBECONFIG,
    /// then ~/.kube/config).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,

    /// External SSH IP this agent serves (repeatable). Services claiming any
    /// other address are ignored, so nobody who may create Services can
    /// capture traffic for other IPs (CVE-2020-8554).
    #[arg(long = "ssh-ip", value_name = "IP")]
    pub ssh_ips: Vec<std::net::Ipv4Addr>,

    /// Frontend ports honoured, inclusive.
    #[arg(long, value_name = "FIRST-LAST", default_value = "8000-16000", value_parser = parse_port_range)]
    pub port_range: std::ops::RangeInclusive<u16>,

    /// Label selector a Service must match. The default is the standard label
    /// that makes kube-proxy and Cilium leave a Service alone.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = "service.kubernetes.io/service-proxy-name=ssh-fwd"
    )]
    pub selector: String,

    /// Serve /metrics (Prometheus), /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Where the DNAT program hooks in. `auto` picks native XDP where the
    /// driver supports it and tc ingress otherwise (and on veth), and logs why.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach: AttachMode,

    /// `auto`: also attach a program to the host end of every pod's
    /// interface (a veth or netkit whose peer is in another network
    /// namespace, found by rescanning every 2 s). It reverse-NATs SSH
    /// replies as they leave the pod and sends them straight out of the
    /// external interface. Requests are delivered straight into the pod's
    /// namespace where the host end has no qdisc and no tc egress program
    /// (so no bandwidth limit or policy is skipped). In-cluster traffic to
    /// the pods is never touched.
    /// `off`: replies are reverse-NATed on the external interfaces only,
    /// after the node has routed them.
    #[arg(long, value_enum, default_value_t = PodIfacesMode::Auto)]
    pub pod_ifaces: PodIfacesMode,

    #[command(flatten)]
    pub bpffs: BpffsArg,

    /// How often the maps are re-read and repaired if anything changed them
    /// behind the agent's back.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub resync_interval: Duration,

    /// How often the mappings file is checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub watch_interval: Duration,
}

/// `--pod-ifaces`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodIfacesMode {
    Auto,
    Off,
}

#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The external SSH IP the Services expose (the agents' --ssh-ip).
    #[arg(long = "ssh-ip", value_name = "IP")]
    pub ssh_ip: std::net::Ipv4Addr,

    /// The host name users type in `ssh USER@HOST -p PORT` (default: the IP).
    #[arg(long, value_name = "HOST")]
    pub ssh_hostname: Option<String>,

    /// Ports handed out, inclusive; must lie within the agents' --port-range.
    #[arg(long, value_name = "FIRST-LAST", default_value = "8000-16000", value_parser = parse_port_range)]
    pub port_range: std::ops::RangeInclusive<u16>,

    /// The user name shown in the published ssh command.
    #[arg(long, value_name = "USER", default_value = "ucloud")]
    pub ssh_user: String,

    /// How the Service exposes the SSH IP. `loadbalancer`: type LoadBalancer
    /// of class ssh-fwd.io/ssh, with this controller writing its status.
    /// `externalips`: spec.externalIPs (deprecated since Kubernetes 1.36; for
    /// clusters that still run an older ssh-fwd agent or other tooling that
    /// only reads externalIPs).
    #[arg(long, value_enum, default_value_t = ServiceStyle::Loadbalancer)]
    pub service_style: ServiceStyle,

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
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// How often everything is reconciled even without changes.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub resync_interval: Duration,
}

/// The Service shape the controller creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ServiceStyle {
    Loadbalancer,
    Externalips,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub bpffs: BpffsArg,

    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Parses `8000-16000`.
pub fn parse_port_range(s: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let bad = || format!("`{s}` is not a port range like 8000-16000");
    let (first, last) = s.split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(format!(
            "`{s}`: the first port must be 1 or more and not above the last"
        ));
    }
    Ok(first..=last)
}

/// Parses `500ms`, `30s`, `5m` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 500ms, 30s or 5m"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("`{s}`: unit must be ms, s or m")),
    };
    if d.is_zero() {
        return Err("duration must be greater than zero".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5h").unwrap_err().contains("unit"));
    }

    #[test]
    fn documented_agent_command_line_parses() {
        let cli = Cli::try_parse_from([
            "ssh-fwd",
            "agent",
            "--iface",
            "eth0",
            "--iface",
            "eth1",
            "--mappings",
            "/etc/m.yaml",
        ])
        .unwrap();
        let Command::Agent(a) = cli.command else {
            panic!("not agent")
        };
        assert_eq!(a.ifaces, ["eth0", "eth1"]);
        assert_eq!(a.mappings, Some(PathBuf::from("/etc/m.yaml")));
        assert_eq!(a.attach, AttachMode::Auto);
        assert_eq!(a.bpffs.bpffs, PathBuf::from("/sys/fs/bpf/ssh-fwd"));
    }

    #[test]
    fn kubernetes_mode_needs_ssh_ip_and_excludes_a_mappings_file() {
        let base = ["ssh-fwd", "agent", "--iface", "eth0"];
        let ok = Cli::try_parse_from(base.iter().copied().chain([
            "--kubernetes",
            "--ssh-ip",
            "198.18.0.10",
            "--port-range",
            "9000-9100",
        ]))
        .unwrap();
        let Command::Agent(a) = ok.command else {
            panic!("not agent")
        };
        assert_eq!(a.port_range, 9000..=9100);
        assert!(Cli::try_parse_from(base.iter().copied().chain(["--kubernetes"])).is_err());
        assert!(
            Cli::try_parse_from(base.iter().copied().chain([
                "--kubernetes",
                "--ssh-ip",
                "198.18.0.10",
                "--mappings",
                "m.yaml"
            ]))
            .is_err()
        );
        assert!(Cli::try_parse_from(base).is_err(), "one source is required");
        assert!(parse_port_range("9000-8000").is_err());
        assert!(parse_port_range("0-10").is_err());
    }

    #[test]
    fn documented_controller_command_line_parses_with_defaults() {
        let cli =
            Cli::try_parse_from(["ssh-fwd", "controller", "--ssh-ip", "198.18.0.10"]).unwrap();
        let Command::Controller(c) = cli.command else {
            panic!("not controller")
        };
        assert_eq!(c.port_range, 8000..=16000);
        assert_eq!(c.ssh_user, "ucloud");
        assert_eq!(c.ssh_hostname, None);
        assert_eq!(c.service_style, ServiceStyle::Loadbalancer);
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        let styled = Cli::try_parse_from([
            "ssh-fwd",
            "controller",
            "--ssh-ip",
            "198.18.0.10",
            "--ssh-hostname",
            "ssh.example.org",
            "--service-style",
            "externalips",
            "--ssh-user",
            "alice",
            "--port-range",
            "9000-9100",
        ])
        .unwrap();
        let Command::Controller(c) = styled.command else {
            panic!("not controller")
        };
        assert_eq!(c.service_style, ServiceStyle::Externalips);
        assert_eq!(c.ssh_hostname.as_deref(), Some("ssh.example.org"));
        assert!(
            Cli::try_parse_from(["ssh-fwd", "controller"]).is_err(),
            "--ssh-ip is required"
        );
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
