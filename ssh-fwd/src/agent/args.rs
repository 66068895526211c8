//! `ssh-fwd agent`'s flags. Doc comments here are the `--help` text.

use std::{path::PathBuf, time::Duration};

use ssh_fwd_common::maps::{
    CONN_CAPACITY, CONNS_PER_SOURCE, HALF_OPEN_CAPACITY, MAPPINGS_LIMIT, MAX_MAPPINGS,
};

pub use crate::args::ServiceStyle;
use crate::{
    args::node_ports::DEFAULT_PORT_RANGE,
    datapath::{
        external_iface::IfaceRule, hairpin::HairpinMode, hooks::AttachMode, object::RedirectMode,
        pins::BpffsArg,
    },
    source::kubernetes::desired::Styles,
};

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// External interface to attach to (repeat for several). Packets for a
    /// frontend are DNATed where they arrive; replies are reverse-NATed where
    /// they leave. One of:
    /// a name (`eth0`);
    /// a pattern (`eno*`, `bond+`: `*` any run of characters, a trailing
    /// `+` any suffix), which must match exactly one interface that is up
    /// and not a port of a bond or bridge;
    /// `auto`, the interfaces of the default routes (of the `--ssh-ip`
    /// families; the lowest metric; every hop of a multipath route);
    /// `auto:ADDR`, the interface of the route to ADDR, an address of the
    /// clients' network (for nodes whose default route is not where
    /// clients come from).
    /// With --kubernetes and --node-name, the Node's annotation
    /// `ssh-fwd.io/iface` (the same forms, comma-separated) replaces this
    /// flag on that node. Chosen once at start; the log and the metric
    /// `ssh_fwd_external_interface_info` say which and why. (Formerly
    /// --iface, which still works.)
    #[arg(
        help_heading = "Data path",
        long = "external-iface",
        alias = "iface",
        value_name = "IFACE",
        required = true
    )]
    pub ifaces: Vec<IfaceRule>,

    /// How long the agent waits at start for the external interface: one
    /// that does not exist yet, a pattern with no match that is up, no
    /// default route (a bond still negotiating, a DHCP lease to come). It
    /// retries every second, then fails naming the interfaces present.
    /// Keep it below the liveness probe's allowance (30 s in deploy/).
    /// 0s: one look.
    #[arg(help_heading = "Data path", long, value_name = "DURATION", default_value = "20s", value_parser = iface_wait)]
    pub iface_wait: Duration,

    /// Static mappings file (YAML), reloaded when it changes and on SIGHUP.
    /// A bad file is rejected as a whole and the running mappings stay.
    #[arg(
        help_heading = "Where the mappings come from",
        long,
        value_name = "FILE",
        required_unless_present = "kubernetes",
        conflicts_with = "kubernetes"
    )]
    pub mappings: Option<PathBuf>,

    /// Take the mappings from Kubernetes Services (spec.externalIPs, or type
    /// LoadBalancer with loadBalancerClass ssh-fwd.io/ssh) and their
    /// EndpointSlices. Uses the in-cluster config, KUBECONFIG, or --kubeconfig.
    #[arg(
        help_heading = "Where the mappings come from",
        long,
        requires = "ssh_ips"
    )]
    pub kubernetes: bool,

    /// Kubeconfig file for --kubernetes (default: in-cluster, then KUBECONFIG,
    /// then ~/.kube/config).
    #[arg(
        help_heading = "Where the mappings come from",
        long,
        value_name = "FILE",
        requires = "kubernetes"
    )]
    pub kubeconfig: Option<PathBuf>,

    /// External SSH IP this agent serves, IPv4 or IPv6 (repeatable: one of
    /// each family, or several). Services claiming any other address are
    /// ignored, so nobody who may create Services can capture traffic for
    /// other IPs (CVE-2020-8554); a Service's address of either family maps
    /// to its endpoint of the same family. With a
    /// mappings file, every frontend must be on one; without the flag, a
    /// frontend on an address of one of the node's interfaces (other than
    /// lo and dummy devices) is refused. `--announce` attracts them all.
    #[arg(
        help_heading = "Where the mappings come from",
        long = "ssh-ip",
        value_name = "IP"
    )]
    pub ssh_ips: Vec<std::net::IpAddr>,

    /// Frontend ports honoured, inclusive. The default lies above every
    /// Kubernetes component's port and below the NodePort range. With
    /// --kubernetes, a range that covers a node service's well-known port
    /// (22, 2379-2381, 6443, 9100, 10248-10260, NodePorts 30000-32767, ...)
    /// or a port a socket listens on in the node's network namespace is
    /// refused, unless --allow-port-overlap.
    #[arg(help_heading = "Where the mappings come from", long, value_name = "FIRST-LAST", default_value = DEFAULT_PORT_RANGE, value_parser = crate::args::port_range)]
    pub port_range: std::ops::RangeInclusive<u16>,

    /// Start even though --port-range covers well-known node ports or ports
    /// the node listens on (they are named in a warning instead). The SSH
    /// IP still exposes only mapped ports; a node service on a granted port
    /// is unreachable on the SSH IP.
    #[arg(help_heading = "Where the mappings come from", long)]
    pub allow_port_overlap: bool,

    /// Label selector a Service must match. The default is the standard label
    /// that makes kube-proxy and Cilium leave a Service alone.
    #[arg(help_heading = "Where the mappings come from", long, value_name = "SELECTOR", default_value = crate::vocabulary::DEFAULT_SELECTOR)]
    pub selector: String,

    /// The Service shapes honoured, comma-separated. `loadbalancer`: type
    /// LoadBalancer of class ssh-fwd.io/ssh, honoured only for the port the
    /// controller granted it in its status (which only the controller
    /// writes) and only to the pod it was granted to. `externalips`:
    /// spec.externalIPs, which anyone who may write a Service in any
    /// namespace can set: such a Service takes any port nobody was
    /// granted, forwarded to whatever its selector finds. Add it only where
    /// every Service writer is trusted with the SSH IP (CVE-2020-8554;
    /// deprecated since Kubernetes 1.36). A Service of a shape left out is
    /// ignored and logged. (Formerly --service-styles, which still works.)
    #[arg(
        help_heading = "Where the mappings come from",
        long = "honour-styles",
        alias = "service-styles",
        value_name = "STYLES",
        value_enum,
        value_delimiter = ',',
        default_value = "loadbalancer",
        requires = "kubernetes"
    )]
    pub service_styles: Vec<ServiceStyle>,

    /// Serve /metrics (Prometheus), /healthz and /readyz on this address.
    #[arg(help_heading = "Telemetry", long, value_name = "ADDR:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Where the DNAT program hooks in. `auto` picks native XDP where the
    /// driver supports it and tc ingress otherwise (and on veth), and logs why.
    #[arg(help_heading = "Data path", long, value_enum, default_value_t = AttachMode::Auto)]
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
    /// after the node has routed them. (Formerly --pod-ifaces, which still
    /// works.)
    #[arg(
        help_heading = "Data path",
        long = "pod-iface-reply",
        alias = "pod-ifaces",
        value_name = "MODE",
        value_enum,
        default_value_t = PodIfacesMode::Auto
    )]
    pub pod_ifaces: PodIfacesMode,

    /// How a translated packet reaches the pod, and its reply the client.
    /// `auto`: the tc programs route it themselves (a FIB lookup) and send
    /// it straight out of the interface the route uses (into the pod's
    /// namespace where `--pod-iface-reply` allows), and the reply straight out of
    /// the external interface. The node's IP input and forwarding are
    /// skipped: netfilter's PREROUTING, FORWARD and POSTROUTING hooks (host
    /// firewall rules, drop rules included, and a CNI's NetworkPolicy
    /// enforced there never see forwarded SSH traffic), the node's
    /// connection tracking, rp_filter, IPsec policies. What the route cannot
    /// settle still goes to the stack. With XDP ingress, requests always
    /// take the stack.
    /// `off`: every translated packet, both ways, takes the kernel's
    /// forwarding path and its netfilter hooks, which see the pod's address
    /// (replies get the frontend back as they leave the external interface);
    /// no reply program on pods' interfaces. Slower; choose it when the
    /// node's firewall or NetworkPolicy must apply to forwarded SSH traffic.
    #[arg(help_heading = "Data path", long, value_enum, default_value_t = RedirectMode::Auto)]
    pub redirect: RedirectMode,
    /// An interface that carries traffic to other nodes (repeatable), if it
    /// is not an external one: requests other nodes translated arrive
    /// there, and translated SYNs leave there for other nodes. Without the
    /// flag, the interfaces of the routes with a gateway (to other nodes'
    /// pods, the default route) are used.
    #[arg(
        help_heading = "Data path",
        long = "cluster-iface",
        value_name = "IFACE"
    )]
    pub cluster_ifaces: Vec<String>,

    /// How the frontend of a connection reaches the pod's node when the
    /// request entered another node. `option`: the translated SYN carries
    /// it in an IPv4 option (8 bytes, 16 sealed with --cross-node-key; SYN
    /// only); the pod's node tracks the
    /// connection and restores the right frontend. Needs a network between
    /// nodes that passes IPv4 options. `plain`: no option; the pod's node
    /// has no state for such connections and restores the backend's primary
    /// frontend (wrong for a pod behind several frontends), and replies of
    /// in-cluster traffic routed out of an external interface get it too.
    #[arg(help_heading = "Data path", long, value_enum, default_value_t = CrossNode::Option)]
    pub cross_node: CrossNode,

    /// A file holding the cluster's key (32 hex digits: `openssl rand -hex
    /// 16`), the same on every agent. It seals the frontend option, so the
    /// pod's node believes it wherever it arrives, also on an external
    /// interface its peers reach it by (host-gw or BGP routing without a
    /// separate node network). Without a key the option is plain and
    /// believed only on an interface nothing but other nodes reach (a
    /// --cluster-iface that is not an external one). With --kubernetes the
    /// key is kept in a Secret instead (--cross-node-key-secret).
    #[arg(
        help_heading = "Data path",
        long,
        value_name = "FILE",
        conflicts_with = "cross_node_key_secret"
    )]
    pub cross_node_key: Option<PathBuf>,

    /// Start even though, with a mappings file, --cross-node option and no
    /// --cross-node-key, a backend's route leaves through an external
    /// interface. The agent refuses that (at start, and at a reload, which
    /// keeps the running mappings): the backend's node believes a plain
    /// frontend option only on a cluster interface that is not external,
    /// so on host-gw or BGP routing it ignores it and logins through this
    /// node time out. Only for nodes that do receive each other's
    /// translated SYNs on such an interface although they send them out
    /// of an external one; a warning says so at each check.
    #[arg(help_heading = "Data path", long)]
    pub allow_unsealed_cross_node: bool,

    /// With --kubernetes: the Secret of the agent's namespace that holds the
    /// cluster's key (see --cross-node-key); the first agent creates it with
    /// a random key.
    #[arg(
        help_heading = "Data path",
        long,
        value_name = "NAME",
        requires = "kubernetes",
        default_value_if("kubernetes", "true", Some(CROSS_NODE_KEY_SECRET))
    )]
    pub cross_node_key_secret: Option<String>,

    /// With --kubernetes: this node's name (the downward API's
    /// `spec.nodeName`). The agent then publishes its mappings' SSH
    /// activity in the ConfigMap ssh-fwd-activity-NODE of its namespace,
    /// which the controller mirrors onto the pods; without it, activity is
    /// only in /metrics and `ssh-fwd list`. With `--announce l2` it is also
    /// the holder's name in the SSH IPs' Leases (default there: the host
    /// name).
    #[arg(
        help_heading = "Where the mappings come from",
        long,
        value_name = "NAME",
        env = "NODE_NAME"
    )]
    pub node_name: Option<String>,

    /// The shortest time between two writes of the activity ConfigMap
    /// (written only when what it holds changed).
    #[arg(help_heading = "Telemetry", long, value_name = "DURATION", default_value = "60s", value_parser = crate::args::duration)]
    pub activity_interval: Duration,

    /// A connection whose server sent nothing for this long is forgotten
    /// (far above any SSH keepalive: a shell idle for a working day keeps
    /// its entry). It is picked up again if its client speaks first
    /// through the frontend and the server answers. One whose server or
    /// client alone has closed goes after two minutes without a segment
    /// from the server.
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "DURATION", default_value = "24h", value_parser = crate::args::duration)]
    pub conn_idle_timeout: Duration,

    /// How long a client's ACK through a frontend waits for the server to
    /// confirm the connection (sshd sends its banner at once) before it
    /// counts for nothing. Only a confirmed connection takes room in the
    /// connection table, so handshakes the pod never accepts (a wrong
    /// checksum, a TTL that dies at the node) leave nothing behind.
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "DURATION", default_value = "10s", value_parser = confirm_timeout)]
    pub conn_confirm_timeout: Duration,

    /// How many open connections one client address may hold on this node;
    /// past it, its new handshakes are held back (counted as
    /// `source_limited`, per mapping too, and logged). Keeps one client from
    /// filling the connection table. A connection closed both ways no
    /// longer counts, so a client that opens and closes sessions one after
    /// another is never held back. 0: no limit. Raise it for clients behind
    /// one NAT address that keep many sessions open at once.
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "CONNECTIONS", default_value_t = CONNS_PER_SOURCE)]
    pub conns_per_source: u32,

    /// How many mappings (frontends) this node can hold: the capacity of the
    /// frontend, reverse, name and counter tables, allocated up front (about
    /// 380 bytes each, 620 where IPv6 is served). A desired state beyond it is
    /// cut: a mappings file is refused, in Kubernetes mode the newest
    /// Services are left out. Changing it on a node needs `ssh-fwd teardown`
    /// first (the pinned tables cannot be resized while they forward).
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "ENTRIES", default_value_t = MAX_MAPPINGS, value_parser = mappings_size)]
    pub max_mappings: u32,

    /// Capacity of the connection table (entries of 60 bytes plus the
    /// kernel's overhead, allocated up front), and of the table counting
    /// what each client holds. Only connections the server confirmed take
    /// an entry.
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "ENTRIES", default_value_t = CONN_CAPACITY, value_parser = table_size)]
    pub conn_table_size: u32,

    /// Capacity of the half-open table (SYNs waiting for their SYN-ACK) and
    /// of the claims table (ACKs waiting for their server's confirmation).
    /// Floods churn them, by design: each entry is needed only for the
    /// pod's own answer time.
    #[arg(help_heading = "Connection tracking and capacity", long, value_name = "ENTRIES", default_value_t = HALF_OPEN_CAPACITY, value_parser = table_size)]
    pub half_open_table_size: u32,

    /// Hairpin: let clients inside the cluster (pods, the nodes' own
    /// shells) dial a frontend `EXTERNAL_IP:PORT`. `auto`: attach a cgroup
    /// v2 `connect4` program that sends a TCP connect to a mapped frontend
    /// straight to its backend, and a `getpeername4` program that shows the
    /// application the address it dialled; without a cgroup v2 hierarchy,
    /// run without (the log says why). `off`: no hairpin; a previous
    /// agent's hooks are removed.
    #[arg(help_heading = "Data path", long, value_enum, default_value_t = HairpinMode::Auto)]
    pub hairpin: HairpinMode,

    /// The cgroup v2 directory the hairpin programs attach to: every
    /// process in it or below is served. Default: the first cgroup2 mount
    /// in /proc/mounts (`/sys/fs/cgroup` on a unified host,
    /// `/sys/fs/cgroup/unified` on a hybrid one).
    #[arg(help_heading = "Data path", long, value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Data path")]
    pub bpffs: BpffsArg,

    #[command(flatten)]
    pub config: crate::args::ConfigFlag,

    #[command(flatten)]
    pub guard: GuardArgs,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub announce: AnnounceArgs,

    /// How often the maps are re-read and repaired if anything changed them
    /// behind the agent's back, and deleted pins put back (a map pinned
    /// again, a link attached and pinned again).
    #[arg(help_heading = "Where the mappings come from", long, value_name = "DURATION", default_value = "30s", value_parser = crate::args::duration)]
    pub resync_interval: Duration,

    /// How often the mappings file is checked for changes.
    #[arg(help_heading = "Where the mappings come from", long, value_name = "DURATION", default_value = "1s", value_parser = crate::args::duration)]
    pub watch_interval: Duration,

    /// A changed mappings file is read only once it stayed the same for
    /// this long, so a file rewritten in place is never read half-written
    /// (writing a new file and renaming it over the old one is better).
    #[arg(help_heading = "Where the mappings come from", long, value_name = "DURATION", default_value = "1s", value_parser = crate::args::duration)]
    pub settle_interval: Duration,
}

