//! Namespaces wired like a small cluster:
//!
//! ```text
//!  client 192.0.2.2 --eth0/ext0-- node 192.0.2.1 (owns 198.18.0.10 on lo)
//!                                   |  podN 10.244.(N+1).1/24
//!                                   +--eth0-- pod N 10.244.(N+1).5, sshd :22
//! ```
//!
//! `two_nodes` adds a second node B with its own link to the client: the
//! client reaches the external IP through node A, node A routes to the pod on
//! node B over a node-to-node link, and the reply leaves node B directly.

use anyhow::Context as _;

use crate::{
    NetNs,
    ssh::{SshClient, SshKeys, Sshd},
};

pub const EXTERNAL_IP: &str = "198.18.0.10";
pub const CLIENT_IP: &str = "192.0.2.2";
pub const EXT_IFACE: &str = "ext0";
/// The client's IPv6 address after [`Topology::add_ipv6`].
pub const CLIENT_IP6: &str = "fd00:2::2";
/// The SSH IP's IPv6 twin, on the node's `lo` after
/// [`Topology::add_ipv6`].
pub const EXTERNAL_IP6: &str = "fd00:198::10";

/// Pod number `n`'s IPv6 address after [`Topology::add_ipv6`].
pub fn pod_ip6(n: usize) -> String {
    format!("fd00:244:{n}::5")
}

/// IPv6 beside IPv4 on a client -> node -> pods layout: the client
/// [`CLIENT_IP6`] (`eth0`) and the node `fd00:2::1` ([`EXT_IFACE`]) on
/// their link, the node owning [`EXTERNAL_IP6`] on `lo`, pod N ([`pod_ip6`], its `eth0`) behind the node's
/// `fd00:244:N::1` on `pods`' interface of the node, default routes and
/// forwarding as for IPv4. Without duplicate address detection on the
/// addresses it adds, and it returns once the interfaces' own link-local
/// addresses are out of theirs too: until then neighbour discovery is
/// silent, and the first packets through are lost.
pub fn wire_ipv6(
    client: &NetNs,
    node: &NetNs,
    pods: &[(&NetNs, usize, &str)],
) -> anyhow::Result<()> {
    let add = |ns: &NetNs, addr: &str, dev: &str| {
        ns.ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"])
    };
    add(client, &format!("{CLIENT_IP6}/64"), "eth0")?;
    add(node, "fd00:2::1/64", EXT_IFACE)?;
    add(node, &format!("{EXTERNAL_IP6}/128"), "lo")?;
    client.ip(&["-6", "route", "add", "default", "via", "fd00:2::1"])?;
    node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    for &(pod, n, node_iface) in pods {
        let gateway = format!("fd00:244:{n}::1");
        add(pod, &format!("{}/64", pod_ip6(n)), "eth0")?;
        add(node, &format!("{gateway}/64"), node_iface)?;
        pod.ip(&["-6", "route", "add", "default", "via", &gateway])?;
    }
    let namespaces = [client, node].into_iter().chain(pods.iter().map(|p| p.0));
    wait_out_dad(namespaces)
}

/// Returns once no IPv6 address of `namespaces` is tentative (duplicate
/// address detection over): until then neighbour discovery is silent, and
/// the first packets through are lost.
pub fn wait_out_dad<'a>(namespaces: impl IntoIterator<Item = &'a NetNs>) -> anyhow::Result<()> {
    for ns in namespaces {
        let settled = crate::cmd::wait_until(std::time::Duration::from_secs(5), || {
            crate::cmd::run(ns.command("ip").args(["-6", "addr", "show", "tentative"]))
                .is_ok_and(|out| out.trim().is_empty())
        });
        anyhow::ensure!(
            settled,
            "IPv6 addresses in {} still tentative after 5 s (duplicate address detection)",
            ns.name()
        );
    }
    Ok(())
}

