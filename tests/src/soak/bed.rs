//! The soak's cluster: one layer-2 segment (`segment.rs`) with the client
//! and two nodes, a direct link between the nodes that carries the pod
//! network (so it can be flapped apart from the segment), the fake API
//! server on the bridge's own address, an agent per node with `--announce
//! l2` in Kubernetes mode, and two controller replicas, one per node,
//! electing a leader.
//!
//! ```text
//!  client 192.0.2.2 --+-- br0 192.0.2.250 (fake API) --+-- node0 ext0 192.0.2.10
//!  hammer 192.0.2.3 --+                                 +-- node1 ext0 192.0.2.11
//!  node0 peer 10.0.0.1 <--------------------------------> node1 peer 10.0.0.2
//!  jobs: pod N 10.244.N.5 behind the node it runs on, sshd :22
//! ```

use std::{
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use anyhow::Context as _;

use crate::{
    Agent, Bpffs, NetNs, cmd,
    fake_api::{FakeApi, Kind},
    segment::Segment,
    topology::{EXT_IFACE, EXTERNAL_IP},
};

/// The bridge's own address, where the fake API server listens.
pub const API_IP: &str = "192.0.2.250";
/// The address the per-source hammer connects from.
pub const HAMMER_IP: &str = "192.0.2.3";
/// The link between the nodes, and each node's address on it.
pub const PEER: &str = "peer";
const PEER_IPS: [&str; 2] = ["10.0.0.1", "10.0.0.2"];
/// The pod network each node routes to the other over [`PEER`].
const POD_NET: &str = "10.244.0.0/16";
/// Where agents and controllers serve /metrics, in their node.
pub const AGENT_METRICS: &str = "127.0.0.1:9102";
pub const CONTROLLER_METRICS: &str = "127.0.0.1:9103";
/// The namespace of the Leases and the name of the SSH IP's.
pub const LEASE_NAMESPACE: &str = "ssh-fwd";
pub const ANNOUNCE_LEASE: &str = "ssh-fwd-announce-198-18-0-10";
pub const CONTROLLER_LEASE: &str = "ssh-fwd-controller";
/// The quota of connections per client and node the agents enforce:
/// above what the client's load holds on one node at once (at most its
/// sessions, two logins and a copy), far below the default, so the hammer
/// reaches it with six connections to each of a node's jobs (sshd lets 10
/// unauthenticated ones in).
pub const CONNS_PER_SOURCE: u32 = 16;
/// The first port the controller hands out.
pub const FIRST_PORT: u16 = 20_000;

/// How the bed is sized.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Jobs running at once.
    pub jobs: usize,
}

/// Dropped in order: controllers, agents, their data paths, the API, the
/// hammer's namespace, then the segment.
pub struct Bed {
    pub controllers: [Mutex<Option<Agent>>; 2],
    pub agents: [Mutex<Option<Agent>>; 2],
    pub bpffs: Vec<Bpffs>,
    pub api: FakeApi,
    pub hammer: NetNs,
    pub seg: Segment,
    agent_args: Vec<Vec<String>>,
    controller_args: Vec<Vec<String>>,
    /// Every log an agent or controller wrote (a restart writes a new one).
    logs: Mutex<Vec<PathBuf>>,
    pub dir: PathBuf,
}

impl Bed {
    /// The cluster, the agents and the controllers running; no job yet.
    /// Logs go to `dir`.
    pub fn start(size: Size, dir: &Path) -> anyhow::Result<Self> {
        let seg = Segment::new(2)?;
        seg.switch
            .ip(&["addr", "add", &format!("{API_IP}/24"), "dev", "br0"])?;
        let api = FakeApi::start_at(&seg.switch, API_IP)?;
        link_nodes(&seg)?;
        let hammer = seg.another_host()?;
        hammer.ip(&["addr", "add", &format!("{HAMMER_IP}/24"), "dev", "eth0"])?;
        hammer.ip(&["route", "add", &format!("{EXTERNAL_IP}/32"), "dev", "eth0"])?;
        let bed = Self {
            controllers: Default::default(),
            agents: Default::default(),
            bpffs: vec![Bpffs::new()?, Bpffs::new()?],
            agent_args: (0..2)
                .map(|n| agent_args(&api, dir, n))
                .collect::<anyhow::Result<_>>()?,
            controller_args: (0..2)
                .map(|n| controller_args(&api, dir, n, size))
                .collect::<anyhow::Result<_>>()?,
            api,
            hammer,
            seg,
            logs: Mutex::default(),
            dir: dir.to_owned(),
        };
        bed.start_agent(0)?;
        let took = cmd::wait_until(Duration::from_secs(20), || {
            bed.holder_of(ANNOUNCE_LEASE) == Some(0)
        });
        anyhow::ensure!(took, "node0's agent did not take the SSH IP within 20 s");
        bed.start_agent(1)?;
        bed.start_controller(0)?;
        let leads = cmd::wait_until(Duration::from_secs(20), || {
            bed.holder_of(CONTROLLER_LEASE) == Some(0)
        });
        anyhow::ensure!(leads, "controller ctl0 did not lead within 20 s");
        bed.start_controller(1)?;
        Ok(bed)
    }

    /// Starts node `n`'s agent (in place of the one before, which must
    /// have ended) and waits until it is ready.
    pub fn start_agent(&self, n: usize) -> anyhow::Result<()> {
        let agent = Agent::start_with(
            &self.seg.nodes[n],
            &[EXT_IFACE],
            &self.bpffs[n],
            &self.agent_args[n],
        )
        .with_context(|| format!("starting node{n}'s agent"))?;
        self.logs().push(agent.log_path().to_owned());
        *lock(&self.agents[n]) = Some(agent);
        Ok(())
    }

