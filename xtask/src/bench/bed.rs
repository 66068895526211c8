//! The benchmark's test bed: client -> node -> pod over veths, built fresh
//! for every measurement so no path inherits another's rules, conntrack
//! entries or attached programs.
//!
//! ```text
//!  client 192.0.2.2 --eth0/ext0-- node 192.0.2.1 (owns 198.18.0.10 on lo)
//!                                   | pod1 10.244.1.1/24
//!                                   +--eth0-- pod 10.244.1.5: iperf3 :5201, echo :7007
//! ```
//!
//! The same links carry IPv6 (client fd00:2::2, node fd00:2::1 owning
//! fd00:198::10 on lo, pod fd00:244:1::5 behind fd00:244:1::1), and the
//! servers listen on both.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use ssh_fwd_tests::{
    NetNs, cmd,
    topology::{self, CLIENT_IP, EXT_IFACE, EXTERNAL_IP},
};

pub const POD_IP: &str = "10.244.1.5";
pub const POD_GATEWAY: &str = "10.244.1.1";
/// The node's end of the pod's veth.
pub const POD_IFACE: &str = "pod1";
/// An interface towards other nodes (a veth whose other end stays in the
/// node: nothing is sent on it).
pub const CLUSTER_IFACE: &str = "peer0";
pub const IPERF_PORT: u16 = 5201;
pub const ECHO_PORT: u16 = 7007;
/// Frontend ports on the external IP (ssh-fwd, kube-proxy rules, proxy).
pub const IPERF_FRONTEND_PORT: u16 = 8201;
pub const ECHO_FRONTEND_PORT: u16 = 8007;

/// Where a workload connects: the iperf3 and echo servers, as one path
/// exposes them.
#[derive(Clone, Debug)]
pub struct Target {
    pub ip: String,
    pub iperf_port: u16,
    pub echo_port: u16,
}

impl Target {
    pub fn pod() -> Self {
        Self {
            ip: POD_IP.into(),
            iperf_port: IPERF_PORT,
            echo_port: ECHO_PORT,
        }
    }

    pub fn pod6() -> Self {
        Self {
            ip: topology::pod_ip6(1),
            ..Self::pod()
        }
    }

    /// `ip:port`, with the IPv6 address in brackets.
    pub fn socket(&self, port: u16) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{port}", self.ip)
        } else {
            format!("{}:{port}", self.ip)
        }
    }

    pub fn frontend() -> Self {
        Self {
            ip: EXTERNAL_IP.into(),
            iperf_port: IPERF_FRONTEND_PORT,
            echo_port: ECHO_FRONTEND_PORT,
        }
    }

    /// The frontend ports on the SSH IP's IPv6 twin.
    pub fn frontend6() -> Self {
        Self {
            ip: topology::EXTERNAL_IP6.into(),
            ..Self::frontend()
        }
    }
}

pub struct Bed {
    /// Servers go first (drop order), then the namespaces they live in.
    servers: Vec<Child>,
    pub pod: NetNs,
    pub node: NetNs,
    pub client: NetNs,
}

