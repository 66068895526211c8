//! Shared bits of the end-to-end tests.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Stdio},
    sync::mpsc,
    time::Duration,
};

use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, SshClient, Topology, agent::write_mappings, cluster::Cluster,
    topology::EXT_IFACE,
};

pub const FRONTEND: &str = "198.18.0.10:8022";
pub const EXTERNAL_IP: &str = "198.18.0.10";

/// A topology with an agent on every node, all fed the same mappings file.
pub struct Bed {
    pub agents: Vec<Agent>,
    pub bpffs: Vec<Bpffs>,
    pub mappings: PathBuf,
    pub topo: Topology,
    _dir: tempfile::TempDir,
}

impl Bed {
    pub fn start(
        topo: Topology,
        entries: &[(&str, &str, &str)],
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with(topo, |path| write_mappings(path, entries), extra)
    }

    /// [`Bed::start`] with the mappings file written by `write`, for what
    /// `write_mappings` has no words for (an entry's `allow:`).
    pub fn start_with(
        topo: Topology,
        write: impl FnOnce(&Path) -> anyhow::Result<()>,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ssh-fwd-e2e").tempdir()?;
        let mappings = dir.path().join("mappings.yaml");
        write(&mappings)?;
        let mut bed = Self {
            agents: vec![],
            bpffs: vec![],
            mappings,
            topo,
            _dir: dir,
        };
        for i in 0..bed.topo.nodes.len() {
            bed.bpffs.push(Bpffs::new()?);
            let agent = Agent::start(
                &bed.topo.nodes[i].ns,
                &[EXT_IFACE],
                &bed.mappings,
                &bed.bpffs[i],
                extra,
            )?;
            bed.agents.push(agent);
        }
        Ok(bed)
    }

    /// [`Bed::start`] with `env` (`NAME=VALUE`) in every agent's
    /// environment ([`Agent::start_env`]).
    pub fn start_env(
        topo: Topology,
        entries: &[(&str, &str, &str)],
        env: &[&str],
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ssh-fwd-e2e").tempdir()?;
        let mappings = dir.path().join("mappings.yaml");
        write_mappings(&mappings, entries)?;
        let mut bed = Self {
            agents: vec![],
            bpffs: vec![],
            mappings,
            topo,
            _dir: dir,
        };
        for i in 0..bed.topo.nodes.len() {
            bed.bpffs.push(Bpffs::new()?);
            let agent = Agent::start_env(
                &bed.topo.nodes[i].ns,
                env,
                &[EXT_IFACE],
                &bed.mappings,
                &bed.bpffs[i],
                extra,
            )?;
            bed.agents.push(agent);
        }
        Ok(bed)
    }

    pub fn ssh(&self) -> SshClient {
        self.topo.ssh()
    }

    pub fn client(&self) -> &NetNs {
        &self.topo.client
    }

    /// `hostname` of whatever answers on the external IP and `port`.
    pub fn hostname_via(&self, port: u16) -> anyhow::Result<String> {
        self.ssh().run(self.client(), EXTERNAL_IP, port, "hostname")
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // Agents stop before their bpffs is torn down.
        self.agents.clear();
        self.bpffs.clear();
    }
}

