//! A small routed cluster: a client behind a router, two nodes behind the
//! router, pods on both.
//!
//! ```text
//!  client 192.0.2.2 --cl-- router --to-a-- node A ext0 203.0.113.2  (owns 198.18.0.10 on lo)
//!                            |   \\--to-b-- node B ext0 203.0.113.6  (owns 198.18.0.10 on lo)
//!                            |
//!  the router sends 198.18.0.10 to node A; each node's replies go straight
//!  back to the router (B's never pass through A)
//!
//!  pods: 10.244.N.5 on the node they are added to, gateway 10.244.N.1
//!  between the nodes, either a direct link (A `peer` 10.0.0.1 <-> B `peer`
//!  10.0.0.2) or, with `host_gw`, through the router over the external
//!  interfaces (host-gw, BGP: the pod routes point at the other node)
//!
//!  IPv6 beside it, once `add_ipv6` ran, in the same shape:
//!  client fd00:2::2 --cl-- router --to-a-- node A fd00:203::2 (owns fd00:198::10 on lo)
//!                                  \\--to-b-- node B fd00:204::2 (owns fd00:198::10 on lo)
//!  the router sends fd00:198::10 to node A; pods fd00:244:N::5, gateway
//!  fd00:244:N::1; between the nodes `peer` fd00:10::1 <-> fd00:10::2, or
//!  with `host_gw` the router
//! ```
//!
//! Spoofed test traffic stays inside: the router has no route out, so what
//! it cannot deliver here it drops.

use anyhow::Context as _;

use crate::{
    NetNs, Pod,
    ssh::{SshClient, SshKeys},
    topology::{
        CLIENT_IP, CLIENT_IP6, EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6, pod_ip6, wait_out_dad,
    },
};

/// How the cluster is wired.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wiring {
    /// Pod routes between the nodes through the router and the external
    /// interfaces instead of a direct link.
    pub host_gw: bool,
    /// MTU of the router's link to the client (with the client advertising
    /// an MSS for 1500 bytes, so the path MTU must be discovered).
    pub client_link_mtu: Option<u32>,
    /// MTU of the direct link between the nodes.
    pub node_link_mtu: Option<u32>,
    /// The pod routes over the direct link name no gateway (`10.244.0.0/16
    /// dev peer`, each node answering ARP for its pods): no route with a
    /// gateway leaves through it, so an agent finds it only by
    /// `--cluster-iface`.
    pub pod_routes_on_link: bool,
}

pub struct Cluster {
    pub pods: Vec<Pod>,
    pub nodes: Vec<NetNs>,
    pub router: NetNs,
    pub client: NetNs,
    pub keys: SshKeys,
    pub wiring: Wiring,
}

/// Each node's external address, and the router's on the same link.
pub const NODE_IPS: [&str; 2] = ["203.0.113.2", "203.0.113.6"];
const ROUTER_IPS: [&str; 2] = ["203.0.113.1", "203.0.113.5"];
/// Each node's external IPv6 address after [`Cluster::add_ipv6`], and the
/// router's on the same link.
pub const NODE_IP6S: [&str; 2] = ["fd00:203::2", "fd00:204::2"];
const ROUTER_IP6S: [&str; 2] = ["fd00:203::1", "fd00:204::1"];
/// Each node's IPv6 address on the direct link between them.
pub const PEER_IP6S: [&str; 2] = ["fd00:10::1", "fd00:10::2"];
/// The IPv6 pod network: pod N's /64 is `fd00:244:N::/64`.
const POD_NET6: &str = "fd00:244::/32";
/// The interface between the nodes when they are linked directly.
pub const PEER_IFACE: &str = "peer";

