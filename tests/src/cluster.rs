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

    /// IPv6 beside IPv4 from the client through the router to node A and
    /// the pods added on it so far: the client [`CLIENT_IP6`] behind the
    /// router's `fd00:2::1` (with `client_link_mtu`, advertising an MSS for
    /// a 1500-byte path, as for IPv4), node A `fd00:203::2` behind the
    /// router's `fd00:203::1`, owning [`EXTERNAL_IP6`] on `lo`, which the
    /// router sends to it, and pod N [`pod_ip6`] behind node A's
    /// `fd00:244:N::1`. Node B gets no IPv6: an IPv6 backend lives on the
    /// node its frontend's traffic reaches.
    pub fn add_ipv6(&self) -> anyhow::Result<()> {
        let add = |ns: &NetNs, addr: &str, dev: &str| {
            ns.ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"])
        };
        let (router, node) = (&self.router, &self.nodes[0]);
        add(&self.client, &format!("{CLIENT_IP6}/64"), "eth0")?;
        add(router, "fd00:2::1/64", "cl")?;
        let mut default = vec!["-6", "route", "add", "default", "via", "fd00:2::1"];
        if self.wiring.client_link_mtu.is_some() {
            default.extend(["advmss", "1440"]);
        }
        self.client.ip(&default)?;
        add(router, "fd00:203::1/64", "to-a")?;
        add(node, "fd00:203::2/64", EXT_IFACE)?;
        add(node, &format!("{EXTERNAL_IP6}/128"), "lo")?;
        node.ip(&["-6", "route", "add", "default", "via", "fd00:203::1"])?;
        router.ip(&[
            "-6",
            "route",
            "add",
            &format!("{EXTERNAL_IP6}/128"),
            "via",
            "fd00:203::2",
        ])?;
        for ns in [router, node] {
            ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        }
        let on_a: Vec<&Pod> = self.pods.iter().filter(|p| p.node == 0).collect();
        for pod in &on_a {
            let gateway = format!("fd00:244:{}::1", pod.number);
            add(&pod.ns, &format!("{}/64", pod_ip6(pod.number)), "eth0")?;
            add(node, &format!("{gateway}/64"), &pod.node_iface)?;
            pod.ns
                .ip(&["-6", "route", "add", "default", "via", &gateway])?;
        }
        let namespaces = [&self.client, router, node]
            .into_iter()
            .chain(on_a.iter().map(|p| &p.ns));
        wait_out_dad(namespaces)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Pods (and their sshd) go before the namespaces they are wired to.
        self.pods.clear();
    }
}
