//! The agent as a process under pressure: its HTTP server when the process
//! runs out of file descriptors, and `/metrics` with full connection tables.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, TcpStream},
    time::{Duration, Instant},
};

use crate::common::{Bed, FRONTEND};
use aya::maps::{HashMap, Map, MapData, MapInfo};
use ssh_fwd::datapath::{conntrack::clock_ns, pins::PinLayout};
use ssh_fwd_common::maps::{
    CONN_CAPACITY, CONNS, Conn, ConnKey, Endpoint, FRONTENDS, HALF_OPEN, HALF_OPEN_CAPACITY,
    HalfOpen, HalfOpenKey, MAX_MAPPINGS, NatTarget,
};
use ssh_fwd_tests::{NetNs, Topology, agent::write_mappings, cmd, privilege};

const METRICS: &str = "127.0.0.1:9102";

/// Runs `f` on a thread inside `ns`: sockets it opens live there.
fn in_ns<T: Send>(ns: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_on_this_thread().unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// `GET path` on the agent's metrics address in `ns`: status, body, and
/// the time from connect to the last byte.
fn get(ns: &NetNs, path: &str) -> anyhow::Result<(u16, String, Duration)> {
    in_ns(ns, || {
        let started = Instant::now();
        let mut stream = TcpStream::connect_timeout(&METRICS.parse()?, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes())?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let took = started.elapsed();
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body, took))
    })
}

/// Descriptors the process has open now.
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// User plus system CPU time of the whole process, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses: state is
    // field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap()
}

/// Sets the soft open-file limit of a running process and returns the one
/// it had. The hard limit stays, so restoring needs no CAP_SYS_RESOURCE.
fn set_nofile(pid: i32, soft: u64) -> u64 {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit writes the current limits into `old`, which we own.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: prlimit reads `new`; no old limit is asked for.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    old.rlim_cur
}

