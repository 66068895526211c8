//! The guard end to end with real OpenSSH: a source outside a mapping's
//! allowlist gets no answer and leaves no state (or with `--deny-action
//! reset`, a refusal at once), a source over its SYN rate
//! is held off while another logs in, and the rate a source gets is the
//! configured one; in Kubernetes mode a Service only narrows the agent's
//! guard (`guard/tenants.rs`). Every connection stays inside the test's
//! namespaces and every loop is bounded in count and time.

mod tenants;

use std::{
    collections::VecDeque,
    net::{Ipv4Addr, SocketAddrV4},
    process::Stdio,
    time::{Duration, Instant},
};

use crate::common::{Bed, EXTERNAL_IP};
use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    pins::PinLayout,
};
use ssh_fwd_tests::{
    Agent, NetNs, Topology, privilege,
    topology::{CLIENT_IP, EXT_IFACE},
};

/// A second client address on the client's link, outside the lists.
const STRANGER_IP: &str = "192.0.2.66";
const GUARDED: &str = "198.18.0.10:8022";
const OPEN: &str = "198.18.0.10:8023";

/// A guarded mapping on 8022 (with `allow`, if any) and an open one on
/// 8023, both to pod 1's sshd.
fn mappings(allow: Option<&str>) -> impl FnOnce(&std::path::Path) -> anyhow::Result<()> {
    let allow = allow.map_or(String::new(), |a| format!(", allow: [{a}]"));
    move |path| {
        let text = format!(
            "mappings:\n\
             - {{name: guarded, frontend: {GUARDED}, backend: 10.244.1.5:22{allow}}}\n\
             - {{name: open, frontend: {OPEN}, backend: 10.244.1.5:22, allow: []}}\n"
        );
        Ok(std::fs::write(path, text)?)
    }
}

/// One node, pod 1, the agent with `extra` flags, and the stranger's
/// address on the client.
fn bed(allow: Option<&str>, extra: &[&str]) -> Bed {
    let bed = Bed::start_with(Topology::single_node(1).unwrap(), mappings(allow), extra).unwrap();
    bed.client()
        .ip(&["addr", "add", &format!("{STRANGER_IP}/24"), "dev", "eth0"])
        .unwrap();
    bed
}

fn stranger() -> Ipv4Addr {
    STRANGER_IP.parse().unwrap()
}

/// The row of `frontend` in `ssh-fwd list mappings -o json`.
fn mapping_row(bed: &Bed, frontend: &str) -> serde_json::Value {
    let list = bed.bpffs[0].list().unwrap();
    list["mappings"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["frontend"] == frontend))
        .cloned()
        .unwrap_or_else(|| panic!("no mapping {frontend} in {list}"))
}

fn global_counter(bed: &Bed, name: &str) -> u64 {
    bed.bpffs[0].list().unwrap()["counters"][name]
        .as_u64()
        .unwrap_or(0)
}

/// Tracked entries of any kind (half-open, claimed, established) whose
/// client is `addr`.
fn state_of(bed: &Bed, addr: Ipv4Addr) -> usize {
    let tables = ConnTables::open_pinned(&PinLayout::new(bed.bpffs[0].path())).unwrap();
    tables
        .entries()
        .iter()
        .filter(|e| match e {
            Entry::Established(k, _) | Entry::HalfOpen(k, _) => k.client().ip() == addr,
            Entry::Claimed(k, _) => k.conn.client().ip() == addr,
        })
        .count()
}

/// What [`connect_flood`] saw.
#[derive(Debug)]
struct Flood {
    tried: u64,
    connected: u64,
    /// From the first connect to the last.
    span: Duration,
}

/// How long a connect may take to complete: well under the first SYN
/// retransmission (1 s), so each attempt is exactly one SYN.
const CONNECT_WAIT: Duration = Duration::from_millis(250);

