//! `cargo xtask bench progs`: what each kernel program costs per packet, by
//! case, through BPF_PROG_TEST_RUN (`bpftool prog run ... repeat N`), run
//! inside a bench bed's node namespace so the route lookups see its routes
//! and neighbours - the Katran way of finding where a data path spends time.
//!
//! A test run with `repeat` runs the program again and again on the same
//! skb, which keeps each iteration's rewrite: a DNATed packet would be a
//! miss from the second iteration on. So the bed's one mapping leads a
//! frontend to itself (the pod's own address and port): every iteration
//! does the full lookup, rewrite, route and redirect, byte for byte the
//! same work as a real hit. Each iteration also decrements the TTL, so the
//! frames start at 255 and a run stays below 250 iterations.

use std::{net::Ipv4Addr, path::Path as FsPath};

use anyhow::{Context as _, bail};
use serde_json::Value;
use ssh_fwd_common::fixtures::Frame;
use ssh_fwd_tests::{Agent, Bpffs, NetNs, agent::write_mappings, cmd, topology::EXT_IFACE};

use super::{
    bed::{self, Bed, ECHO_PORT, POD_IP},
    stats::Summary,
};

const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// A second self-mapping, to an address the node has no route to: the
/// cost of the DNAT and the route lookup without the redirect.
const UNROUTED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
const UNROUTED_PORT: u16 = 2222;
const TC_ACT_UNSPEC: u64 = u32::MAX as u64;
const TC_ACT_REDIRECT: u64 = 7;
/// Iterations per test run: below the 254 a TTL of 255 allows.
const REPEAT: u32 = 200;

/// One packet case: which program, the frame, the verdict it must get.
struct Case {
    what: &'static str,
    program: &'static str,
    frame: Frame,
    verdict: u64,
}

fn cases() -> Vec<Case> {
    let pod: Ipv4Addr = POD_IP.parse().unwrap_or(Ipv4Addr::UNSPECIFIED);
    let from_client = |dport| Frame {
        src: CLIENT,
        dst: pod,
        sport: 40_000,
        dport,
        ttl: 255,
        payload: vec![0; 64],
        ..Frame::default()
    };
    let from_pod = |sport, dport| Frame {
        src: pod,
        dst: CLIENT,
        sport,
        dport,
        ttl: 255,
        payload: vec![0; 64],
        ..Frame::default()
    };
    vec![
        Case {
            what: "request: DNAT, route, redirect into the pod (peer)",
            program: "ssh_fwd_ingress_tc",
            frame: from_client(ECHO_PORT),
            verdict: TC_ACT_REDIRECT,
        },
        Case {
            what: "request: DNAT, route lookup finds no route, to the stack",
            program: "ssh_fwd_ingress_tc",
            frame: Frame {
                dst: UNROUTED,
                ..from_client(UNROUTED_PORT)
            },
            verdict: TC_ACT_UNSPEC,
        },
        Case {
            what: "request to no frontend: one lookup, passed",
            program: "ssh_fwd_ingress_tc",
            frame: from_client(9),
            verdict: TC_ACT_UNSPEC,
        },
        Case {
            what: "reply: reverse NAT, route, redirect out of ext0",
            program: "ssh_fwd_reply_tc",
            frame: from_pod(ECHO_PORT, 40_000),
            verdict: TC_ACT_REDIRECT,
        },
        Case {
            what: "other pod traffic: one lookup, passed",
            program: "ssh_fwd_reply_tc",
            frame: from_pod(40_000, 80),
            verdict: TC_ACT_UNSPEC,
        },
        Case {
            what: "egress, reply already rewritten: one lookup",
            program: "ssh_fwd_egress_tc",
            frame: from_pod(40_000, 80),
            verdict: TC_ACT_UNSPEC,
        },
        Case {
            what: "egress reverse NAT (--pod-ifaces off)",
            program: "ssh_fwd_egress_tc",
            frame: from_pod(ECHO_PORT, 40_000),
            verdict: TC_ACT_UNSPEC,
        },
    ]
}

pub fn run(runs: usize) -> anyhow::Result<()> {
    if let Some(why) = ssh_fwd_tests::privilege::missing() {
        bail!("the benchmark creates namespaces and loads eBPF programs: {why}");
    }
    let bin = crate::build_ssh_fwd_profile(true)?;
    // SAFETY: set before other threads start.
    unsafe { std::env::set_var("SSH_FWD_BIN", &bin) };
    let bed = Bed::new()?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("mappings.yaml");
    let self_mapping = format!("{POD_IP}:{ECHO_PORT}");
    let unrouted = format!("{UNROUTED}:{UNROUTED_PORT}");
    write_mappings(
        &file,
        &[
            ("self", &self_mapping, &self_mapping),
            ("unrouted", &unrouted, &unrouted),
        ],
    )?;
    let bpffs = Bpffs::new()?;
    super::cleanup::remember_bpffs(bpffs.path());
    let agent = Agent::start(&bed.node, &[EXT_IFACE], &file, &bpffs, &["--attach", "tc"])?;
    // One exchange through the path puts both neighbours in the node's
    // tables, as on any node carrying traffic.
    cmd::run(bed::helper(&bed.client)?.args(["ping-pong", "--to", &self_mapping, "--secs", "1"]))
        .context("a first exchange through the path")?;
    let out = dir.path().join("out");
    println!("| case | program | ns/packet (median of {runs} runs of {REPEAT}) | spread |");
    println!("| --- | --- | ---: | ---: |");
    for case in cases() {
        let id = program_id(case.program)?;
        let data = dir.path().join("frame");
        std::fs::write(&data, case.frame.build())?;
        let mut ns = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (verdict, duration) = test_run(&bed.node, id, &data, &out)?;
            if verdict != case.verdict {
                bail!(
                    "{}: verdict {verdict}, expected {} - the bed is not set up as the case assumes",
                    case.what,
                    case.verdict
                );
            }
            ns.push(duration);
        }
        let s = Summary::of(&ns).context("no runs")?;
        println!(
            "| {} | {} | {:.0} | ±{:.0}% |",
            case.what,
            case.program,
            s.median,
            s.spread_pct()
        );
    }
    drop(agent);
    Ok(())
}

/// The id of the newest loaded tc program called `program`: the bed's
/// agent loaded last. (Debian's bpftool lists no tcx attachments.)
fn program_id(program: &str) -> anyhow::Result<u64> {
    let text = cmd::run(std::process::Command::new("bpftool").args(["-j", "prog", "show"]))?;
    let all: Value = serde_json::from_str(&text).context("bpftool prog show output")?;
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "sched_cls" && p["name"] == program)
        .filter_map(|p| p["id"].as_u64())
        .max()
        .with_context(|| format!("no loaded program {program}"))
}

/// One `bpftool prog run`: the verdict and the average ns per iteration.
fn test_run(node: &NetNs, id: u64, data: &FsPath, out: &FsPath) -> anyhow::Result<(u64, f64)> {
    let text = cmd::run(
        node.command("bpftool")
            .args(["-j", "prog", "run", "id", &id.to_string(), "data_in"])
            .arg(data)
            .arg("data_out")
            .arg(out)
            .args(["repeat", &REPEAT.to_string()]),
    )?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("bpftool said {text:?}"))?;
    let verdict = v["retval"].as_u64().context("no retval")?;
    let duration = v["duration"].as_f64().context("no duration")?;
    Ok((verdict, duration))
}