impl Cluster {
    pub fn new(wiring: Wiring) -> anyhow::Result<Self> {
        let keys = SshKeys::generate()?;
        let client = NetNs::new("client")?;
        let router = NetNs::new("router")?;
        let nodes = vec![NetNs::new("nodea")?, NetNs::new("nodeb")?];
        client.veth("eth0", &router, "cl")?;
        client.ip(&["addr", "add", &format!("{CLIENT_IP}/24"), "dev", "eth0"])?;
        router.ip(&["addr", "add", "192.0.2.1/24", "dev", "cl"])?;
        match wiring.client_link_mtu {
            Some(mtu) => {
                let mtu = mtu.to_string();
                client.ip(&["link", "set", "eth0", "mtu", &mtu])?;
                router.ip(&["link", "set", "cl", "mtu", &mtu])?;
                // Advertise an MSS for a 1500-byte path: the router's
                // "fragmentation needed" must then reach the pod.
                client.ip(&[
                    "route",
                    "add",
                    "default",
                    "via",
                    "192.0.2.1",
                    "advmss",
                    "1460",
                ])?;
            }
            None => client.ip(&["route", "add", "default", "via", "192.0.2.1"])?,
        }
        for (i, node) in nodes.iter().enumerate() {
            let side = ["to-a", "to-b"][i];
            router.veth(side, node, EXT_IFACE)?;
            router.ip(&["addr", "add", &format!("{}/30", ROUTER_IPS[i]), "dev", side])?;
            node.ip(&[
                "addr",
                "add",
                &format!("{}/30", NODE_IPS[i]),
                "dev",
                EXT_IFACE,
            ])?;
            node.ip(&["route", "add", "default", "via", ROUTER_IPS[i]])?;
            node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])?;
            node.sysctl("net.ipv4.ip_forward", "1")?;
            for key in ["all", "default", EXT_IFACE] {
                node.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
            }
        }
        router.sysctl("net.ipv4.ip_forward", "1")?;
        for key in ["all", "default", "cl", "to-a", "to-b"] {
            // Node B answers for the SSH IP the router sends to node A.
            router.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
        }
        router.ip(&[
            "route",
            "add",
            &format!("{EXTERNAL_IP}/32"),
            "via",
            NODE_IPS[0],
        ])?;
        let cluster = Self {
            pods: Vec::new(),
            nodes,
            router,
            client,
            keys,
            wiring,
        };
        cluster.link_nodes()?;
        Ok(cluster)
    }

    /// The pod network between the nodes.
    fn link_nodes(&self) -> anyhow::Result<()> {
        let [a, b] = [&self.nodes[0], &self.nodes[1]];
        if self.wiring.host_gw {
            // Each node routes the pod network to the router, which knows
            // which node holds which pods (see `add_pod`).
            for node in [a, b] {
                node.ip(&[
                    "route",
                    "add",
                    "10.244.0.0/16",
                    "via",
                    ROUTER_IPS[self.index(node)],
                ])?;
            }
            return Ok(());
        }
        a.veth(PEER_IFACE, b, PEER_IFACE)?;
        a.ip(&["addr", "add", "10.0.0.1/30", "dev", PEER_IFACE])?;
        b.ip(&["addr", "add", "10.0.0.2/30", "dev", PEER_IFACE])?;
        if let Some(mtu) = self.wiring.node_link_mtu {
            let mtu = mtu.to_string();
            a.ip(&["link", "set", PEER_IFACE, "mtu", &mtu])?;
            b.ip(&["link", "set", PEER_IFACE, "mtu", &mtu])?;
        }
        if self.wiring.pod_routes_on_link {
            for node in [a, b] {
                node.ip(&["route", "add", "10.244.0.0/16", "dev", PEER_IFACE])?;
                node.sysctl(&format!("net.ipv4.conf.{PEER_IFACE}.proxy_arp"), "1")?;
            }
        } else {
            a.ip(&["route", "add", "10.244.0.0/16", "via", "10.0.0.2"])?;
            b.ip(&["route", "add", "10.244.0.0/16", "via", "10.0.0.1"])?;
        }
        for node in [a, b] {
            for key in ["all", "default", PEER_IFACE] {
                node.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
            }
        }
        Ok(())
    }

    fn index(&self, node: &NetNs) -> usize {
        usize::from(node.name() == self.nodes[1].name())
    }

    /// Adds pod number `n` (IP 10.244.n.5, host name pod-n) on `node`, with
    /// sshd.
    pub fn add_pod(&mut self, node: usize, n: usize) -> anyhow::Result<&Pod> {
        let pod = Pod::wire(&self.nodes[node], node, n, &self.keys)?;
        if self.wiring.host_gw {
            self.router.ip(&[
                "route",
                "add",
                &format!("10.244.{n}.0/24"),
                "via",
                NODE_IPS[node],
            ])?;
        }
        self.pods.push(pod);
        self.pods.last().context("pod just added")
    }

    pub fn ssh(&self) -> SshClient {
        self.keys.client()
    }

    /// IPv6 beside IPv4, the same shape (see the module doc): the client
    /// [`CLIENT_IP6`] behind the router's `fd00:2::1` (with
    /// `client_link_mtu`, advertising an MSS for a 1500-byte path, as for
    /// IPv4); each node [`NODE_IP6S`] behind the router's `fd00:203::1`
    /// (A) or `fd00:204::1` (B), its default route, owning
    /// [`EXTERNAL_IP6`] on `lo`, which the router sends to node A only;
    /// pod N added so far [`pod_ip6`] behind its node's `fd00:244:N::1`;
    /// the pod network `fd00:244::/32` between the nodes as for IPv4, over
    /// the direct link ([`PEER_IP6S`]) or, with `host_gw`, the router.
    pub fn add_ipv6(&self) -> anyhow::Result<()> {
        let router = &self.router;
        add6(&self.client, &format!("{CLIENT_IP6}/64"), "eth0")?;
        add6(router, "fd00:2::1/64", "cl")?;
        let mut default = vec!["-6", "route", "add", "default", "via", "fd00:2::1"];
        if self.wiring.client_link_mtu.is_some() {
            default.extend(["advmss", "1440"]);
        }
        self.client.ip(&default)?;
        for (i, node) in self.nodes.iter().enumerate() {
            add6(
                router,
                &format!("{}/64", ROUTER_IP6S[i]),
                ["to-a", "to-b"][i],
            )?;
            add6(node, &format!("{}/64", NODE_IP6S[i]), EXT_IFACE)?;
            add6(node, &format!("{EXTERNAL_IP6}/128"), "lo")?;
            node.ip(&["-6", "route", "add", "default", "via", ROUTER_IP6S[i]])?;
        }
        router.ip(&[
            "-6",
            "route",
            "add",
            &format!("{EXTERNAL_IP6}/128"),
            "via",
            NODE_IP6S[0],
        ])?;
        for ns in std::iter::once(router).chain(&self.nodes) {
            ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        }
        for pod in &self.pods {
            let (node, n) = (&self.nodes[pod.node], pod.number);
            let gateway = format!("fd00:244:{n}::1");
            add6(&pod.ns, &format!("{}/64", pod_ip6(n)), "eth0")?;
            add6(node, &format!("{gateway}/64"), &pod.node_iface)?;
            pod.ns
                .ip(&["-6", "route", "add", "default", "via", &gateway])?;
        }
        self.link_nodes6()?;
        let namespaces = [&self.client, router]
            .into_iter()
            .chain(&self.nodes)
            .chain(self.pods.iter().map(|p| &p.ns));
        wait_out_dad(namespaces)
    }

    /// The IPv6 pod network between the nodes, as [`Cluster::link_nodes`]
    /// wires IPv4's: over the direct link (`fd00:10::1` on A, `fd00:10::2`
    /// on B), each node routing `fd00:244::/32` to the other (its own
    /// pods' /64s are more specific), or with `pod_routes_on_link` on the
    /// link itself, each node answering neighbour solicitations for its
    /// pods (proxy NDP); with `host_gw`, through the router, which routes
    /// each pod's /64 to the pod's node.
    fn link_nodes6(&self) -> anyhow::Result<()> {
        if self.wiring.host_gw {
            for (i, node) in self.nodes.iter().enumerate() {
                node.ip(&["-6", "route", "add", POD_NET6, "via", ROUTER_IP6S[i]])?;
            }
            for pod in &self.pods {
                self.router.ip(&[
                    "-6",
                    "route",
                    "add",
                    &format!("fd00:244:{}::/64", pod.number),
                    "via",
                    NODE_IP6S[pod.node],
                ])?;
            }
            return Ok(());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            add6(node, &format!("{}/64", PEER_IP6S[i]), PEER_IFACE)?;
            if self.wiring.pod_routes_on_link {
                node.ip(&["-6", "route", "add", POD_NET6, "dev", PEER_IFACE])?;
                node.sysctl(&format!("net.ipv6.conf.{PEER_IFACE}.proxy_ndp"), "1")?;
            } else {
                let other = PEER_IP6S[1 - i];
                node.ip(&["-6", "route", "add", POD_NET6, "via", other])?;
            }
        }
        if self.wiring.pod_routes_on_link {
            for pod in &self.pods {
                self.nodes[pod.node].ip(&[
                    "-6",
                    "neigh",
                    "add",
                    "proxy",
                    &pod_ip6(pod.number),
                    "dev",
                    PEER_IFACE,
                ])?;
            }
        }
        Ok(())
    }
}

/// Adds `addr` to `dev` in `ns` without duplicate address detection.
fn add6(ns: &NetNs, addr: &str, dev: &str) -> anyhow::Result<()> {
    ns.ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"])
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Pods (and their sshd) go before the namespaces they are wired to.
        self.pods.clear();
    }
}
