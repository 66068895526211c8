//! What an older release left on a node, played by that release's own
//! eBPF object: loaded with its maps pinned where its agent pinned them,
//! one mapping written, its programs attached to `ext0` through pinned
//! links; and the sessions opened through it before the upgrade.

use anyhow::Context as _;
use std::{
    io::{BufRead as _, BufReader},
    net::Ipv4Addr,
    path::Path,
    process::{Child, ChildStdout, Stdio},
    time::Duration,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap},
    programs::{LinkOrder, SchedClassifier, TcAttachType, links::FdLink, tc::TcAttachOptions},
};
use ssh_fwd_common::maps::{Endpoint, FRONTENDS, MAPPING_NAMES, MappingName, NatTarget, REVERSE};
use ssh_fwd_tests::{Agent, Bpffs, NetNs, Topology, agent::write_mappings, topology::EXT_IFACE};

use crate::common::{EXTERNAL_IP, FRONTEND, Session};

/// The mapping the older agent forwards, and today's agent is given.
const JOB: &str = "job-a";
const BACKEND: &str = "10.244.1.5:22";

/// The external interface's programs, as the older releases name them
/// (their names, not today's: the objects are fixed).
const PROG_INGRESS_TC: &str = "ssh_fwd_ingress_tc";
const PROG_EGRESS_TC: &str = "ssh_fwd_egress_tc";

/// Loads `object` in `node` as an older agent did: its maps pinned in
/// `dir/maps` (`dir` is `<bpffs>/v<layout>`), the mapping
/// `FRONTEND -> BACKEND` written, egress then ingress attached to `ext0`
/// through tcx links pinned in `dir/links/ext0`; then `more` does what
/// else that release's agent did. The object's constants stay as built:
/// they are what an agent with default settings loads. The pins hold
/// everything once this returns.
pub fn start_data_path(
    node: &NetNs,
    object: &[u8],
    dir: &Path,
    more: impl FnOnce(&mut Ebpf) -> anyhow::Result<()> + Send,
) -> anyhow::Result<()> {
    let maps = dir.join("maps");
    let links = dir.join("links").join(EXT_IFACE);
    std::fs::create_dir_all(&maps)?;
    std::fs::create_dir_all(&links)?;
    std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<()> {
            node.enter_on_this_thread()?;
            let mut ebpf = EbpfLoader::new()
                .default_map_pin_directory(&maps)
                .load(object)?;
            write_mapping(&mut ebpf)?;
            // Egress first: replies are handled before the first request.
            attach_tc(
                &mut ebpf,
                PROG_EGRESS_TC,
                EXT_IFACE,
                TcAttachType::Egress,
                LinkOrder::last(),
                &links.join("egress-tc"),
            )?;
            attach_tc(
                &mut ebpf,
                PROG_INGRESS_TC,
                EXT_IFACE,
                TcAttachType::Ingress,
                LinkOrder::first(),
                &links.join("ingress-tc"),
            )?;
            more(&mut ebpf)
        })
        .join()
        .unwrap()
    })
}

/// `FRONTEND -> BACKEND` in slot 0, named `JOB`.
fn write_mapping(ebpf: &mut Ebpf) -> anyhow::Result<()> {
    let frontend = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
    let backend = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    let target = |endpoint| NatTarget {
        endpoint,
        slot: 0,
        flags: 0,
    };
    let mut frontends: HashMap<_, Endpoint, NatTarget> =
        HashMap::try_from(ebpf.map_mut(FRONTENDS).unwrap())?;
    frontends.insert(frontend, target(backend), 0)?;
    let mut reverse: HashMap<_, Endpoint, NatTarget> =
        HashMap::try_from(ebpf.map_mut(REVERSE).unwrap())?;
    reverse.insert(backend, target(frontend), 0)?;
    let mut names: Array<_, MappingName> = Array::try_from(ebpf.map_mut(MAPPING_NAMES).unwrap())?;
    names.set(0, MappingName::new(JOB), 0)?;
    Ok(())
}