    /// Starts controller replica `n` (in node `n`) without waiting: it
    /// leads only once the Lease is free.
    pub fn start_controller(&self, n: usize) -> anyhow::Result<()> {
        let mut logs = self.logs();
        let log = (1..)
            .map(|i| self.dir.join(format!("controller{n}-{i}.log")))
            .find(|p| !logs.contains(p))
            .context("a free log name")?;
        let controller =
            Agent::spawn_controller(&self.seg.nodes[n], log.clone(), &self.controller_args[n])?;
        logs.push(log);
        drop(logs);
        *lock(&self.controllers[n]) = Some(controller);
        Ok(())
    }

    fn logs(&self) -> MutexGuard<'_, Vec<PathBuf>> {
        lock(&self.logs)
    }

    /// The process ids of the agents and the controllers now running.
    pub fn pids(&self) -> ([Option<u32>; 2], [Option<u32>; 2]) {
        let pid = |m: &Mutex<Option<Agent>>| lock(m).as_ref().and_then(Agent::pid);
        (
            [pid(&self.agents[0]), pid(&self.agents[1])],
            [pid(&self.controllers[0]), pid(&self.controllers[1])],
        )
    }

    /// The node index (0, 1) the Lease `name` names as its holder.
    pub fn holder_of(&self, name: &str) -> Option<usize> {
        let lease = self.api.get(Kind::Lease, LEASE_NAMESPACE, name)?;
        let holder = lease["spec"]["holderIdentity"].as_str()?;
        ["node0", "node1"]
            .iter()
            .position(|n| *n == holder)
            .or_else(|| ["ctl0", "ctl1"].iter().position(|n| *n == holder))
    }

    /// Puts the pod network's route over the node link back on both
    /// nodes (taking the link down removes it).
    pub fn route_pods(&self) -> anyhow::Result<()> {
        for (n, node) in self.seg.nodes.iter().enumerate() {
            node.ip(&["route", "replace", POD_NET, "via", PEER_IPS[1 - n]])?;
        }
        Ok(())
    }

    /// Copies every log into the soak's directory (the agents' sit in
    /// their state directories, which go when the bed does).
    pub fn keep_logs(&self) -> Vec<PathBuf> {
        let mut kept = Vec::new();
        for log in self.logs().iter() {
            let Some(name) = log.file_name() else {
                continue;
            };
            let to = self.dir.join(name);
            // A controller's log is written there already.
            if *log == to || std::fs::copy(log, &to).is_ok() {
                kept.push(to);
            }
        }
        kept
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for c in &self.controllers {
            lock(c).take();
        }
        for a in &self.agents {
            lock(a).take();
        }
        self.keep_logs();
    }
}

/// The direct link between the nodes, carrying the pod network.
fn link_nodes(seg: &Segment) -> anyhow::Result<()> {
    let [a, b] = [&seg.nodes[0], &seg.nodes[1]];
    a.veth(PEER, b, PEER)?;
    for (n, node) in [a, b].into_iter().enumerate() {
        node.ip(&["addr", "add", &format!("{}/30", PEER_IPS[n]), "dev", PEER])?;
        node.ip(&["route", "add", POD_NET, "via", PEER_IPS[1 - n]])?;
        for key in ["all", "default", PEER, EXT_IFACE] {
            node.sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
        }
    }
    Ok(())
}

/// Node `n`'s agent: Kubernetes mode with a token of its own (so its API
/// connection can be stalled alone), `--announce l2`, the quota, and an
/// idle timeout that sweeps every 3 s (24 s / 8) instead of every 10 s,
/// so a short soak holds as many sweeps as a longer one.
fn agent_args(api: &FakeApi, dir: &Path, n: usize) -> anyhow::Result<Vec<String>> {
    let kubeconfig = dir.join(format!("kubeconfig-node{n}"));
    std::fs::write(&kubeconfig, api.kubeconfig_as(&format!("node{n}")))?;
    Ok([
        "--kubernetes",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--ssh-ip",
        EXTERNAL_IP,
        "--announce",
        "l2",
        "--node-name",
        &format!("node{n}"),
        "--lease-namespace",
        LEASE_NAMESPACE,
        "--metrics-addr",
        AGENT_METRICS,
        "--conns-per-source",
        &CONNS_PER_SOURCE.to_string(),
        "--conn-idle-timeout",
        "24s",
    ]
    .map(str::to_owned)
    .to_vec())
}

/// Controller replica `n`: a port range a few ports larger than the jobs,
/// so churn reuses ports, a short quarantine and a short Lease, so a
/// killed leader is replaced within the soak's fault windows.
fn controller_args(api: &FakeApi, dir: &Path, n: usize, size: Size) -> anyhow::Result<Vec<String>> {
    let kubeconfig = dir.join(format!("kubeconfig-ctl{n}"));
    std::fs::write(&kubeconfig, api.kubeconfig_as(&format!("ctl{n}")))?;
    let last = FIRST_PORT + u16::try_from(size.jobs)? + 3;
    Ok([
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--ssh-ip",
        EXTERNAL_IP,
        "--ssh-user",
        "root",
        "--identity",
        &format!("ctl{n}"),
        "--lease-namespace",
        LEASE_NAMESPACE,
        "--lease-duration",
        "5s",
        "--port-range",
        &format!("{FIRST_PORT}-{last}"),
        "--port-reuse-after",
        "15s",
        "--metrics-addr",
        CONTROLLER_METRICS,
    ]
    .map(str::to_owned)
    .to_vec())
}

/// A lock, whatever a thread that panicked holding it left.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