/// An open interactive ssh session: a line sent comes back prefixed.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Session {
    pub fn open(ssh: &SshClient, ns: &NetNs, port: u16) -> anyhow::Result<Self> {
        Self::open_at(ssh, ns, EXTERNAL_IP, port)
    }

    /// [`Session::open`] to the frontend on `host`.
    pub fn open_at(ssh: &SshClient, ns: &NetNs, host: &str, port: u16) -> anyhow::Result<Self> {
        let mut child = ssh
            .command(
                ns,
                host,
                port,
                "while read l; do echo got-$l; done",
                Duration::from_secs(120),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Self {
            child,
            stdin,
            lines,
        };
        s.echo("hello")?;
        Ok(s)
    }

    /// Sends `word` and expects `got-word` back within 10 s.
    pub fn echo(&mut self, word: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{word}")?;
        self.stdin.flush()?;
        let got = self
            .lines
            .recv_timeout(ssh_fwd_tests::cmd::scaled(Duration::from_secs(10)))
            .map_err(|_| anyhow::anyhow!("session did not echo {word:?} within 10 s (scaled)"))?;
        anyhow::ensure!(got == format!("got-{word}"), "unexpected echo {got:?}");
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `PKTS` columns of a mapping in `ssh-fwd list --output json`.
pub fn mapping_counters(bpffs: &Bpffs, frontend: &str) -> anyhow::Result<(u64, u64)> {
    let list = bpffs.list()?;
    let row = list["mappings"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["frontend"] == frontend))
        .ok_or_else(|| anyhow::anyhow!("no mapping {frontend} in {list}"))?;
    Ok((
        row["packets_in"].as_u64().unwrap_or(0),
        row["packets_out"].as_u64().unwrap_or(0),
    ))
}

/// Whether a TCP connect to the external IP and `port` gets no
/// connection within 3 s: a port with no mapping on an SSH IP gets no
/// answer at all (the data path drops it, `unmapped_port`); a segment
/// the programs refuse, a RST.
pub fn refused(ns: &NetNs, port: u16) -> bool {
    !matches!(connect(ns, EXTERNAL_IP, port, 3), Ok(o) if o.status.success())
}

/// Whether a TCP connect from `ns` to `host` (an IPv6 address bare) and
/// `port` is refused (a RST came back).
pub fn refused_at(ns: &NetNs, host: &str, port: u16) -> bool {
    matches!(
        connect(ns, host, port, 5),
        Ok(o) if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("refused")
    )
}

/// A TCP connect from `ns` to `host` and `port`, given up after `secs`.
fn connect(ns: &NetNs, host: &str, port: u16, secs: u32) -> std::io::Result<std::process::Output> {
    ns.command("timeout")
        .args([
            &secs.to_string(),
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/{host}/{port}"),
        ])
        .output()
}

/// 64 MiB of random bytes sent up through the frontend on `host`:8022 and
/// fetched back down, each checked by hash; `what` names the path in the
/// messages.
pub fn copy_64mib_both_ways(bed: &Bed, host: &str, what: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("random.bin");
    ssh_fwd_tests::cmd::run(
        std::process::Command::new("head")
            .args(["-c", "64M", "/dev/urandom"])
            .stdout(std::fs::File::create(&data).expect("data file")),
    )
    .expect("random data");
    let sum = |path: &Path| {
        ssh_fwd_tests::cmd::run(std::process::Command::new("sha256sum").arg(path))
            .expect("sha256sum")[..64]
            .to_owned()
    };
    let expected = sum(&data);
    let ssh = bed.ssh();
    let up = ssh_fwd_tests::cmd::run(
        ssh.command(
            bed.client(),
            host,
            8022,
            "sha256sum",
            Duration::from_secs(120),
        )
        .stdin(std::fs::File::open(&data).expect("data file")),
    )
    .expect("upload");
    assert_eq!(&up[..64], expected, "upload through {what} arrived altered");
    let back = dir.path().join("back.bin");
    ssh_fwd_tests::cmd::run(
        ssh.command(
            bed.client(),
            host,
            8022,
            &format!("cat {}", data.display()),
            Duration::from_secs(120),
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&back).expect("back file")),
    )
    .expect("download");
    assert_eq!(
        sum(&back),
        expected,
        "download through {what} arrived altered"
    );
}

/// The routed two-node [`Cluster`] with an agent on each node, both fed
/// the same mappings.
pub struct ClusterBed {
    pub agents: Vec<Agent>,
    pub bpffs: Vec<Bpffs>,
    pub cluster: Cluster,
    _dir: tempfile::TempDir,
}

impl ClusterBed {
    /// Agents on both nodes of `cluster` with the mappings `entries` and
    /// `extra` flags.
    pub fn start(cluster: Cluster, entries: &[(&str, &str, &str)], extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ssh-fwd-cluster")
            .tempdir()
            .expect("temporary directory");
        let mappings = dir.path().join("mappings.yaml");
        write_mappings(&mappings, entries).expect("mappings file");
        let mut bed = Self {
            agents: vec![],
            bpffs: vec![],
            cluster,
            _dir: dir,
        };
        for i in 0..2 {
            bed.bpffs.push(Bpffs::new().expect("bpffs"));
            let agent = Agent::start(
                &bed.cluster.nodes[i],
                &[EXT_IFACE],
                &mappings,
                &bed.bpffs[i],
                extra,
            )
            .expect("agent starts");
            bed.agents.push(agent);
        }
        bed
    }

    /// The outcome counter `name` on `node`.
    pub fn counter(&self, node: usize, name: &str) -> u64 {
        self.bpffs[node].list().expect("list")["counters"][name]
            .as_u64()
            .unwrap_or(0)
    }
}

impl Drop for ClusterBed {
    fn drop(&mut self) {
        // The agents detach before their bpffs mounts go.
        self.agents.clear();
        self.bpffs.clear();
    }
}

/// What `tcpdump` with `args` (options, then the filter) saw on `iface`
/// of `ns` while `work` ran.
pub fn seen_on(ns: &NetNs, iface: &str, args: &str, work: impl FnOnce()) -> String {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = dir.path().join("seen.txt");
    let status = dir.path().join("tcpdump.txt");
    let mut dump = ns
        .command("timeout")
        .args(["300", "tcpdump", "-l", "-n", "-i", iface])
        .args(args.split_whitespace())
        .stdout(std::fs::File::create(&out).expect("capture file"))
        .stderr(std::fs::File::create(&status).expect("status file"))
        .spawn()
        .expect("tcpdump starts");
    // Capture from the first packet on, or one could go unseen.
    assert!(
        ssh_fwd_tests::cmd::wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&status).is_ok_and(|s| s.contains("listening on"))
        }),
        "tcpdump did not start: {}",
        std::fs::read_to_string(&status).unwrap_or_default()
    );
    let stop = InterruptOnDrop(dump.id());
    work();
    std::thread::sleep(Duration::from_millis(500));
    drop(stop);
    let _ = dump.wait();
    std::fs::read_to_string(out).unwrap_or_default()
}

/// SIGINT to a child however the work beside it ends.
struct InterruptOnDrop(u32);

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.0 as i32, libc::SIGINT) };
    }
}
