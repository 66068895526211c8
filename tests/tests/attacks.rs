//! Attacks on the connection state from the attacker's seat, end to end
//! with real OpenSSH: a client that completes handshakes from its own,
//! real address with ACKs the pod never accepts (a wrong checksum, a TTL
//! that expires at the node) or with valid ones and nothing after; a
//! spoofed SYN flood while clients take their time to complete their
//! handshakes; a pod on the node that speaks for another pod. Every attack
//! stays inside the test's namespaces and is bounded in count and time.

use std::{
    io::Read as _,
    net::{Ipv4Addr, SocketAddrV4},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use crate::common::{EXTERNAL_IP, Session};
use ssh_fwd::datapath::{
    conntrack::{ConnTables, Entry},
    pins::PinLayout,
};
use ssh_fwd_tests::{
    Agent, Bpffs,
    agent::write_mappings,
    cluster::{Cluster, Wiring},
    flood::{self, Rng, Syn},
    forge::{ACK, RST, RawSender, SYN, Segment},
    handshakes::{self, FinalAck},
    privilege,
    topology::{CLIENT_IP, EXT_IFACE},
};

/// The attacker's own address, beside the client's on the same link.
const ATTACKER_IP: &str = "192.0.2.66";

/// A routed cluster with the agent on node A.
struct Bed {
    agent: Option<Agent>,
    bpffs: Bpffs,
    cluster: Cluster,
    _dir: tempfile::TempDir,
}

impl Bed {
    fn start(cluster: Cluster, entries: &[(&str, &str, &str)], extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ssh-fwd-attacks")
            .tempdir()
            .unwrap();
        let mappings = dir.path().join("mappings.yaml");
        write_mappings(&mappings, entries).unwrap();
        let bpffs = Bpffs::new().unwrap();
        let agent =
            Agent::start(&cluster.nodes[0], &[EXT_IFACE], &mappings, &bpffs, extra).unwrap();
        Self {
            agent: Some(agent),
            bpffs,
            cluster,
            _dir: dir,
        }
    }

    fn entries(&self) -> Vec<Entry> {
        ConnTables::open_pinned(&PinLayout::new(self.bpffs.path()))
            .unwrap()
            .entries()
    }

    /// Established entries whose client is `addr`.
    fn established_from(&self, addr: Ipv4Addr) -> usize {
        self.entries()
            .iter()
            .filter(|e| matches!(e, Entry::Established(k, _) if k.client().ip() == addr))
            .count()
    }

    fn counter(&self, name: &str) -> u64 {
        self.bpffs.list().unwrap()["counters"][name]
            .as_u64()
            .unwrap_or(0)
    }

    fn login(&self, port: u16) -> anyhow::Result<String> {
        self.cluster
            .ssh()
            .run(&self.cluster.client, EXTERNAL_IP, port, "hostname")
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.agent = None;
    }
}

/// Logs in through `port` again and again while `running` holds (at least
/// once); every login's result.
fn logins_while(bed: &Bed, port: u16, running: &AtomicBool) -> Vec<anyhow::Result<String>> {
    let mut logins = vec![bed.login(port)];
    while running.load(Ordering::Relaxed) && logins.len() < 50 {
        logins.push(bed.login(port));
    }
    logins
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn one_address_completing_handshakes_it_never_uses_cannot_fill_the_connection_table() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(0, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("target", "198.18.0.10:8022", "10.244.1.5:22"),
            ("victim", "198.18.0.10:8023", "10.244.2.5:22"),
        ],
        &["--conn-table-size", "2048"],
    );
    let client = &bed.cluster.client;
    client
        .ip(&["addr", "add", &format!("{ATTACKER_IP}/24"), "dev", "eth0"])
        .unwrap();
    let attacker: Ipv4Addr = ATTACKER_IP.parse().unwrap();
    handshakes::suppress_rsts(client, attacker).unwrap();
    let mut session = Session::open(&bed.cluster.ssh(), client, 8023).unwrap();
    let target = SocketAddrV4::new(EXTERNAL_IP.parse().unwrap(), 8022);
    // Each phase: three times the table's size in handshakes, a phase's own
    // source ports, while another client logs in and a session talks.
    let phases = [
        (FinalAck::BadTcpChecksum, 10_000),
        // Sent with 2, it crosses the router and reaches the node with 1.
        (FinalAck::Ttl(2), 17_000),
        (FinalAck::Valid, 24_000),
    ];
    for (ack, first_port) in phases {
        let running = AtomicBool::new(true);
        let (report, logins) = std::thread::scope(|s| {
            let logins = s.spawn(|| logins_while(&bed, 8023, &running));
            let report = handshakes::complete(
                client,
                &handshakes::Run {
                    from: attacker,
                    to: target,
                    first_port,
                    count: 3 * 2048,
                    per_second: 1_000,
                    ack,
                    limit: Duration::from_secs(30),
                },
            );
            running.store(false, Ordering::Relaxed);
            (report.unwrap(), logins.join().unwrap())
        });
        assert!(
            report.acks >= 3 * 2048 * 9 / 10,
            "{ack:?}: the attack ran: {report:?}"
        );
        for (i, login) in logins.iter().enumerate() {
            assert!(
                matches!(login, Ok(host) if host == "pod-2"),
                "{ack:?}: login {i} during the attack: {login:?}"
            );
        }
        assert_eq!(bed.login(8023).unwrap(), "pod-2", "{ack:?}: a login after");
        session
            .echo(&format!("{ack:?}").replace(['(', ')'], ""))
            .unwrap();
        // The quota, and at most one more per CPU confirming at the same
        // moment.
        let held = bed.established_from(attacker);
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(
            held < 512 + cpus,
            "{ack:?}: the attacker holds {held} established entries"
        );
    }
    assert!(bed.counter("source_limited") > 0, "the quota refused some");
}