pub struct Pod {
    pub ns: NetNs,
    /// N of pod N: its addresses and names follow from it.
    pub number: usize,
    pub ip: String,
    pub hostname: String,
    /// Index of the node the pod is wired to, and that node's end of the veth.
    pub node: usize,
    pub node_iface: String,
    /// The running sshd last; ones restarted away before it, kept so their
    /// sessions end with the pod.
    sshd: Vec<Sshd>,
}

impl Pod {
    /// Pod number `n` (IP 10.244.n.5, host name pod-n), wired by a veth to
    /// `node_ns` (node number `node`), whose end `pod<n>` is the pod's
    /// gateway 10.244.n.1; with sshd.
    pub fn wire(node_ns: &NetNs, node: usize, n: usize, keys: &SshKeys) -> anyhow::Result<Self> {
        let hostname = format!("pod-{n}");
        let ns = NetNs::new(&hostname)?;
        let node_iface = format!("pod{n}");
        ns.veth("eth0", node_ns, &node_iface)?;
        let ip = format!("10.244.{n}.5");
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
        ns.ip(&["route", "add", "default", "via", &format!("10.244.{n}.1")])?;
        node_ns.ip(&[
            "addr",
            "add",
            &format!("10.244.{n}.1/24"),
            "dev",
            &node_iface,
        ])?;
        let sshd =
            Sshd::start(&ns, &hostname, keys).with_context(|| format!("sshd in {hostname}"))?;
        Ok(Self {
            ns,
            number: n,
            ip,
            hostname,
            node,
            node_iface,
            sshd: vec![sshd],
        })
    }

    /// Restarts the pod's sshd as `systemctl restart ssh` does: the
    /// listener ends, a new one starts listening, and the sessions the old
    /// one opened go on.
    pub fn restart_sshd(&mut self, keys: &SshKeys) -> anyhow::Result<()> {
        if let Some(old) = self.sshd.last() {
            old.stop_listening();
        }
        let listening = crate::cmd::wait_until(std::time::Duration::from_secs(5), || {
            crate::cmd::run(self.ns.command("ss").args(["-Hltn", "sport = :22"]))
                .is_ok_and(|o| o.trim().is_empty())
        });
        anyhow::ensure!(listening, "the old sshd of {} still listens", self.hostname);
        let sshd = Sshd::start(&self.ns, &self.hostname, keys)
            .with_context(|| format!("sshd in {} again", self.hostname))?;
        self.sshd.push(sshd);
        Ok(())
    }
}

pub struct Node {
    pub ns: NetNs,
}

/// Everything one test needs; dropping it removes everything (pods' sshd
/// first, then namespaces).
pub struct Topology {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub client: NetNs,
    pub keys: SshKeys,
}

impl Topology {
    /// One node with `pods` pods, each running sshd.
    pub fn single_node(pods: usize) -> anyhow::Result<Self> {
        let keys = SshKeys::generate()?;
        let client = NetNs::new("client")?;
        let node = NetNs::new("node")?;
        client.veth("eth0", &node, EXT_IFACE)?;
        client.ip(&["addr", "add", "192.0.2.2/24", "dev", "eth0"])?;
        client.ip(&["route", "add", "default", "via", "192.0.2.1"])?;
        node.ip(&["addr", "add", "192.0.2.1/24", "dev", EXT_IFACE])?;
        // The node owns the external IP, as on a node with the SSH IP on
        // `lo`; the data path keeps its unmapped ports closed (no answer).
        node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
        let mut topo = Self {
            pods: Vec::new(),
            nodes: vec![Node { ns: node }],
            client,
            keys,
        };
        for i in 0..pods {
            topo.add_pod(0, i + 1)?;
        }
        Ok(topo)
    }

