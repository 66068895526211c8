//! Upgrading a node in place: the data path an older ssh-fwd (layout v3,
//! without connection tracking) left pinned and attached is taken over by
//! today's agent, and the sessions it was forwarding go on.
//!
//! The older agent is played by its own eBPF object
//! (`tests/fixtures/ssh-fwd-ebpf-v3.o`), loaded, filled and attached as it
//! did: maps pinned under `v3/maps`, tcx links pinned under `v3/links`.

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

use std::{
    io::{BufRead as _, BufReader},
    net::Ipv4Addr,
    path::Path,
    process::Stdio,
    time::Duration,
};

use aya::{
    EbpfLoader,
    maps::{Array, HashMap},
    programs::{LinkOrder, SchedClassifier, TcAttachType, links::FdLink, tc::TcAttachOptions},
};
use common::{EXTERNAL_IP, FRONTEND, Session};
use ssh_fwd_common::maps::{Endpoint, MappingName, NatTarget};
use ssh_fwd_tests::{
    Agent, Bpffs, NetNs, Topology, agent::write_mappings, privilege, topology::EXT_IFACE,
};

const V3_OBJECT: &[u8] = include_bytes!("../fixtures/ssh-fwd-ebpf-v3.o");

/// Loads the v3 object into `node` as the v3 agent did, with one mapping
/// `FRONTEND -> 10.244.1.5:22`, and leaves it attached (pinned) to `ext0`.
fn start_v3_data_path(node: &NetNs, bpffs: &Path) -> anyhow::Result<()> {
    let v3 = bpffs.join("v3");
    let maps = v3.join("maps");
    let links = v3.join("links").join(EXT_IFACE);
    std::fs::create_dir_all(&maps)?;
    std::fs::create_dir_all(&links)?;
    std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<()> {
            node.enter_on_this_thread()?;
            let mut ebpf = EbpfLoader::new()
                .default_map_pin_directory(&maps)
                .load(V3_OBJECT)?;
            let frontend = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
            let backend = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);
            let mut frontends: HashMap<_, Endpoint, NatTarget> =
                HashMap::try_from(ebpf.map_mut("FRONTENDS").unwrap())?;
            frontends.insert(
                frontend,
                NatTarget {
                    endpoint: backend,
                    slot: 0,
                    flags: 0,
                },
                0,
            )?;
            let mut reverse: HashMap<_, Endpoint, NatTarget> =
                HashMap::try_from(ebpf.map_mut("REVERSE").unwrap())?;
            reverse.insert(
                backend,
                NatTarget {
                    endpoint: frontend,
                    slot: 0,
                    flags: 0,
                },
                0,
            )?;
            let mut names: Array<_, MappingName> =
                Array::try_from(ebpf.map_mut("MAPPING_NAMES").unwrap())?;
            names.set(0, MappingName::new("job-a"), 0)?;
            for (program, attach, order, pin) in [
                (
                    "ssh_fwd_egress_tc",
                    TcAttachType::Egress,
                    LinkOrder::last(),
                    "egress-tc",
                ),
                (
                    "ssh_fwd_ingress_tc",
                    TcAttachType::Ingress,
                    LinkOrder::first(),
                    "ingress-tc",
                ),
            ] {
                let prog: &mut SchedClassifier = ebpf.program_mut(program).unwrap().try_into()?;
                prog.load()?;
                let id =
                    prog.attach_with_options(EXT_IFACE, attach, TcAttachOptions::TcxOrder(order))?;
                let link =
                    FdLink::try_from(prog.take_link(id)?).map_err(|e| anyhow::anyhow!("{e}"))?;
                link.pin(links.join(pin))?;
            }
            Ok(())
        })
        .join()
        .unwrap()
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_agent_upgrading_a_v3_node_keeps_its_sessions_and_tracks_them_from_then_on() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    start_v3_data_path(&topo.nodes[0].ns, bpffs.path()).unwrap();
    let ssh = topo.ssh();
    assert_eq!(
        ssh.run(&topo.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1",
        "the v3 data path forwards"
    );
    // Two sessions through v3: one where the client speaks next, one where
    // the server does (its output comes after the upgrade).
    let mut session = Session::open(&ssh, &topo.client, 8022).unwrap();
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
        .spawn()
        .unwrap();
    let mut late_out = BufReader::new(late.stdout.take().unwrap());
    let mut line = String::new();
    late_out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "started",
        "the second session is up through v3"
    );

    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job-a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let agent = Agent::start(&topo.nodes[0].ns, &[EXT_IFACE], &mappings, &bpffs, &[]).unwrap();
    let log = agent.log();
    assert!(
        log.contains("upgrading the data path of an older ssh-fwd"),
        "{log}"
    );
    assert!(log.contains("upgrade done"), "{log}");
    assert!(!log.contains("mapping removed"), "{log}");
    assert!(!bpffs.path().join("v3").exists(), "v3 pins removed");

    // The server speaks first: its segment is adopted and restored.
    line.clear();
    late_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "late-output");
    late.wait().unwrap();
    // The client speaks first: its connection is adopted on the echo.
    session.echo("after-upgrade").unwrap();
    session.echo("again").unwrap();
    let list = bpffs.list().unwrap();
    assert_eq!(
        list["counters"]["conn_adopted"], 2,
        "both sessions are tracked now: {list}"
    );
    assert_eq!(list["tracked_connections"], 2, "{list}");
    // A new login goes through today's data path, handshake tracked.
    assert_eq!(
        ssh.run(&topo.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1"
    );
    session.echo("end").unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_layout_this_version_cannot_take_over_is_refused_with_the_way_out() {
    privilege::require();
    let topo = Topology::single_node(0).unwrap();
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    std::fs::create_dir_all(bpffs.path().join("v2").join("maps")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job-a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs_arg = bpffs.path().display().to_string();
    let mappings_arg = mappings.display().to_string();
    let err = ssh_fwd_tests::agent::run_failing(
        &topo.nodes[0].ns,
        &[
            "agent",
            "--hairpin",
            "off",
            "--iface",
            EXT_IFACE,
            "--mappings",
            &mappings_arg,
            "--bpffs",
            &bpffs_arg,
        ],
    )
    .unwrap();
    assert!(
        err.contains("v2 holds the data path of another ssh-fwd version"),
        "{err}"
    );
    assert!(err.contains("ssh-fwd teardown --bpffs"), "{err}");
    assert!(!bpffs.path().join("v4").exists(), "nothing was changed");
}
