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
    topology::{CLIENT_IP, EXT_IFACE, EXTERNAL_IP},
};

pub struct Segment {
    pub pods: Vec<Pod>,
    pub nodes: Vec<NetNs>,
    pub client: NetNs,
    pub switch: NetNs,
    pub keys: SshKeys,
}

/// Node `n`'s address on the segment.
pub fn node_ip(n: usize) -> String {
    format!("192.0.2.{}", 10 + n)
}

impl Segment {
    /// The client and `nodes` nodes on one bridge, no pods yet.
    pub fn new(nodes: usize) -> anyhow::Result<Self> {
        let keys = SshKeys::generate()?;
        let switch = NetNs::new("switch")?;
        switch.ip(&["link", "add", "br0", "type", "bridge"])?;
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

    /// The MAC of `ns`'s interface `iface`.
    pub fn mac(ns: &NetNs, iface: &str) -> anyhow::Result<String> {
        let out = cmd::run(ns.command("ip").args(["-br", "link", "show", iface]))?;
        out.split_whitespace()
            .nth(2)
            .map(str::to_owned)
            .with_context(|| format!("no MAC in {out:?}"))
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
