//! `cargo xtask demo`: a real ssh login through the forwarder.

use std::{path::Path, process::Command};

use anyhow::Context as _;
use ssh_fwd_tests::{Agent, Bpffs, Topology, agent::write_mappings, cmd, topology::EXT_IFACE};

use crate::build_ssh_fwd;

const FRONTEND_PORT: u16 = 8022;

pub fn run() -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        anyhow::bail!("the demo creates network namespaces and loads eBPF programs: {why}");
    }
    let bin = build_ssh_fwd()?;
    // SAFETY: setenv before any other thread exists.
    unsafe { std::env::set_var("SSH_FWD_BIN", &bin) };
    // Ctrl-C: clean up what this process created, then exit.
    ctrlc::set_handler(|| {
        eprintln!("\ninterrupted: removing the demo's namespaces and maps");
        ssh_fwd_tests::netns::remove_all_of_this_process();
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;
    let result = demo(&bin);
    println!("==> removing everything the demo created");
    result
}

fn demo(bin: &Path) -> anyhow::Result<()> {
    println!(
        "==> creating namespaces: client (192.0.2.2) -> node (external IP 198.18.0.10, ext0) -> pod (10.244.1.5, sshd :22)"
    );
    let topo = Topology::single_node(1)?;
    let dir = tempfile::Builder::new().prefix("ssh-fwd-demo").tempdir()?;
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(
        &mappings,
        &[("job-4711", "198.18.0.10:8022", "10.244.1.5:22")],
    )?;
    println!(
        "==> mappings file:\n{}",
        std::fs::read_to_string(&mappings)?.trim_end()
    );
    let bpffs = Bpffs::new()?;
    println!(
        "==> starting: ssh-fwd agent --iface {EXT_IFACE} --mappings {} (in the node namespace)",
        mappings.display()
    );
    let agent = Agent::start(&topo.nodes[0].ns, &[EXT_IFACE], &mappings, &bpffs, &[])?;
    for line in agent
        .log()
        .lines()
        .filter(|l| l.contains("attach mode chosen") || l.contains("mapping added"))
    {
        println!("    agent: {}", summarize(line));
    }
    println!("==> from the client: ssh -p {FRONTEND_PORT} root@198.18.0.10 hostname");
    let answer = topo
        .ssh()
        .run(&topo.client, "198.18.0.10", FRONTEND_PORT, "hostname")?;
    println!("    {answer}");
    anyhow::ensure!(
        answer == "pod-1",
        "expected the pod's hostname pod-1, got {answer:?}"
    );
    println!("==> ssh-fwd list (read from the pinned maps on the node)");
    let listing = cmd::run(
        Command::new(bin)
            .arg("list")
            .arg("--bpffs")
            .arg(bpffs.path()),
    )?;
    for line in listing.lines() {
        println!("    {line}");
    }
    drop(agent);
    Ok(())
}

/// The interesting fields of one JSON log line.
fn summarize(line: &str) -> String {
    let field = |name: &str| {
        line.split(&format!("\"{name}\":\""))
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("")
            .to_owned()
    };
    let msg = field("message");
    match field("frontend").as_str() {
        "" => msg,
        frontend => format!("{msg}: {frontend} -> {}", field("backend")),
    }
}