/// Starts `attempts` non-blocking connects from `from` in `ns` to the
/// external IP's `port`, one every `gap`; each that completes within
/// [`CONNECT_WAIT`] counts, then is closed.
fn connect_flood(
    ns: &NetNs,
    from: Ipv4Addr,
    port: u16,
    attempts: u64,
    gap: Duration,
) -> anyhow::Result<Flood> {
    use socket2::{Domain, Socket, Type};
    let to = SocketAddrV4::new(EXTERNAL_IP.parse()?, port);
    let deadline = Instant::now() + gap * u32::try_from(attempts)? + Duration::from_secs(5);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread()?;
            let mut pending: VecDeque<(Instant, Socket)> = VecDeque::new();
            let (mut tried, mut connected) = (0, 0);
            let first = Instant::now();
            let mut last = first;
            let mut settle = |pending: &mut VecDeque<(Instant, Socket)>, all: bool| {
                while let Some((at, _)) = pending.front() {
                    if !all && at.elapsed() < CONNECT_WAIT {
                        break;
                    }
                    let wait = CONNECT_WAIT.saturating_sub(at.elapsed());
                    std::thread::sleep(wait);
                    if let Some((_, socket)) = pending.pop_front()
                        && socket.peer_addr().is_ok()
                    {
                        connected += 1;
                    }
                }
            };
            while tried < attempts && Instant::now() < deadline {
                let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
                socket.bind(&SocketAddrV4::new(from, 0).into())?;
                socket.set_nonblocking(true)?;
                match socket.connect(&to.into()) {
                    Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                    other => other?,
                }
                last = Instant::now();
                tried += 1;
                pending.push_back((last, socket));
                settle(&mut pending, false);
                std::thread::sleep(gap);
            }
            settle(&mut pending, true);
            Ok(Flood {
                tried,
                connected,
                span: last - first,
            })
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the connecting thread panicked"))?
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_listed_client_logs_in_and_an_unlisted_one_gets_no_answer_and_leaves_no_state() {
    privilege::require();
    let bed = bed(Some(&format!("{CLIENT_IP}/32")), &[]);
    assert_eq!(
        mapping_row(&bed, GUARDED)["allow"],
        serde_json::json!([format!("{CLIENT_IP}/32")])
    );
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "the listed client"
    );

    // Real OpenSSH from the stranger's address: nothing answers its SYNs,
    // so ssh is still waiting when `timeout` ends it (status 124).
    let client = bed.client();
    let via = |src: &str| {
        client
            .ip(&[
                "route",
                "replace",
                "default",
                "via",
                "192.0.2.1",
                "src",
                src,
            ])
            .unwrap();
    };
    via(STRANGER_IP);
    let started = Instant::now();
    let out = bed
        .ssh()
        .command(
            client,
            EXTERNAL_IP,
            8022,
            "hostname",
            Duration::from_secs(3),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(124),
        "ssh from the stranger was still waiting for an answer: {out:?}"
    );
    assert!(waited < Duration::from_secs(6), "bounded: {waited:?}");
    assert_eq!(state_of(&bed, stranger()), 0, "no half-open or claim entry");

    // Its SYN and retransmissions, each counted once, on the guarded
    // mapping only.
    let denied = mapping_row(&bed, GUARDED)["denied"].as_u64().unwrap();
    assert!((1..=4).contains(&denied), "denied {denied}");
    assert_eq!(global_counter(&bed, "denied"), denied);
    assert_eq!(mapping_row(&bed, OPEN)["denied"], 0);

    // The same address through the mapping without a list: the drop was
    // the list's, not the address's.
    assert_eq!(
        bed.ssh()
            .run(client, EXTERNAL_IP, 8023, "hostname")
            .unwrap(),
        "pod-1"
    );
    via(CLIENT_IP);
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "the listed client"
    );
    assert_eq!(
        global_counter(&bed, "denied"),
        denied,
        "nothing else denied"
    );
}

/// A blocking TCP connect from `from` in `ns` to the guarded frontend,
/// given 3 s: its result, and how long it took.
fn connect_from(ns: &NetNs, from: Ipv4Addr) -> (std::io::Result<()>, Duration) {
    connect_to(ns, from, 8022)
}

/// [`connect_from`] to the external IP's `port`.
fn connect_to(ns: &NetNs, from: Ipv4Addr, port: u16) -> (std::io::Result<()>, Duration) {
    use socket2::{Domain, Socket, Type};
    let to = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), port);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread().unwrap();
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind(&SocketAddrV4::new(from, 0).into()).unwrap();
            let started = Instant::now();
            let result = socket.connect_timeout(&to.into(), Duration::from_secs(3));
            (result, started.elapsed())
        })
        .join()
        .unwrap()
    })
}