/// Connects from the client to the frontend on `port` with the handshake's
/// last ACK held back: with TCP_QUICKACK off before connecting, Linux
/// delays the ACK of the SYN-ACK up to 200 ms when it has nothing to send
/// (a client on a slow path, as far as the data path can tell). Returns the
/// first 8 bytes the server sends, or the error of waiting `limit` for
/// them.
fn banner_with_a_late_ack(
    client: &ssh_fwd_tests::NetNs,
    sport: Option<u16>,
    port: u16,
    limit: Duration,
) -> anyhow::Result<[u8; 8]> {
    std::thread::scope(|s| {
        s.spawn(|| {
            client.enter_on_this_thread()?;
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            if let Some(sport) = sport {
                socket.set_reuse_address(true)?;
                socket.bind(&SocketAddrV4::new(CLIENT_IP.parse()?, sport).into())?;
            }
            socket.set_tcp_quickack(false)?;
            let to = SocketAddrV4::new(EXTERNAL_IP.parse()?, port);
            socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
            let mut stream: std::net::TcpStream = socket.into();
            stream.set_read_timeout(Some(limit))?;
            let mut banner = [0u8; 8];
            stream.read_exact(&mut banner)?;
            Ok(banner)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
    })
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn logins_to_a_shared_backend_complete_while_a_spoofed_flood_turns_the_half_open_table_over() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.1.5:22"),
            ("second", "198.18.0.10:9022", "10.244.1.5:22"),
        ],
        &["--half-open-table-size", "1024"],
    );
    let external: Ipv4Addr = EXTERNAL_IP.parse().unwrap();
    // About 30,000 SYNs a second from random sources to both frontends:
    // the 1,024-entry table turns over about six times while a client
    // holds its ACK back for 200 ms.
    let mut rng = Rng::new(0xf100d);
    let syns = std::iter::from_fn(move || {
        Some(Syn {
            src: rng.address(),
            sport: rng.draw() as u16,
            dst: external,
            dport: [8022, 9022][(rng.draw() % 2) as usize],
            seq: rng.draw() as u32,
        })
    });
    let stop = AtomicBool::new(false);
    let (sent, banners, seconds) = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            flood::send_paced(
                &bed.cluster.client,
                syns,
                30_000,
                &stop,
                Duration::from_secs(400),
            )
        });
        // Let the flood fill the table first.
        std::thread::sleep(Duration::from_secs(1));
        let started = Instant::now();
        let mut banners = Vec::new();
        for i in 0..100u16 {
            let port = [8022, 9022][usize::from(i % 2)];
            banners.push(banner_with_a_late_ack(
                &bed.cluster.client,
                None,
                port,
                Duration::from_secs(3),
            ));
            if flood.is_finished() {
                break;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        (flood.join().unwrap(), banners, seconds)
    });
    let sent = sent.unwrap();
    let ok = banners
        .iter()
        .filter(|b| matches!(b, Ok(banner) if banner == b"SSH-2.0-"))
        .count();
    println!(
        "{ok} of {} logins got their banner in {seconds:.1} s while {sent} spoofed SYNs were sent",
        banners.len()
    );
    assert_eq!(banners.len(), 100, "the flood lasted all 100 logins");
    assert!(ok >= 99, "{ok} of 100 logins got their banner: {banners:?}");
    assert_eq!(bed.login(9022).unwrap(), "pod-1");
}