/// Connections waiting in the listen queue of the metrics port: accepted
/// by the kernel, not yet by the agent.
fn listen_queue(ns: &NetNs) -> usize {
    let out = cmd::run(ns.command("ss").args(["-Hltn", "sport", "=", ":9102"])).unwrap();
    out.split_whitespace()
        .nth(1)
        .and_then(|q| q.parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn metrics_server_out_of_file_descriptors_backs_off_warns_once_and_recovers() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &["--metrics-addr", METRICS],
    )
    .unwrap();
    let node = &bed.topo.nodes[0].ns;
    let agent = &bed.agents[0];
    let pid = i32::try_from(agent.pid().unwrap()).unwrap();
    assert_eq!(get(node, "/healthz").unwrap().0, 200);

    // A few descriptors to spare, then connections until the agent cannot
    // accept any more: the rest wait in the listen queue.
    let limit = u64::try_from(open_fds(pid)).unwrap() + 8;
    let original = set_nofile(pid, limit);
    let held: Vec<TcpStream> = in_ns(node, || {
        (0..32)
            .map(|_| TcpStream::connect(METRICS).unwrap())
            .collect()
    });
    assert!(
        cmd::wait_until(Duration::from_secs(5), || listen_queue(node) > 0),
        "the agent accepted every connection: its descriptors did not run out ({} open, limit {limit})",
        open_fds(pid)
    );

    // While they are held, accepting keeps failing: the agent must not spin.
    let window = Duration::from_secs(3);
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    let used = cpu_ticks(pid) - before;
    let budget = ticks_per_second() * window.as_secs() / 5;
    eprintln!(
        "CPU while unable to accept: {used} ticks in {window:?} ({} ticks/s)",
        ticks_per_second()
    );
    assert!(
        listen_queue(node) > 0,
        "the queue drained while the connections were held"
    );
    assert!(
        used < budget,
        "the agent used {used} ticks of CPU in {window:?} (budget {budget}, 20% of a core) while it could not accept"
    );
    let warned = agent.count_in_log("cannot accept connections");
    assert_eq!(
        warned,
        1,
        "one warning per episode, with the fix:\n{}",
        agent.log()
    );
    assert_eq!(agent.count_in_log("ulimit -n"), 1, "{}", agent.log());

    // Freed descriptors: it serves again by itself, within the longest
    // pause, and says so once accepting has worked for a while.
    drop(held);
    let mut healthz = None;
    cmd::wait_until(Duration::from_secs(5), || {
        healthz = get(node, "/healthz").ok().map(|r| r.0);
        healthz == Some(200)
    });
    assert_eq!(healthz, Some(200), "/healthz after the connections closed");
    let recovered = cmd::wait_until(Duration::from_secs(10), || {
        get(node, "/healthz").is_ok_and(|r| r.0 == 200)
            && agent.count_in_log("accepting connections again") > 0
    });
    assert!(recovered, "no recovery logged:\n{}", agent.log());
    assert_eq!(
        agent.count_in_log("accepting connections again"),
        1,
        "{}",
        agent.log()
    );
    assert_eq!(
        agent.count_in_log("cannot accept connections"),
        1,
        "one shortage, one warning:\n{}",
        agent.log()
    );
    let (_, metrics, _) = get(node, "/metrics").unwrap();
    let errors: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ssh_fwd_accept_errors_total{server=\"metrics\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(errors >= 1, "accept errors counted:\n{metrics}");
    set_nofile(pid, original);
}

/// A pinned hash map (or LRU hash map) of the agent's.
fn pinned<K: aya::Pod, V: aya::Pod>(layout: &PinLayout, name: &str) -> HashMap<MapData, K, V> {
    let data = MapData::from_pin(layout.map(name)).unwrap();
    HashMap::try_from(Map::from_map_data(data).unwrap()).unwrap()
}

/// The `i`th of many clients, each with its own address and port.
fn client(i: u32) -> Endpoint {
    Endpoint::new(
        Ipv4Addr::from(0x6440_0000 + (i >> 8)),
        1024 + (i & 0xff) as u16,
    )
}

/// Fills `CONNS` and `HALF_OPEN` to their capacity with live entries of the
/// mapping on `frontend` (recent enough that no sweep removes them), as
/// that many clients would, and returns how many each holds.
fn fill_connection_tables(layout: &PinLayout, frontend: Endpoint, backend: Endpoint) -> (u32, u32) {
    let target: NatTarget = pinned::<Endpoint, NatTarget>(layout, FRONTENDS)
        .get(&frontend, 0)
        .unwrap();
    let conns_capacity = MapInfo::from_pin(layout.map(CONNS)).unwrap().max_entries();
    let half_capacity = MapInfo::from_pin(layout.map(HALF_OPEN))
        .unwrap()
        .max_entries();
    assert_eq!(
        (conns_capacity, half_capacity),
        (CONN_CAPACITY, HALF_OPEN_CAPACITY)
    );
    let now = clock_ns();
    let mut conns = pinned::<ConnKey, Conn>(layout, CONNS);
    for i in 0..conns_capacity {
        let conn = Conn {
            frontend,
            slot: target.slot,
            client_next: i,
            server_next: i,
            last_seen_ns: now,
            created_ns: now,
            ..Conn::ZERO
        };
        conns
            .insert(ConnKey::new(client(i), backend), conn, 0)
            .unwrap();
    }
    // The half-open table is an LRU with a list per CPU: what one CPU
    // inserts fills only its share, so each CPU inserts its own.
    let cpus = aya::util::nr_cpus().unwrap() as u32;
    let per_cpu = half_capacity / cpus;
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            s.spawn(move || {
                on_cpu(cpu as usize);
                let mut half = pinned::<HalfOpenKey, HalfOpen>(layout, HALF_OPEN);
                for n in 0..per_cpu {
                    let i = cpu * per_cpu + n;
                    let entry = HalfOpen {
                        frontend,
                        slot: target.slot,
                        flags: 0,
                        client_isn: i,
                        server_isn: 0,
                        last_seen_ns: now,
                    };
                    let key =
                        HalfOpenKey::new(ConnKey::new(client(conns_capacity + i), backend), i);
                    half.insert(key, entry, 0).unwrap();
                }
            });
        }
    });
    let half = pinned::<HalfOpenKey, HalfOpen>(layout, HALF_OPEN);
    (conns.keys().count() as u32, half.keys().count() as u32)
}

/// Moves the calling thread to CPU `cpu`.
fn on_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity
    // take the set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning to CPU {cpu}"
        );
    }
}