impl AgentArgs {
    /// `--honour-styles` as the rules take it.
    pub fn styles(&self) -> Styles {
        Styles::of(&self.service_styles)
    }
}

mod announce;
mod audit;
mod guard;

pub use announce::{AnnounceArgs, AnnounceMode, check as check_announce};
pub use audit::AuditArgs;
pub use guard::GuardArgs;

/// `--pod-iface-reply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodIfacesMode {
    Auto,
    Off,
}

/// `--cross-node-key-secret`'s default.
pub const CROSS_NODE_KEY_SECRET: &str = "ssh-fwd-cross-node-key";

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

/// `--conn-confirm-timeout`: a second to ten minutes.
fn confirm_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::args::duration(s)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&d) {
        return Err(format!(
            "`{s}`: use between 1s and 10m (a pod answers an ACK within milliseconds; a claim \
             lives at most this long)"
        ));
    }
    Ok(d)
}

/// `--iface-wait`: zero (one look) to ten minutes.
fn iface_wait(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 0s, 20s or 2m: {e}"))?;
    if d > Duration::from_secs(600) {
        return Err(format!(
            "`{s}`: use at most 10m (an agent that waits is not ready, nor alive to a liveness \
             probe)"
        ));
    }
    Ok(d)
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
/// subcommand names), for tests of the modules that take them.
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
mod tests;
