//! One layer-2 segment, for `--announce l2`: a bridge in a namespace of
//! its own, with the client and every node plugged into it.
//!
//! ```text
//!  client 192.0.2.2 eth0 --+
//!                          |  br0 (namespace "switch")
//!  node N 192.0.2.(10+N) ext0 --+     pods 10.244.M.5 behind the node they are added to
//! ```
//!
//! The client reaches the SSH IP by an on-link route only (`198.18.0.10
//! dev eth0`): it must ask, by ARP, who holds it. No node has the SSH IP
//! on an interface. The nodes reach each other's pods over the segment
//! (host-gw: `10.244.M.0/24 via` the pod's node).

use anyhow::Context as _;

use crate::{
    NetNs, Pod, cmd,
    ssh::{SshClient, SshKeys},
    topology::{
        CLIENT_IP, CLIENT_IP6, EXT_IFACE, EXTERNAL_IP, EXTERNAL_IP6, pod_ip6, wait_out_dad,
    },
};

pub struct Segment {
    pub pods: Vec<Pod>,
    pub nodes: Vec<NetNs>,
    pub client: NetNs,
    pub switch: NetNs,
    pub keys: SshKeys,
}

/// The bridge's MAC, set when it is made (see [`Segment::new`]).
const BRIDGE_MAC: &str = "02:00:00:00:02:01";

/// Node `n`'s address on the segment.
pub fn node_ip(n: usize) -> String {
    format!("192.0.2.{}", 10 + n)
}

/// Node `n`'s IPv6 address on the segment, after [`Segment::add_ipv6`].
pub fn node_ip6(n: usize) -> String {
    format!("fd00:2::{}", 10 + n)
}

impl Segment {
    /// The client and `nodes` nodes on one bridge, no pods yet.
    pub fn new(nodes: usize) -> anyhow::Result<Self> {
        let keys = SshKeys::generate()?;
        let switch = NetNs::new("switch")?;
        // An address of its own: a bridge without one takes the lowest MAC
        // of its ports, and a port plugged in later (`another_host`) would
        // change it under the neighbour caches of everyone who talks to an
        // address on it (the fake API server's), cutting them off for
        // seconds.
        switch.ip(&[
            "link", "add", "br0", "address", BRIDGE_MAC, "type", "bridge",
        ])?;
        switch.ip(&["link", "set", "br0", "up"])?;
        let client = NetNs::new("client")?;
        client.veth("eth0", &switch, "cl")?;
        switch.ip(&["link", "set", "cl", "master", "br0"])?;
        client.ip(&["addr", "add", &format!("{CLIENT_IP}/24"), "dev", "eth0"])?;
        client.ip(&["route", "add", &format!("{EXTERNAL_IP}/32"), "dev", "eth0"])?;
        let mut all = Vec::new();
        for n in 0..nodes {
            let node = NetNs::new(&format!("node{n}"))?;
            let port = format!("n{n}");
            node.veth(EXT_IFACE, &switch, &port)?;
            switch.ip(&["link", "set", &port, "master", "br0"])?;
            node.ip(&[
                "addr",
                "add",
                &format!("{}/24", node_ip(n)),
                "dev",
                EXT_IFACE,
            ])?;
            node.sysctl("net.ipv4.ip_forward", "1")?;
            all.push(node);
        }
        Ok(Self {
            pods: Vec::new(),
            nodes: all,
            client,
            switch,
            keys,
        })
    }

    /// Adds pod number `n` (10.244.n.5, sshd) on node `node`, and the
    /// other nodes' routes to it through that node.
    pub fn add_pod(&mut self, node: usize, n: usize) -> anyhow::Result<&Pod> {
        let pod = Pod::wire(&self.nodes[node], node, n, &self.keys)?;
        for (other, ns) in self.nodes.iter().enumerate().filter(|(i, _)| *i != node) {
            ns.ip(&[
                "route",
                "add",
                &format!("10.244.{n}.0/24"),
                "via",
                &node_ip(node),
            ])
            .with_context(|| format!("route to pod {n} on node {other}"))?;
        }
        self.pods.push(pod);
        self.pods.last().context("pod just added")
    }

    pub fn ssh(&self) -> SshClient {
        self.keys.client()
    }