/// The stranger's connect is answered with a RST (connection refused)
/// within 2 s, not left to time out.
fn refused_at_once(bed: &Bed) {
    let (result, took) = connect_from(bed.client(), stranger());
    let err = result.expect_err("the stranger's connect is refused");
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ECONNREFUSED),
        "refused, not timed out: {err}"
    );
    assert!(took < Duration::from_secs(2), "at once: {took:?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_deny_action_reset_an_unlisted_client_is_refused_at_once_and_a_listed_one_logs_in() {
    privilege::require();
    let mut bed = bed(
        Some(&format!("{CLIENT_IP}/32")),
        &["--deny-action", "reset"],
    );
    refused_at_once(&bed);

    // Real OpenSSH from the stranger's address gives up at once, refused.
    let client = bed.client();
    let via = |src: &str| {
        let default = [
            "route",
            "replace",
            "default",
            "via",
            "192.0.2.1",
            "src",
            src,
        ];
        client.ip(&default).unwrap();
    };
    via(STRANGER_IP);
    let started = Instant::now();
    let out = bed
        .ssh()
        .command(
            client,
            EXTERNAL_IP,
            8022,
            "hostname",
            Duration::from_secs(5),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "ssh failed: {out:?}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(took < Duration::from_secs(2), "at once: {took:?}");
    assert_eq!(state_of(&bed, stranger()), 0, "no half-open or claim entry");
    via(CLIENT_IP);
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "the listed client"
    );

    // One SYN each, each answered: nothing retransmitted.
    assert_eq!(mapping_row(&bed, GUARDED)["denied"], 2);
    assert_eq!(global_counter(&bed, "denied"), 2);
    assert_eq!(global_counter(&bed, "denied_reset"), 2);
    assert_eq!(global_counter(&bed, "reset_failed"), 0);

    // An agent started with `drop` on the same pins replaces the programs:
    // the stranger hears nothing again.
    bed.agents[0].stop().unwrap();
    let (ns, ifaces) = (&bed.topo.nodes[0].ns, [EXT_IFACE]);
    bed.agents[0] = Agent::start(ns, &ifaces, &bed.mappings, &bed.bpffs[0], &[]).unwrap();
    bed.agents[0]
        .wait_for_log("--deny-action changed", Duration::from_secs(5))
        .unwrap();
    let (result, _) = connect_from(bed.client(), stranger());
    let err = result.expect_err("the stranger's connect gets no answer");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert_eq!(global_counter(&bed, "denied_reset"), 2, "none answered");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn with_native_xdp_the_reset_is_sent_back_by_the_driver() {
    privilege::require();
    let bed = bed(
        Some(&format!("{CLIENT_IP}/32")),
        &["--deny-action", "reset", "--attach", "xdp"],
    );
    // Native, not generic XDP: XDP_TX is the driver's then.
    let hooks = bed.bpffs[0].list_of("hooks").unwrap();
    assert!(
        hooks
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["iface"] == EXT_IFACE && h["hook"] == "ingress-xdp"),
        "{hooks}"
    );
    // A veth hands what native XDP sends back with XDP_TX only to a peer
    // that runs XDP itself: the client's end gets a program (an agent with
    // no mappings), as a NIC's transmit ring would take it.
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none.yaml");
    std::fs::write(&none, "mappings: []\n").unwrap();
    let client_bpffs = ssh_fwd_tests::Bpffs::new().unwrap();
    let mut peer = Agent::start(
        bed.client(),
        &["eth0"],
        &none,
        &client_bpffs,
        &["--attach", "xdp"],
    )
    .unwrap();
    refused_at_once(&bed);
    assert_eq!(global_counter(&bed, "denied_reset"), 1);
    assert_eq!(global_counter(&bed, "reset_failed"), 0);
    assert_eq!(state_of(&bed, stranger()), 0, "no half-open or claim entry");
    assert_eq!(
        bed.hostname_via(8022).unwrap(),
        "pod-1",
        "the listed client"
    );
    peer.stop().unwrap();
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_source_over_its_syn_rate_is_held_off_while_another_logs_in() {
    privilege::require();
    let bed = bed(None, &["--syn-rate", "1/s", "--syn-burst", "3"]);
    let row = mapping_row(&bed, GUARDED);
    assert_eq!(
        (row["syn_rate"].as_str(), row["syn_burst"].as_u64()),
        (Some("1/s"), Some(3))
    );
    // Twenty connects within 20 ms: the burst gets through, the rest wait
    // for a SYN-ACK that never comes.
    let burst =
        connect_flood(bed.client(), stranger(), 8022, 20, Duration::from_millis(1)).unwrap();
    // The burst, and at most one more: two CPUs may take the last token at
    // once.
    assert_eq!(burst.tried, 20);
    assert!((3..=4).contains(&burst.connected), "{burst:?}");
    // Another source's bucket is its own.
    assert_eq!(bed.hostname_via(8022).unwrap(), "pod-1");
    let limited = mapping_row(&bed, GUARDED)["syn_limited"].as_u64().unwrap();
    assert_eq!(
        limited,
        20 - burst.connected,
        "each held-off SYN counted once"
    );
    assert_eq!(global_counter(&bed, "syn_limited"), limited);
    assert_eq!(mapping_row(&bed, OPEN)["syn_limited"], 0);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_source_connecting_ten_times_its_rate_gets_the_rate_and_its_burst() {
    privilege::require();
    const RATE: f64 = 20.0;
    const BURST: f64 = 40.0;
    let bed = bed(None, &["--syn-rate", "20/s"]);
    assert_eq!(mapping_row(&bed, GUARDED)["syn_burst"], 40);
    // About 200 connects a second for about 3.5 s.
    let flood = connect_flood(
        bed.client(),
        stranger(),
        8022,
        700,
        Duration::from_millis(5),
    )
    .unwrap();
    let expected = BURST + RATE * flood.span.as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "counts of a few hundred")]
    let (tried, got) = (flood.tried as f64, flood.connected as f64);
    let limited = mapping_row(&bed, GUARDED)["syn_limited"].as_u64().unwrap();
    println!(
        "offered {tried} SYNs in {:.3} s ({:.0}/s): {got} accepted, {expected:.1} expected \
         ({:+.1}%), {limited} limited",
        flood.span.as_secs_f64(),
        tried / flood.span.as_secs_f64(),
        100.0 * (got - expected) / expected,
    );
    assert!(tried / flood.span.as_secs_f64() > 5.0 * RATE, "{flood:?}");
    assert!(
        (got - expected).abs() <= expected / 10.0,
        "accepted {got}, expected {expected:.1} within 10%"
    );
    assert_eq!(
        limited + flood.connected,
        flood.tried,
        "every SYN either accepted or counted as limited"
    );
}