/// Every line of an OpenMetrics body is a comment or `name{labels} value`,
/// and it ends with `# EOF`.
fn assert_well_formed(body: &str) {
    assert!(
        body.ends_with("# EOF\n"),
        "body does not end with # EOF:\n{body}"
    );
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit_once(' ').map(|(_, v)| v);
        assert!(
            value.is_some_and(|v| v.parse::<f64>().is_ok()),
            "not a sample: {line:?}"
        );
    }
}

/// Scrapes `/metrics` 20 times; each must answer in full within 100 ms.
fn assert_scrapes_are_fast(node: &NetNs) -> String {
    let mut last = String::new();
    let mut took = vec![];
    for _ in 0..20 {
        let (status, body, elapsed) = get(node, "/metrics").unwrap();
        assert_eq!(status, 200, "{body}");
        assert_well_formed(&body);
        took.push(elapsed);
        last = body;
    }
    let slowest = took.iter().max().unwrap();
    eprintln!("20 scrapes of /metrics, slowest {slowest:?}: {took:?}");
    assert!(
        *slowest < Duration::from_millis(100),
        "a scrape took {slowest:?}; all: {took:?}"
    );
    last
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn metrics_answer_within_100ms_with_full_connection_tables() {
    privilege::require();
    let bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &["--metrics-addr", METRICS],
    )
    .unwrap();
    let layout = PinLayout::new(bed.bpffs[0].path());
    let frontend = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
    let backend = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    let (conns, half_open) = fill_connection_tables(&layout, frontend, backend);
    assert_eq!(conns, CONN_CAPACITY);
    // An LRU map may evict a little before it is full (its free lists are
    // per CPU).
    assert!(
        half_open > HALF_OPEN_CAPACITY * 95 / 100,
        "{half_open} half-open"
    );
    let body = assert_scrapes_are_fast(&bed.topo.nodes[0].ns);
    assert!(body.contains("ssh_fwd_datapath_readable 1"), "{body}");
    assert!(body.contains("ssh_fwd_mappings 1"), "{body}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn metrics_answer_within_100ms_with_full_mapping_and_connection_tables() {
    privilege::require();
    let mut bed = Bed::start(
        Topology::single_node(1).unwrap(),
        &[("a", FRONTEND, "10.244.1.5:22")],
        &["--metrics-addr", METRICS],
    )
    .unwrap();
    let names: Vec<(String, String)> = (0..MAX_MAPPINGS)
        .map(|i| (format!("job-{i}"), format!("198.18.0.10:{}", 10_000 + i)))
        .collect();
    let mut entries: Vec<(&str, &str, &str)> = names
        .iter()
        .map(|(name, frontend)| (name.as_str(), frontend.as_str(), "10.244.1.5:22"))
        .collect();
    entries[0] = ("a", FRONTEND, "10.244.1.5:22");
    write_mappings(&bed.mappings, &entries).unwrap();
    bed.agents[0]
        .wait_for_log(
            &format!("\"mappings\":{MAX_MAPPINGS}"),
            Duration::from_secs(60),
        )
        .unwrap();
    let layout = PinLayout::new(bed.bpffs[0].path());
    let frontend = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
    let backend = Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22);
    fill_connection_tables(&layout, frontend, backend);
    let node = &bed.topo.nodes[0].ns;
    let body = assert_scrapes_are_fast(node);
    assert!(
        body.contains(&format!("ssh_fwd_mappings {MAX_MAPPINGS}")),
        "{body}"
    );
    // The rows of every mapping arrive, rendered off the scrapes' path.
    let last = format!(
        "ssh_fwd_mapping_packets_total{{mapping=\"job-{}\"",
        MAX_MAPPINGS - 1
    );
    let rows = cmd::wait_until(Duration::from_secs(30), || {
        get(node, "/metrics").is_ok_and(|(_, body, _)| {
            body.contains(&last)
                && body.matches("ssh_fwd_mapping_bytes_total{").count() == 2 * MAX_MAPPINGS as usize
        })
    });
    assert!(
        rows,
        "the per-mapping rows never covered all {MAX_MAPPINGS} mappings"
    );
}