/// Attaches the tc program `program` (loaded first if it is not yet) to
/// `iface` in `order`, through a tcx link pinned at `pin`. Runs in the
/// node's namespace.
pub fn attach_tc(
    ebpf: &mut Ebpf,
    program: &str,
    iface: &str,
    attach: TcAttachType,
    order: LinkOrder,
    pin: &Path,
) -> anyhow::Result<()> {
    let prog: &mut SchedClassifier = ebpf.program_mut(program).unwrap().try_into()?;
    if prog.fd().is_err() {
        prog.load()?;
    }
    let id = prog.attach_with_options(iface, attach, TcAttachOptions::TcxOrder(order))?;
    let link = FdLink::try_from(prog.take_link(id)?).map_err(|e| anyhow::anyhow!("{e}"))?;
    link.pin(pin)?;
    Ok(())
}

/// Today's agent on the node, given the older agent's mapping. The
/// mappings file lives as long as the returned directory.
pub fn start_agent(topo: &Topology, bpffs: &Bpffs) -> anyhow::Result<(Agent, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[(JOB, FRONTEND, BACKEND)])?;
    let agent = Agent::start(&topo.nodes[0].ns, &[EXT_IFACE], &mappings, bpffs, &[])?;
    Ok((agent, dir))
}

/// Sessions opened through the older data path before the upgrade: one
/// where the client speaks next, one where the server does (its output
/// comes 8 s after it started, after the upgrade), and one whose server
/// streams output all through the upgrade (a reply the new programs get
/// wrong at any moment of the takeover resets it).
pub struct Sessions {
    pub echo: Session,
    late: Child,
    late_out: BufReader<ChildStdout>,
    stream: Option<std::thread::JoinHandle<anyhow::Result<String>>>,
}

impl Sessions {
    /// A login through the older data path, then the sessions.
    pub fn open(topo: &Topology) -> anyhow::Result<Self> {
        let ssh = topo.ssh();
        let host = ssh.run(&topo.client, EXTERNAL_IP, 8022, "hostname")?;
        anyhow::ensure!(host == "pod-1", "the older data path forwards: {host}");
        let echo = Session::open(&ssh, &topo.client, 8022)?;
        let mut late = ssh
            .command(
                &topo.client,
                EXTERNAL_IP,
                8022,
                "echo started; sleep 8; echo late-output",
                Duration::from_secs(60),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut late_out = BufReader::new(late.stdout.take().unwrap());
        let mut line = String::new();
        late_out.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == "started",
            "the second session is up through the older data path: {line:?}"
        );
        let mut stream = ssh
            .command(
                &topo.client,
                EXTERNAL_IP,
                8022,
                "timeout 6 yes tick; echo; echo stream-done",
                Duration::from_secs(60),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(stream.stdout.take().unwrap());
        line.clear();
        out.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == "tick",
            "the streaming session is up through the older data path: {line:?}"
        );
        let stream = std::thread::spawn(move || -> anyhow::Result<String> {
            let last = out.lines().map_while(Result::ok).last().unwrap_or_default();
            let output = stream.wait_with_output()?;
            anyhow::ensure!(
                output.status.success() && last == "stream-done",
                "the streaming session ended with {} after {last:?}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            Ok(last)
        });
        Ok(Self {
            echo,
            late,
            late_out,
            stream: Some(stream),
        })
    }

    /// The sessions go on: the stream ends as its server ends it, the
    /// server's late output arrives and its session ends cleanly; the
    /// client's lines are echoed.
    pub fn carry_on(&mut self) -> anyhow::Result<()> {
        let stream = self.stream.take().context("carry_on runs once")?;
        stream
            .join()
            .map_err(|_| anyhow::anyhow!("the stream reader panicked"))??;
        let mut line = String::new();
        self.late_out.read_line(&mut line)?;
        anyhow::ensure!(line.trim() == "late-output", "late session said {line:?}");
        let status = self.late.wait()?;
        anyhow::ensure!(status.success(), "late session ended with {status}");
        self.echo.echo("after-upgrade")?;
        self.echo.echo("again")
    }
}