    /// Two nodes; the pod lives on node B, the client enters through node A.
    pub fn two_nodes() -> anyhow::Result<Self> {
        let keys = SshKeys::generate()?;
        let client = NetNs::new("client")?;
        let a = NetNs::new("nodea")?;
        let b = NetNs::new("nodeb")?;
        client.veth("eth0", &a, EXT_IFACE)?;
        client.veth("eth1", &b, EXT_IFACE)?;
        client.ip(&["addr", "add", "192.0.2.2/24", "dev", "eth0"])?;
        client.ip(&["addr", "add", "192.0.3.2/24", "dev", "eth1"])?;
        client.ip(&["route", "add", "default", "via", "192.0.2.1"])?;
        // Replies come back on eth1 although the route to 198.18.0.10 is eth0.
        for key in ["all", "default", "eth0", "eth1"] {
            client.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
        }
        a.ip(&["addr", "add", "192.0.2.1/24", "dev", EXT_IFACE])?;
        b.ip(&["addr", "add", "192.0.3.1/24", "dev", EXT_IFACE])?;
        for node in [&a, &b] {
            node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])?;
            node.sysctl("net.ipv4.ip_forward", "1")?;
        }
        a.veth("peer", &b, "peer")?;
        a.ip(&["addr", "add", "10.0.0.1/30", "dev", "peer"])?;
        b.ip(&["addr", "add", "10.0.0.2/30", "dev", "peer"])?;
        // The pod network, as a CNI routes it: node B's pods from A, and
        // A's from B (the /24s of each node's own pods are more specific).
        a.ip(&["route", "add", "10.244.0.0/16", "via", "10.0.0.2"])?;
        b.ip(&["route", "add", "10.244.0.0/16", "via", "10.0.0.1"])?;
        // Node B sends client traffic straight out of its own external link.
        b.ip(&[
            "route",
            "add",
            "192.0.2.0/24",
            "via",
            "192.0.3.2",
            "dev",
            EXT_IFACE,
        ])?;
        for key in ["all", "default", "peer", EXT_IFACE] {
            b.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
        }
        let mut topo = Self {
            pods: Vec::new(),
            nodes: vec![Node { ns: a }, Node { ns: b }],
            client,
            keys,
        };
        topo.add_pod(1, 1)?;
        Ok(topo)
    }

    /// Adds pod number `n` (IP 10.244.n.5) on node `node`, with sshd.
    pub fn add_pod(&mut self, node: usize, n: usize) -> anyhow::Result<&Pod> {
        let pod = Pod::wire(&self.nodes[node].ns, node, n, &self.keys)?;
        self.pods.push(pod);
        self.pods.last().context("pod just added")
    }

    pub fn ssh(&self) -> SshClient {
        self.keys.client()
    }

    /// Gives a single-node topology IPv6 addresses besides its IPv4 ones
    /// (see [`wire_ipv6`]).
    pub fn add_ipv6(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.nodes.len() == 1,
            "add_ipv6 wires single-node topologies only ({} nodes here)",
            self.nodes.len()
        );
        let pods: Vec<(&NetNs, usize, &str)> = (self.pods.iter())
            .map(|p| (&p.ns, p.number, p.node_iface.as_str()))
            .collect();
        wire_ipv6(&self.client, &self.nodes[0].ns, &pods)
    }

    /// Turns off transmit checksum offload on every veth, so each packet
    /// carries a real checksum that the receiver verifies, as on a wire.
    pub fn software_checksums(&self) -> anyhow::Result<()> {
        let mut all: Vec<(&NetNs, String)> = vec![];
        for pod in &self.pods {
            all.push((&pod.ns, "eth0".into()));
            all.push((&self.nodes[pod.node].ns, pod.node_iface.clone()));
        }
        all.push((&self.client, "eth0".into()));
        if self.nodes.len() > 1 {
            all.push((&self.client, "eth1".into()));
        }
        for node in &self.nodes {
            all.push((&node.ns, EXT_IFACE.into()));
        }
        for (ns, iface) in all {
            crate::cmd::run(ns.command("ethtool").args(["-K", &iface, "tx", "off"]))?;
        }
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Pods (and their sshd) go before the namespaces they are wired to.
        self.pods.clear();
    }
}