impl Bed {
    pub fn new() -> anyhow::Result<Self> {
        let client = NetNs::new("client")?;
        let node = NetNs::new("node")?;
        let pod = NetNs::new("pod")?;
        client.veth("eth0", &node, EXT_IFACE)?;
        client.ip(&["addr", "add", &format!("{CLIENT_IP}/24"), "dev", "eth0"])?;
        client.ip(&["route", "add", "default", "via", "192.0.2.1"])?;
        node.ip(&["addr", "add", "192.0.2.1/24", "dev", EXT_IFACE])?;
        node.ip(&["addr", "add", &format!("{EXTERNAL_IP}/32"), "dev", "lo"])?;
        node.sysctl("net.ipv4.ip_forward", "1")?;
        pod.veth("eth0", &node, POD_IFACE)?;
        pod.ip(&["addr", "add", &format!("{POD_IP}/24"), "dev", "eth0"])?;
        pod.ip(&["route", "add", "default", "via", POD_GATEWAY])?;
        node.ip(&[
            "addr",
            "add",
            &format!("{POD_GATEWAY}/24"),
            "dev",
            POD_IFACE,
        ])?;
        topology::wire_ipv6(&client, &node, &[(&pod, 1, POD_IFACE)])?;
        node.ip(&[
            "link",
            "add",
            CLUSTER_IFACE,
            "type",
            "veth",
            "peer",
            "name",
            "peer0-end",
        ])?;
        node.ip(&["link", "set", CLUSTER_IFACE, "up"])?;
        // Tens of thousands of short connections per run: let the client
        // reuse TIME_WAIT ports and use the whole ephemeral range.
        client.sysctl("net.ipv4.tcp_tw_reuse", "1")?;
        client.sysctl("net.ipv4.ip_local_port_range", "1024 65535")?;
        let mut bed = Self {
            servers: Vec::new(),
            pod,
            node,
            client,
        };
        let iperf = spawn(pinned(&bed.pod, SERVER_CPU, "iperf3").args([
            "-s",
            "-p",
            &IPERF_PORT.to_string(),
        ]))?;
        bed.servers.push(iperf);
        let echo = spawn(
            pinned(&bed.pod, SERVER_CPU, &helper_exe()?)
                .arg("bench-helper")
                .args(["echo", "--listen", &format!("[::]:{ECHO_PORT}")]),
        )?;
        bed.servers.push(echo);
        wait_listening(&bed.pod, IPERF_PORT)?;
        wait_listening(&bed.pod, ECHO_PORT)?;
        Ok(bed)
    }

    /// The index of the node's interface `name` (`ip -o link` in its
    /// namespace: sysfs shows the namespace it was mounted in).
    pub fn node_ifindex(&self, name: &str) -> anyhow::Result<u32> {
        let line = cmd::run(self.node.command("ip").args(["-o", "link", "show", name]))?;
        line.split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("the index of {name} in `{line}`"))
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The pod's servers run on this CPU. Left to the scheduler, a ping-pong's
/// two ends land on the same CPU in one round and on two in the next (an
/// IPI and an idle exit per message), which swings the latency by 4x.
pub const SERVER_CPU: usize = 0;

/// The CPU for load generators that must not compete with the servers
/// (the last one; the same as the server's on a single-CPU machine).
pub fn client_cpu() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) - 1
}

/// `program` inside `ns`, pinned to `cpu` (`taskset`).
pub fn pinned(ns: &NetNs, cpu: usize, program: &str) -> Command {
    let mut c = ns.command("taskset");
    c.args(["-c", &cpu.to_string(), program]);
    c
}

/// `xtask bench-helper ...` inside `ns` (this same binary).
pub fn helper(ns: &NetNs) -> anyhow::Result<Command> {
    let mut c = ns.command(&helper_exe()?);
    c.arg("bench-helper");
    Ok(c)
}

/// This binary's path, for running helpers in namespaces.
pub fn helper_exe() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    Ok(exe.to_str().context("xtask path is not UTF-8")?.to_owned())
}

pub fn spawn(c: &mut Command) -> anyhow::Result<Child> {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {c:?}"))
}

/// Waits (at most 5 s, stretched by `SSH_FWD_TEST_TIME_SCALE` in an
/// emulated guest) until something listens on TCP `port` in `ns`.
pub fn wait_listening(ns: &NetNs, port: u16) -> anyhow::Result<()> {
    let filter = format!("sport = :{port}");
    let up = cmd::wait_until(cmd::scaled(Duration::from_secs(5)), || {
        cmd::run(ns.command("ss").args(["-Hltn", &filter])).is_ok_and(|out| !out.trim().is_empty())
    });
    if !up {
        bail!("nothing listens on port {port} in {}", ns.name());
    }
    Ok(())
}
