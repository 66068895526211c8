//! `ssh-fwd agent`'s flags. Doc comments here are the `--help` text.

use std::{path::PathBuf, time::Duration};

use ssh_fwd_common::maps::{CONN_CAPACITY, HALF_OPEN_CAPACITY, MAPPINGS_LIMIT, MAX_MAPPINGS};

pub use crate::args::ServiceStyleArg;
use crate::{
    datapath::{hairpin::HairpinMode, hooks::AttachMode, object::RedirectMode, pins::BpffsArg},
    source::kubernetes::desired::Styles,
};

#[derive(Debug, clap::Args)]
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
    /// capture traffic for other IPs (CVE-2020-8554). With a mappings file,
    /// every frontend must be on one; without the flag, a frontend on an
    /// address of one of the node's interfaces (other than lo and dummy
    /// devices) is refused.
    #[arg(long = "ssh-ip", value_name = "IP")]
    pub ssh_ips: Vec<std::net::Ipv4Addr>,

    /// Frontend ports honoured, inclusive.
    #[arg(long, value_name = "FIRST-LAST", default_value = "8000-16000", value_parser = crate::args::port_range)]
    pub port_range: std::ops::RangeInclusive<u16>,

    /// Label selector a Service must match. The default is the standard label
    /// that makes kube-proxy and Cilium leave a Service alone.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = "service.kubernetes.io/service-proxy-name=ssh-fwd"
    )]
    pub selector: String,

    /// The Service shapes honoured, comma-separated: `loadbalancer` (type
    /// LoadBalancer of class ssh-fwd.io/ssh, its address in the status only
    /// the controller writes) and `externalips` (spec.externalIPs, which
    /// anyone who may create a Service can set; deprecated since Kubernetes
    /// 1.36). A Service of a shape left out is ignored and logged.
    #[arg(
        long,
        value_name = "STYLES",
        value_enum,
        value_delimiter = ',',
        default_value = "loadbalancer,externalips",
        requires = "kubernetes"
    )]
    pub service_styles: Vec<ServiceStyleArg>,

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

    /// How a translated packet reaches the pod, and its reply the client.
    /// `auto`: the tc programs route it themselves (a FIB lookup) and send
    /// it straight out of the interface the route uses (into the pod's
    /// namespace where `--pod-ifaces` allows), and the reply straight out of
    /// the external interface. The node's IP input and forwarding are
    /// skipped: netfilter's PREROUTING, FORWARD and POSTROUTING hooks (host
    /// firewall rules, a CNI's NetworkPolicy enforced there), the node's
    /// connection tracking, rp_filter. What the route cannot settle still
    /// goes to the stack. With XDP ingress, requests always take the stack.
    /// `off`: every translated packet, both ways, takes the kernel's
    /// forwarding path and its netfilter hooks, which see the pod's address
    /// (replies get the frontend back as they leave the external interface);
    /// no reply program on pods' interfaces. Slower; choose it when the
    /// node's firewall or NetworkPolicy must apply to forwarded SSH traffic.
    #[arg(long, value_enum, default_value_t = RedirectMode::Auto)]
    pub redirect: RedirectMode,
    /// An interface that carries traffic to other nodes (repeatable), if it
    /// is not an external one: requests other nodes translated arrive
    /// there, and translated SYNs leave there for other nodes. Without the
    /// flag, the interfaces of the routes with a gateway (to other nodes'
    /// pods, the default route) are used.
    #[arg(long = "cluster-iface", value_name = "IFACE")]
    pub cluster_ifaces: Vec<String>,

    /// How the frontend of a connection reaches the pod's node when the
    /// request entered another node. `option`: the translated SYN carries
    /// it in an IPv4 option (8 bytes, SYN only); the pod's node tracks the
    /// connection and restores the right frontend. Needs a network between
    /// nodes that passes IPv4 options. `plain`: no option; the pod's node
    /// has no state for such connections and restores the backend's primary
    /// frontend (wrong for a pod behind several frontends), and replies of
    /// in-cluster traffic routed out of an external interface get it too.
    #[arg(long, value_enum, default_value_t = CrossNode::Option)]
    pub cross_node: CrossNode,

    /// An established connection with no packet for this long is forgotten
    /// (its replies are no longer rewritten). Far above any SSH keepalive:
    /// a shell idle for a working day keeps its entry. One whose server or
    /// client alone has closed goes after two minutes without a segment
    /// from the server.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = crate::args::duration)]
    pub conn_idle_timeout: Duration,

    /// How many mappings (frontends) this node can hold: the capacity of the
    /// frontend, reverse, name and counter tables, allocated up front (about
    /// 330 bytes each plus 32 bytes per CPU). A desired state beyond it is
    /// cut: a mappings file is refused, in Kubernetes mode the newest
    /// Services are left out. Changing it on a node needs `ssh-fwd teardown`
    /// first (the pinned tables cannot be resized while they forward).
    #[arg(long, value_name = "ENTRIES", default_value_t = MAX_MAPPINGS, value_parser = mappings_size)]
    pub max_mappings: u32,

    /// Capacity of the established-connections table (entries of 40 bytes
    /// plus the kernel's overhead, allocated up front). Only completed
    /// handshakes take an entry.
    #[arg(long, value_name = "ENTRIES", default_value_t = CONN_CAPACITY, value_parser = table_size)]
    pub conn_table_size: u32,

    /// Capacity of the half-open table (handshakes in progress; a SYN
    /// flood churns it, by design).
    #[arg(long, value_name = "ENTRIES", default_value_t = HALF_OPEN_CAPACITY, value_parser = table_size)]
    pub half_open_table_size: u32,

    /// Hairpin: let clients inside the cluster (pods, the nodes' own
    /// shells) dial a frontend `EXTERNAL_IP:PORT`. `auto`: attach a cgroup
    /// v2 `connect4` program that sends a TCP connect to a mapped frontend
    /// straight to its backend, and a `getpeername4` program that shows the
    /// application the address it dialled; without a cgroup v2 hierarchy,
    /// run without (the log says why). `off`: no hairpin; a previous
    /// agent's hooks are removed.
    #[arg(long, value_enum, default_value_t = HairpinMode::Auto)]
    pub hairpin: HairpinMode,

    /// The cgroup v2 directory the hairpin programs attach to: every
    /// process in it or below is served. Default: the first cgroup2 mount
    /// in /proc/mounts (`/sys/fs/cgroup` on a unified host,
    /// `/sys/fs/cgroup/unified` on a hybrid one).
    #[arg(long, value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,

    #[command(flatten)]
    pub bpffs: BpffsArg,

    /// How often the maps are re-read and repaired if anything changed them
    /// behind the agent's back, and deleted pins put back (a map pinned
    /// again, a link attached and pinned again).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::args::duration)]
    pub resync_interval: Duration,

    /// How often the mappings file is checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::args::duration)]
    pub watch_interval: Duration,

    /// A changed mappings file is read only once it stayed the same for
    /// this long, so a file rewritten in place is never read half-written
    /// (writing a new file and renaming it over the old one is better).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::args::duration)]
    pub settle_interval: Duration,
}

