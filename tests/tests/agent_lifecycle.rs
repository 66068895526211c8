//! The agent's contract: reloads apply only the difference, bad files change
//! nothing, restarts keep sessions, teardown removes everything.

use std::time::Duration;

use crate::common::{Bed, FRONTEND, Session, refused};
use ssh_fwd_tests::{Agent, Topology, agent::write_mappings, privilege, topology::EXT_IFACE};

/// `pods` pods with sshd and an agent mapping 198.18.0.10:8022 to pod 1.
fn one_mapping_bed(pods: usize, extra: &[&str]) -> Bed {
    Bed::start(
        Topology::single_node(pods).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        extra,
    )
    .unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn mapping_added_and_removed_while_running_reaches_the_data_path() {
    privilege::require();
    let mut bed = one_mapping_bed(2, &[]);
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    assert!(refused(bed.client(), 8023), "8023 is not mapped yet");

    // Add: the file changes, the agent notices on its own.
    write_mappings(
        &bed.mappings,
        &[
            ("a", FRONTEND, "10.244.1.5:22"),
            ("b", "198.18.0.10:8023", "10.244.2.5:22"),
        ],
    )
    .unwrap();
    bed.agents[0]
        .wait_for_log_count("mapping added", 2, Duration::from_secs(10))
        .unwrap();
    assert_eq!(bed.hostname_via(8023).unwrap(), "pod-2");
    session.echo("after-add").unwrap();

    // Remove b, and reload with SIGHUP this time.
    write_mappings(&bed.mappings, &[("a", FRONTEND, "10.244.1.5:22")]).unwrap();
    bed.agents[0].hangup();
    bed.agents[0]
        .wait_for_log("mapping removed", Duration::from_secs(10))
        .unwrap();
    assert!(
        refused(bed.client(), 8023),
        "8023 must be closed after removal"
    );
    session.echo("after-remove").unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn bad_mappings_file_is_rejected_and_running_maps_stay() {
    privilege::require();
    let mut bed = one_mapping_bed(1, &[]);
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    std::fs::write(
        &bed.mappings,
        "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:0\n",
    )
    .unwrap();
    bed.agents[0]
        .wait_for_log_count("mappings file rejected", 1, Duration::from_secs(10))
        .unwrap();
    assert!(
        bed.agents[0]
            .log()
            .contains("entry #1: backend `10.244.1.5:0` has port 0"),
        "{}",
        bed.agents[0].log()
    );
    std::fs::write(&bed.mappings, "").unwrap();
    bed.agents[0]
        .wait_for_log_count("mappings file rejected", 2, Duration::from_secs(10))
        .unwrap();
    assert!(
        bed.agents[0].log().contains("is empty"),
        "{}",
        bed.agents[0].log()
    );
    session.echo("still-here").unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    assert_eq!(bed.agents[0].count_in_log("mapping removed"), 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn ssh_session_survives_an_agent_restart() {
    privilege::require();
    let mut bed = one_mapping_bed(1, &[]);
    let mut session = Session::open(&bed.ssh(), bed.client(), 8022).unwrap();
    bed.agents[0].stop().unwrap();
    // Agent down: the pinned data path keeps forwarding, old and new sessions.
    session.echo("agent-down").unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let agent = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &[],
    )
    .unwrap();
    assert!(
        agent.log().contains("adopted the pinned maps"),
        "{}",
        agent.log()
    );
    assert!(!agent.log().contains("mapping removed"), "{}", agent.log());
    bed.agents[0] = agent;
    session.echo("agent-back").unwrap();
    // A restart in another attach mode swaps the program under the session.
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(
        &bed.topo.nodes[0].ns,
        &[EXT_IFACE],
        &bed.mappings,
        &bed.bpffs[0],
        &["--attach", "xdp"],
    )
    .unwrap();
    session.echo("new-hook").unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn teardown_removes_the_data_path() {
    privilege::require();
    let mut bed = one_mapping_bed(1, &["--attach", "xdp"]);
    bed.agents[0].stop().unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    ssh_fwd_tests::cmd::run(
        std::process::Command::new(bin)
            .arg("teardown")
            .arg("--bpffs")
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    // Gone when teardown returns, not some time later: unpinning alone
    // releases a link only after an RCU grace period and a work item.
    let link = ssh_fwd_tests::cmd::run(
        bed.topo.nodes[0]
            .ns
            .command("ip")
            .args(["link", "show", EXT_IFACE]),
    )
    .unwrap();
    assert!(!link.contains("xdp"), "XDP still attached: {link}");
    assert!(
        refused(bed.client(), 8022),
        "after teardown the node itself answers, with a RST"
    );
    assert!(bed.bpffs[0].list().is_err(), "maps still pinned");
}

/// deploy/uninstall's teardown, with only the capabilities its pod is
/// granted, removes the data path as root's does, and returns once the
/// programs are detached.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn teardown_with_the_uninstall_pods_capabilities_removes_the_data_path() {
    privilege::require();
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/uninstall/teardown-daemonset.yaml"),
    )
    .unwrap();
    let daemonset: serde_json::Value = serde_saphyr::from_str(&manifest).unwrap();
    let init = &daemonset["spec"]["template"]["spec"]["initContainers"][0];
    let caps: String = (init["securityContext"]["capabilities"]["add"].as_array())
        .unwrap()
        .iter()
        .map(|c| format!(",+{}", c.as_str().unwrap().to_lowercase()))
        .collect();
    assert!(!caps.is_empty());
    let mut bed = one_mapping_bed(1, &["--attach", "xdp"]);
    bed.agents[0].stop().unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    let said = ssh_fwd_tests::cmd::run(
        std::process::Command::new("setpriv")
            .args([
                "--bounding-set",
                &format!("-all{caps}"),
                "--inh-caps",
                "-all",
                "--",
            ])
            .arg(bin)
            .arg("teardown")
            .arg("--bpffs")
            .arg(bed.bpffs[0].path()),
    )
    .unwrap();
    // It could check that the kernel let go of the links before it
    // returned (listing them needs CAP_SYS_ADMIN).
    assert!(!said.contains("cannot list"), "{said}");
    let link = ssh_fwd_tests::cmd::run(
        bed.topo.nodes[0]
            .ns
            .command("ip")
            .args(["link", "show", EXT_IFACE]),
    )
    .unwrap();
    assert!(!link.contains("xdp"), "XDP still attached: {link}");
    assert!(
        refused(bed.client(), 8022),
        "after teardown the node itself answers, with a RST"
    );
    assert!(bed.bpffs[0].list().is_err(), "maps still pinned");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn agent_errors_name_the_problem() {
    privilege::require();
    let topo = Topology::single_node(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    write_mappings(&file, &[("a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = ssh_fwd_tests::Bpffs::new().unwrap();
    let node = &topo.nodes[0].ns;
    let args = |iface: &'static str, file: &std::path::Path| -> Vec<String> {
        vec![
            "agent".into(),
            "--external-iface".into(),
            iface.into(),
            "--mappings".into(),
            file.display().to_string(),
            "--bpffs".into(),
            bpffs.path().display().to_string(),
            // Never the machine's cgroup, should a check let it through.
            "--hairpin".into(),
            "off".into(),
            // A missing interface fails at once, not after waiting for it.
            "--iface-wait".into(),
            "0s".into(),
        ]
    };
    let run = |a: Vec<String>| {
        ssh_fwd_tests::agent::run_failing(node, &a.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap()
    };

    let e = run(args("eth9", &file));
    assert!(
        e.contains("interface eth9 does not exist in this network namespace"),
        "{e}"
    );
    let e = run(args(EXT_IFACE, &dir.path().join("missing.yaml")));
    assert!(
        e.contains("cannot read mappings file") && e.contains("missing.yaml"),
        "{e}"
    );
    // Root without the BPF capabilities (dropped from the bounding set).
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    let out = node
        .command("setpriv")
        .args(["--bounding-set", "-bpf,-perfmon,-sys_admin", "--"])
        .arg(&bin)
        .args(args(EXT_IFACE, &file))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        e.contains("missing capabilities: CAP_BPF (to load programs and create maps), CAP_PERFMON"),
        "{e}"
    );
    std::fs::write(
        &file,
        "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n    port: 3\n",
    )
    .unwrap();
    let e = run(args(EXT_IFACE, &file));
    assert!(e.contains("unknown field `port`"), "{e}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn entry_deleted_behind_the_agents_back_returns_at_the_next_resync() {
    privilege::require();
    let bed = one_mapping_bed(1, &["--resync-interval", "1s"]);
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    // Key of 198.18.0.10:8022 in FRONTENDS: address and port in wire order.
    let map = bed.bpffs[0].path().join(format!(
        "v{}/maps/FRONTENDS",
        ssh_fwd_common::maps::LAYOUT_VERSION
    ));
    ssh_fwd_tests::cmd::run(
        std::process::Command::new("bpftool")
            .args(["map", "delete", "pinned"])
            .arg(&map)
            .args(["key", "hex", "c6", "12", "00", "0a", "1f", "56", "00", "00"]),
    )
    .unwrap();
    let mappings =
        |b: &ssh_fwd_tests::Bpffs| b.list().unwrap()["mappings"].as_array().map_or(0, Vec::len);
    assert_eq!(mappings(&bed.bpffs[0]), 0, "the entry is gone");
    assert!(
        ssh_fwd_tests::cmd::wait_until(Duration::from_secs(10), || mappings(&bed.bpffs[0]) == 1),
        "the resync did not restore the entry"
    );
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_second_agent_on_the_same_bpffs_exits_naming_the_first_and_teardown_waits_for_it() {
    privilege::require();
    let mut bed = one_mapping_bed(1, &[]);
    let first = bed.agents[0].pid().unwrap();
    let bpffs = bed.bpffs[0].path().display().to_string();
    let mappings = bed.mappings.display().to_string();
    let node = &bed.topo.nodes[0].ns;
    // Bounded: without the lock the second agent would run on for good.
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    let bin = bin.to_str().unwrap();
    let e = ssh_fwd_tests::agent::run_failing_as(
        node,
        "timeout",
        &[
            "20",
            bin,
            "agent",
            "--hairpin",
            "off",
            "--external-iface",
            EXT_IFACE,
            "--mappings",
            &mappings,
            "--bpffs",
            &bpffs,
        ],
    )
    .unwrap();
    assert!(
        e.contains("another ssh-fwd agent is running on --bpffs")
            && e.contains(&format!("pid {first}")),
        "{e}"
    );
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "the first one goes on"
    );
    let e = ssh_fwd_tests::agent::run_failing(node, &["teardown", "--bpffs", &bpffs]).unwrap();
    assert!(
        e.contains("an ssh-fwd agent is running") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "teardown removed nothing"
    );
    // --force removes it under the running agent. The agent puts the data
    // path back at its next pod scan (every 2 s), so it is held stopped
    // (still holding its lock) until the port is seen refused; the kernel
    // detaches an unpinned link a moment after teardown sees its id gone,
    // and the agent still holds the programs teardown could wait on.
    let signal = |sig: &str| {
        ssh_fwd_tests::cmd::run(std::process::Command::new("kill").args([sig, &first.to_string()]))
            .unwrap();
    };
    signal("-STOP");
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    ssh_fwd_tests::cmd::run(
        std::process::Command::new(&bin).args(["teardown", "--force", "--bpffs", &bpffs]),
    )
    .unwrap();
    let closed =
        ssh_fwd_tests::cmd::wait_until(Duration::from_secs(10), || refused(bed.client(), 8022));
    signal("-CONT");
    assert!(closed, "the port still forwards after teardown --force");
    // Once the agent is gone, the lock is too: a new agent starts.
    bed.agents[0].stop().unwrap();
    bed.agents[0] = Agent::start(node, &[EXT_IFACE], &bed.mappings, &bed.bpffs[0], &[]).unwrap();
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
}

/// `--bpffs` as it is by default: a directory on a bpf filesystem mounted
/// already (/sys/fs/bpf/ssh-fwd), which the agent makes but does not mount.
fn nested_root(bpffs: &ssh_fwd_tests::Bpffs) -> String {
    bpffs.mount().unwrap();
    bpffs.path().join("ssh-fwd").display().to_string()
}

/// `ssh-fwd agent` on `root`, expected to be refused; its stderr. Bounded:
/// an agent that is not refused runs on until `timeout` ends it.
fn second_agent_refused(node: &ssh_fwd_tests::NetNs, mappings: &str, root: &str) -> String {
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    ssh_fwd_tests::agent::run_failing_as(
        node,
        "timeout",
        &[
            "20",
            bin.to_str().unwrap(),
            "agent",
            "--hairpin",
            "off",
            "--external-iface",
            EXT_IFACE,
            "--mappings",
            mappings,
            "--bpffs",
            root,
        ],
    )
    .unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn teardown_force_under_an_agent_keeps_its_locked_directory_so_no_second_agent_starts() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("m.yaml");
    write_mappings(&mappings, &[("a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = ssh_fwd_tests::Bpffs::new().unwrap();
    let root = nested_root(&bpffs);
    let mut first =
        Agent::start(node, &[EXT_IFACE], &mappings, &bpffs, &["--bpffs", &root]).unwrap();
    let bin = ssh_fwd_tests::agent::binary().unwrap();
    ssh_fwd_tests::cmd::run(
        std::process::Command::new(&bin).args(["teardown", "--force", "--bpffs", &root]),
    )
    .unwrap();
    assert!(
        std::path::Path::new(&root).is_dir(),
        "teardown --force removed the directory the running agent holds locked"
    );
    let e = second_agent_refused(node, &mappings.display().to_string(), &root);
    assert!(
        e.contains("another ssh-fwd agent is running on --bpffs")
            && e.contains(&format!("pid {}", first.pid().unwrap())),
        "{e}"
    );
    // Without an agent, teardown removes the directory too.
    first.stop().unwrap();
    ssh_fwd_tests::cmd::run(std::process::Command::new(&bin).args(["teardown", "--bpffs", &root]))
        .unwrap();
    assert!(!std::path::Path::new(&root).exists());
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_agent_whose_directory_is_removed_and_made_again_never_shares_it_with_a_second_agent() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("m.yaml");
    write_mappings(&mappings, &[("a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = ssh_fwd_tests::Bpffs::new().unwrap();
    let root = nested_root(&bpffs);
    let args: Vec<String> = [
        "--mappings",
        mappings.to_str().unwrap(),
        "--bpffs",
        &root,
        "--resync-interval",
        "1s",
    ]
    .map(Into::into)
    .into();
    let hostname = || {
        topo.ssh()
            .run(&topo.client, crate::common::EXTERNAL_IP, 8022, "hostname")
            .is_ok_and(|h| h == "pod-1")
    };
    let first = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    let first_pid = first.pid().unwrap();

    // `rm -rf` of the directory: the agent makes it again, locks it, and
    // puts its pins back; a second agent is refused there.
    remove_racing_the_agent(&root);
    assert!(ssh_fwd_tests::cmd::wait_until(
        Duration::from_secs(10),
        hostname
    ));
    let e = second_agent_refused(node, mappings.to_str().unwrap(), &root);
    assert!(e.contains(&format!("pid {first_pid}")), "{e}");
    assert!(first.log().contains("is locked again"), "{}", first.log());

    // Removed again while the agent cannot look (stopped), and a second
    // agent takes the new directory: the first gives way at once it runs,
    // naming the second, and never writes beside it.
    a_second_agent_takes_the_directory_of_a_stopped_one(
        node,
        &bpffs,
        &args,
        &root,
        first,
        "both agents run on one directory",
        |second_pid| {
            assert!(ssh_fwd_tests::cmd::wait_until(
                Duration::from_secs(10),
                hostname
            ));
            let status: serde_json::Value = serde_json::from_str(
                &ssh_fwd_tests::cmd::run(
                    std::process::Command::new(ssh_fwd_tests::agent::binary().unwrap())
                        .args(["status", "-o", "json", "--bpffs", &root]),
                )
                .unwrap(),
            )
            .unwrap();
            assert_eq!(status["pid"], second_pid, "{status}");
        },
    );
}

/// `rm -rf root` while the agent running on it makes it again: a walk
/// that finds a directory the agent filled meanwhile fails with ENOTEMPTY,
/// and is run again (bounded) until one goes through.
fn remove_racing_the_agent(root: &str) {
    let mut last = None;
    let removed = ssh_fwd_tests::cmd::wait_until(Duration::from_secs(5), || {
        match std::fs::remove_dir_all(root) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => {
                last = Some(e);
                false
            }
        }
    });
    assert!(removed, "removing {root}: {last:?}");
}

/// Stops `first` (SIGSTOP), removes its directory `root`, starts a second
/// agent there with the same `args`, and lets `first` run again: it must
/// exit, naming the second (`failure` says what it is if it does not),
/// and the second run on. Then `meanwhile`, given the second's pid, with
/// the second still running; then the second's stop and the teardown.
fn a_second_agent_takes_the_directory_of_a_stopped_one(
    node: &ssh_fwd_tests::NetNs,
    bpffs: &ssh_fwd_tests::Bpffs,
    args: &[String],
    root: &str,
    mut first: Agent,
    failure: &str,
    meanwhile: impl FnOnce(u32),
) {
    let first_pid = first.pid().unwrap();
    // SAFETY: signalling a child of this test.
    unsafe { libc::kill(first_pid as i32, libc::SIGSTOP) };
    std::fs::remove_dir_all(root).unwrap();
    let mut second = Agent::start_with(node, &[EXT_IFACE], bpffs, args).unwrap();
    let second_pid = second.pid().unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(first_pid as i32, libc::SIGCONT) };
    assert!(
        ssh_fwd_tests::cmd::wait_until(Duration::from_secs(10), || {
            first.exited().unwrap().is_some()
        }),
        "{failure}:\n{}",
        first.log()
    );
    assert!(
        first.log().contains(&format!(
            "another ssh-fwd process holds it now (pid {second_pid}, ssh-fwd agent"
        )),
        "{}",
        first.log()
    );
    assert!(second.exited().unwrap().is_none(), "{}", second.log());
    meanwhile(second_pid);
    second.stop().unwrap();
    ssh_fwd_tests::cmd::run(
        std::process::Command::new(ssh_fwd_tests::agent::binary().unwrap())
            .args(["teardown", "--bpffs", root]),
    )
    .unwrap();
}

/// The pod scan (every 2 s) finds the lock lost long before a resync would:
/// the displaced agent exits at once, naming the agent that holds the
/// directory now, instead of warning and running on beside it.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_agent_whose_directory_another_agent_took_exits_at_its_next_pod_scan() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let node = &topo.nodes[0].ns;
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("m.yaml");
    write_mappings(&mappings, &[("a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs = ssh_fwd_tests::Bpffs::new().unwrap();
    let root = nested_root(&bpffs);
    let args: Vec<String> = [
        "--mappings",
        mappings.to_str().unwrap(),
        "--bpffs",
        &root,
        "--resync-interval",
        "1h",
    ]
    .map(Into::into)
    .into();
    let first = Agent::start_with(node, &[EXT_IFACE], &bpffs, &args).unwrap();
    a_second_agent_takes_the_directory_of_a_stopped_one(
        node,
        &bpffs,
        &args,
        &root,
        first,
        "the displaced agent runs on beside the new one",
        |_| {},
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn max_mappings_sizes_the_tables_and_a_restart_asking_another_size_is_refused_with_the_way_out() {
    use aya::maps::MapInfo;
    use ssh_fwd::datapath::pins::PinLayout;
    use ssh_fwd_common::maps::{FRONTENDS, MAPPING_NAMES, MAPPING_STATS, REVERSE};

    privilege::require();
    let three = [
        ("a", FRONTEND, "10.244.1.5:22"),
        ("b", "198.18.0.10:8023", "10.244.1.5:22"),
        ("c", "198.18.0.10:8024", "10.244.1.5:22"),
    ];
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &three,
        &["--max-mappings", "3"],
    )
    .unwrap();
    let mut session = Session::open(&bed.ssh(), bed.client(), 8024).unwrap();
    let layout = PinLayout::new(bed.bpffs[0].path());
    for map in [FRONTENDS, REVERSE, MAPPING_NAMES, MAPPING_STATS] {
        let info = MapInfo::from_pin(layout.map(map)).unwrap();
        assert_eq!(info.max_entries(), 3, "{map}");
    }
    // A fourth does not fit: the file is refused whole, naming the flag.
    let mut four = three.to_vec();
    four.push(("d", "198.18.0.10:8025", "10.244.1.5:22"));
    write_mappings(&bed.mappings, &four).unwrap();
    bed.agents[0]
        .wait_for_log_count("mappings file rejected", 1, Duration::from_secs(10))
        .unwrap();
    let log = bed.agents[0].log();
    assert!(
        log.contains("4 mappings, 1 more than this node holds (--max-mappings 3)"),
        "{log}"
    );
    assert!(refused(bed.client(), 8025));
    session.echo("still-three").unwrap();
    // Restarted with another size, the agent refuses the pinned tables and
    // says how to keep them or how to resize; forwarding goes on.
    write_mappings(&bed.mappings, &three).unwrap();
    bed.agents[0].stop().unwrap();
    let node = &bed.topo.nodes[0].ns;
    let mappings = bed.mappings.display().to_string();
    let root = bed.bpffs[0].path().display().to_string();
    let e = ssh_fwd_tests::agent::run_failing(
        node,
        &[
            "agent",
            "--external-iface",
            EXT_IFACE,
            "--mappings",
            &mappings,
            "--bpffs",
            &root,
            "--hairpin",
            "off",
            "--max-mappings",
            "4",
        ],
    )
    .unwrap();
    assert!(
        e.contains("holds 3 entries, but --max-mappings asks for 4")
            && e.contains("start the agent with --max-mappings 3")
            && e.contains("ssh-fwd teardown"),
        "{e}"
    );
    session.echo("after-refusal").unwrap();
    assert_eq!(bed.hostname_via(8023).unwrap(), "pod-1");
}