/// The established entry of the client's session to pod 1 (10.244.1.5:22):
/// the client's port and the server's next sequence number.
fn session_of_pod_1(bed: &Bed) -> (u16, u32) {
    bed.entries()
        .into_iter()
        .find_map(|e| match e {
            Entry::Established(k, c)
                if k.backend().ip() == Ipv4Addr::new(10, 244, 1, 5)
                    && k.client().ip().to_string() == CLIENT_IP =>
            {
                Some((k.client().port(), c.server_next))
            }
            _ => None,
        })
        .unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_cannot_move_or_end_the_session_of_another_pod() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(0, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.1.5:22")],
        &[],
    );
    let mut session = Session::open(&bed.cluster.ssh(), &bed.cluster.client, 8022).unwrap();
    let (client_port, server_next) = session_of_pod_1(&bed);
    // Pod 2 knows the 4-tuple and the sequence numbers (the worst case):
    // it moves the server's sequence forward in steps, then sends a RST
    // exactly where its last step left it, all as pod 1.
    let hostile = RawSender::open_in(&bed.cluster.pods[1].ns).unwrap();
    let pod_1 = SocketAddrV4::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    let client = SocketAddrV4::new(CLIENT_IP.parse().unwrap(), client_port);
    let mut seq = server_next;
    for _ in 0..180 {
        seq = seq.wrapping_add(1 << 24);
        hostile
            .send(&Segment::new(pod_1, client, ACK, seq, 0))
            .unwrap();
    }
    hostile
        .send(&Segment::new(pod_1, client, RST, seq, 0))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    session.echo("after-the-spoofed-rst").unwrap();
    let moved = session_of_pod_1(&bed).1.wrapping_sub(server_next);
    assert!(
        moved < 1 << 20,
        "only the server's own data moved its sequence: {moved}"
    );
    assert!(
        bed.counter("spoofed_reply") >= 181,
        "the spoofed segments are counted"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_pod_cannot_answer_another_pods_handshakes() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    cluster.add_pod(0, 2).unwrap();
    let bed = Bed::start(
        cluster,
        &[("job", "198.18.0.10:8022", "10.244.1.5:22")],
        &[],
    );
    let hostile = RawSender::open_in(&bed.cluster.pods[1].ns).unwrap();
    let pod_1 = SocketAddrV4::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    let layout = PinLayout::new(bed.bpffs.path());
    let mut hung = 0;
    for i in 0..10u16 {
        let sport = 41_000 + i;
        let client = SocketAddrV4::new(CLIENT_IP.parse().unwrap(), sport);
        let forged = std::sync::atomic::AtomicUsize::new(0);
        let banner = std::thread::scope(|s| {
            let login = s.spawn(|| {
                banner_with_a_late_ack(
                    &bed.cluster.client,
                    Some(sport),
                    8022,
                    Duration::from_secs(3),
                )
            });
            // While the client holds its ACK back (the pod's SYN-ACK has
            // come and gone), pod 2 answers the SYN again as pod 1, with the
            // client's exact ISN, which it learns from the half-open entry.
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && !login.is_finished() {
                let isn = ConnTables::open_pinned(&layout)
                    .unwrap()
                    .entries()
                    .into_iter()
                    .find_map(|e| match e {
                        Entry::HalfOpen(k, h) if k.client().port() == sport => Some(h.client_isn),
                        _ => None,
                    });
                if let Some(isn) = isn {
                    std::thread::sleep(Duration::from_millis(20));
                    for n in 0..10u32 {
                        let syn_ack = Segment::new(
                            pod_1,
                            client,
                            SYN | ACK,
                            0x5eed_0000 + n,
                            isn.wrapping_add(1),
                        );
                        hostile.send(&syn_ack).unwrap();
                        forged.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            login.join().unwrap()
        });
        assert_eq!(
            forged.load(Ordering::Relaxed),
            10,
            "login {i}: pod 2 forged its SYN-ACKs in time"
        );
        if !matches!(&banner, Ok(b) if b == b"SSH-2.0-") {
            hung += 1;
        }
    }
    assert_eq!(hung, 0, "{hung} of 10 logins hung");
    assert!(
        bed.counter("spoofed_reply") >= 1,
        "the forgeries are counted"
    );
}

/// The agent's resident memory, in KiB.
fn rss_kib(agent: &Agent) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_idle_connection_is_swept_on_time_and_the_agent_keeps_its_memory_under_a_flood() {
    privilege::require();
    let mut cluster = Cluster::new(Wiring::default()).unwrap();
    cluster.add_pod(0, 1).unwrap();
    let bed = Bed::start(
        cluster,
        &[
            ("first", "198.18.0.10:8022", "10.244.1.5:22"),
            ("second", "198.18.0.10:9022", "10.244.1.5:22"),
        ],
        &[
            "--conn-idle-timeout",
            "4s",
            "--half-open-table-size",
            "1024",
        ],
    );
    let agent = bed.agent.as_ref().unwrap();
    let external: Ipv4Addr = EXTERNAL_IP.parse().unwrap();
    // Spoofed SYNs and ACKs of handshakes that never happened, from random
    // sources to both frontends: the half-open and claim tables (LRUs)
    // churn all along, the state a walk with get_next_key restarts on.
    let mut rng = Rng::new(0x5eeb);
    let segments = std::iter::from_fn(move || {
        let syn = Syn {
            src: rng.address(),
            sport: rng.draw() as u16,
            dst: external,
            dport: [8022, 9022][(rng.draw() % 2) as usize],
            seq: rng.draw() as u32,
        };
        Some(if rng.draw().is_multiple_of(2) {
            flood::Forged::from(syn)
        } else {
            syn.ack(rng.draw() as u32)
        })
    });
    let stop = AtomicBool::new(false);
    let rss_before = rss_kib(agent);
    let (sent, swept_after, rss_most) = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            flood::send_paced(
                &bed.cluster.client,
                segments,
                30_000,
                &stop,
                Duration::from_secs(60),
            )
        });
        std::thread::sleep(Duration::from_secs(2));
        // A connection that goes quiet once the server's banner is read:
        // sshd waits for the client's for two minutes, sending nothing.
        let mut idle = std::thread::scope(|s| {
            s.spawn(|| {
                bed.cluster.client.enter_on_this_thread().unwrap();
                let mut stream = std::net::TcpStream::connect((external, 8022)).unwrap();
                let mut banner = [0u8; 8];
                stream.read_exact(&mut banner).unwrap();
                assert_eq!(&banner, b"SSH-2.0-");
                stream
            })
            .join()
            .unwrap()
        });
        let port = idle.local_addr().unwrap().port();
        let tracked = || {
            bed.entries()
                .iter()
                .any(|e| matches!(e, Entry::Established(k, _) if k.client().port() == port))
        };
        assert!(tracked(), "the connection is tracked");
        let quiet_since = Instant::now();
        let mut rss_most = rss_before;
        while tracked() && quiet_since.elapsed() < Duration::from_secs(30) {
            rss_most = rss_most.max(rss_kib(agent));
            std::thread::sleep(Duration::from_millis(200));
        }
        let swept_after = quiet_since.elapsed();
        // Keep the flood on a while longer: memory stays where it was.
        for _ in 0..10 {
            rss_most = rss_most.max(rss_kib(agent));
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = std::io::Write::write_all(&mut idle, b"");
        stop.store(true, Ordering::Relaxed);
        (flood.join().unwrap().unwrap(), swept_after, rss_most)
    });
    println!(
        "{sent} spoofed segments; the idle entry went after {:.1} s (idle timeout 4 s); agent \
         RSS {rss_before} KiB before, {rss_most} KiB at most",
        swept_after.as_secs_f64()
    );
    assert!(
        swept_after < Duration::from_secs(8),
        "the idle connection was swept after {swept_after:?}"
    );
    assert!(
        rss_most < rss_before + 16 * 1024,
        "the agent grew from {rss_before} KiB to {rss_most} KiB"
    );
    assert!(bed.counter("conn_expired") >= 1);
    assert!(
        bed.counter("conn_claimed") > 1000,
        "the claims table churned"
    );
}