impl AgentArgs {
    /// `--service-styles` as the rules take it.
    pub fn styles(&self) -> Styles {
        Styles::of(&self.service_styles)
    }
}

/// `--pod-ifaces`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodIfacesMode {
    Auto,
    Off,
}

/// `--cross-node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CrossNode {
    Option,
    Plain,
}

/// A table capacity: at least 1,024 entries, at most 16 Mi.
fn mappings_size(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of mappings"))?;
    if !(1..=MAPPINGS_LIMIT).contains(&n) {
        return Err(format!(
            "`{s}`: use between 1 and {MAPPINGS_LIMIT} mappings"
        ));
    }
    Ok(n)
}

fn table_size(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of entries"))?;
    if !(1024..=16 << 20).contains(&n) {
        return Err(format!("`{s}`: use between 1024 and 16777216 entries"));
    }
    Ok(n)
}

/// Parses `ssh-fwd agent`'s flags alone (`argv` without the program and
/// subcommand names), for tests of the rooms that take them.
#[cfg(test)]
pub fn parse<'a>(argv: impl IntoIterator<Item = &'a str>) -> Result<AgentArgs, clap::Error> {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        args: AgentArgs,
    }
    Only::try_parse_from(std::iter::once("agent").chain(argv)).map(|o| o.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translated_packets_are_redirected_unless_redirect_is_off() {
        let base = ["--iface", "eth0", "--mappings", "m.yaml"];
        assert_eq!(parse(base).unwrap().redirect, RedirectMode::Auto);
        let off = parse(base.into_iter().chain(["--redirect", "off"])).unwrap();
        assert_eq!(off.redirect, RedirectMode::Off);
        let typo = parse(base.into_iter().chain(["--redirect", "never"]));
        assert!(typo.unwrap_err().to_string().contains("never"));
    }

    #[test]
    fn both_service_styles_are_honoured_unless_narrowed() {
        let base = ["--iface", "eth0", "--kubernetes", "--ssh-ip", "198.18.0.10"];
        assert_eq!(parse(base).unwrap().styles(), Styles::ALL);
        let narrowed = parse(base.into_iter().chain(["--service-styles", "loadbalancer"])).unwrap();
        assert_eq!(
            narrowed.styles(),
            Styles {
                load_balancer: true,
                external_ips: false
            }
        );
        let both = ["--service-styles", "externalips,loadbalancer"];
        assert_eq!(
            parse(base.into_iter().chain(both)).unwrap().styles(),
            Styles::ALL
        );
        let typo = parse(base.into_iter().chain(["--service-styles", "nodeport"]));
        assert!(typo.unwrap_err().to_string().contains("nodeport"));
    }
}