    /// IPv6 beside IPv4, once the pods are added: the client
    /// [`CLIENT_IP6`] with only an on-link route to [`EXTERNAL_IP6`] (it
    /// must solicit its neighbour, as it ARPs for the IPv4 SSH IP), node
    /// N [`node_ip6`], each pod [`pod_ip6`] behind its node's
    /// `fd00:244:N::1`, the other nodes routing to it through that node.
    /// No node has the SSH IP on an interface. The bridge floods
    /// multicast (no snooping: the SSH IP's solicited-node group has no
    /// member), and the addresses are added without duplicate address
    /// detection; it returns once the link-local ones are out of it too.
    pub fn add_ipv6(&self) -> anyhow::Result<()> {
        let add = |ns: &NetNs, addr: &str, dev: &str| {
            ns.ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"])
        };
        self.switch.ip(&[
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
        add(&self.client, &format!("{CLIENT_IP6}/64"), "eth0")?;
        self.client.ip(&[
            "-6",
            "route",
            "add",
            &format!("{EXTERNAL_IP6}/128"),
            "dev",
            "eth0",
        ])?;
        for (n, node) in self.nodes.iter().enumerate() {
            add(node, &format!("{}/64", node_ip6(n)), EXT_IFACE)?;
            node.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        }
        for pod in &self.pods {
            let gateway = format!("fd00:244:{}::1", pod.number);
            add(&pod.ns, &format!("{}/64", pod_ip6(pod.number)), "eth0")?;
            add(
                &self.nodes[pod.node],
                &format!("{gateway}/64"),
                &pod.node_iface,
            )?;
            pod.ns
                .ip(&["-6", "route", "add", "default", "via", &gateway])?;
            for (other, ns) in self
                .nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != pod.node)
            {
                ns.ip(&[
                    "-6",
                    "route",
                    "add",
                    &format!("fd00:244:{}::/64", pod.number),
                    "via",
                    &node_ip6(pod.node),
                ])
                .with_context(|| format!("IPv6 route to pod {} on node {other}", pod.number))?;
            }
        }
        let all = [&self.client, &self.switch]
            .into_iter()
            .chain(&self.nodes)
            .chain(self.pods.iter().map(|p| &p.ns));
        wait_out_dad(all)
    }

    /// The MAC the client's neighbour table holds for `ip` on `eth0`, if
    /// any (`ip -6 neigh`; a failed or incomplete entry has none).
    pub fn neighbour(&self, ip: &str) -> anyhow::Result<Option<String>> {
        let out = cmd::run(
            self.client
                .command("ip")
                .args(["-6", "neigh", "show", ip, "dev", "eth0"]),
        )?;
        Ok(out
            .split_whitespace()
            .skip_while(|w| *w != "lladdr")
            .nth(1)
            .map(str::to_owned))
    }

    /// The MAC of `ns`'s interface `iface`.
    pub fn mac(ns: &NetNs, iface: &str) -> anyhow::Result<String> {
        let out = cmd::run(ns.command("ip").args(["-br", "link", "show", iface]))?;
        out.split_whitespace()
            .nth(2)
            .map(str::to_owned)
            .with_context(|| format!("no MAC in {out:?}"))
    }

    /// Another host of the segment, neither a node nor the client: a
    /// namespace whose `eth0` is plugged into the bridge, with no address
    /// (what it sends, it writes whole, as an attacker on the segment
    /// would). One per segment.
    pub fn another_host(&self) -> anyhow::Result<NetNs> {
        let ns = NetNs::new("host")?;
        ns.veth("eth0", &self.switch, "nb")?;
        self.switch.ip(&["link", "set", "nb", "master", "br0"])?;
        Ok(ns)
    }

    /// The MACs that answer each of `count` ARP requests for `ip` the
    /// client broadcasts 200 ms apart: one list per request, in order (an
    /// unanswered one's is empty), each answer's sender as it came.
    pub fn arping_each(&self, ip: &str, count: u32) -> anyhow::Result<Vec<Vec<String>>> {
        let limit = std::time::Duration::from_secs(u64::from(count) + 3);
        let out = self
            .client
            .command("timeout")
            .args([&limit.as_secs().to_string(), "arping", "-i", "eth0"])
            .args(["-W", "0.2", "-c", &count.to_string(), ip])
            .output()
            .context("running arping")?;
        let mut each = vec![Vec::new(); usize::try_from(count).unwrap_or(0)];
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "60 bytes from 02:5f:..:01 (198.18.0.10): index=3 time=..."
            let mac = line
                .split(" from ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            let index = line
                .split("index=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|i| i.parse::<usize>().ok());
            if let (Some(mac), Some(slot)) = (mac, index.and_then(|i| each.get_mut(i))) {
                slot.push(mac.to_owned());
            }
        }
        Ok(each)
    }

    /// The MACs that answer the client's ARP requests for `ip`: `count`
    /// requests 200 ms apart, each answer's sender, in order.
    pub fn arping(&self, ip: &str, count: u32) -> anyhow::Result<Vec<String>> {
        let limit = std::time::Duration::from_secs(u64::from(count) + 3);
        let out = self
            .client
            .command("timeout")
            .args([
                &limit.as_secs().to_string(),
                "arping",
                "-i",
                "eth0",
                "-W",
                "0.2",
            ])
            .args(["-c", &count.to_string(), ip])
            .output()
            .context("running arping")?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .filter_map(|l| l.split(" from ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Pods (and their sshd) go before the namespaces they are wired to.
        self.pods.clear();
    }
}
