//! Small programs the datapath benchmark runs inside its namespaces, as
//! `xtask bench-helper ...` (this binary, under `nsenter --net`): the pod's
//! echo server, the node's userspace proxy, and the client's latency and
//! connection-rate loops. Every client loop stops at a deadline and a count.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde_json::json;

/// Most round trips or connections one client loop makes, whatever the time.
const MAX_ITERATIONS: usize = 5_000_000;
const IO_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(clap::Subcommand)]
pub enum Helper {
    /// Echo server: writes back every byte it reads.
    Echo {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// Userspace TCP proxy (tokio copy_bidirectional), one per LISTEN=TARGET.
    Proxy {
        #[arg(long = "route", value_parser = parse_route)]
        routes: Vec<(SocketAddr, SocketAddr)>,
    },
    /// 1-byte ping-pong on one open connection; prints p50/p99 as JSON.
    PingPong {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        secs: f64,
    },
    /// Connect, exchange one byte, close, from several threads until the
    /// time is up; prints the count as JSON.
    ConnectRate {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        secs: f64,
        #[arg(long, default_value_t = 4)]
        workers: usize,
    },
    /// BPF_PROG_TEST_RUN of pinned tc programs on frames, as a JSON plan
    /// says (`bench progs`); prints verdicts and durations as JSON.
    TestRun {
        #[arg(long)]
        plan: std::path::PathBuf,
    },
}

fn parse_route(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (a, b) = s.split_once('=').ok_or("expected LISTEN=TARGET")?;
    Ok((
        a.parse().map_err(|e| format!("{a}: {e}"))?,
        b.parse().map_err(|e| format!("{b}: {e}"))?,
    ))
}

pub fn run(helper: Helper) -> anyhow::Result<()> {
    match helper {
        Helper::Echo { listen } => crate::bench::proxy::echo(listen),
        Helper::Proxy { routes } => crate::bench::proxy::proxy(&routes),
        Helper::PingPong { to, secs } => ping_pong(to, Duration::from_secs_f64(secs)),
        Helper::ConnectRate { to, secs, workers } => {
            connect_rate(to, Duration::from_secs_f64(secs), workers)
        }
        Helper::TestRun { plan } => crate::bench::progs::test_run::serve(&plan),
    }
}

fn connect(to: SocketAddr) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&to, IO_TIMEOUT).with_context(|| format!("connect {to}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
}

fn exchange(s: &mut TcpStream) -> std::io::Result<()> {
    let mut byte = [1u8];
    s.write_all(&byte)?;
    s.read_exact(&mut byte)
}

fn ping_pong(to: SocketAddr, time: Duration) -> anyhow::Result<()> {
    let mut s = connect(to)?;
    // Warm-up: caches, conntrack and neighbour entries, the LRU map.
    for _ in 0..200 {
        exchange(&mut s)?;
    }
    let mut rtts_ns: Vec<u64> = Vec::with_capacity(1 << 20);
    let deadline = Instant::now() + time;
    while rtts_ns.len() < MAX_ITERATIONS && Instant::now() < deadline {
        let start = Instant::now();
        exchange(&mut s)?;
        rtts_ns.push(start.elapsed().as_nanos() as u64);
    }
    rtts_ns.sort_unstable();
    let pct = |p: f64| {
        let i = ((rtts_ns.len() as f64 - 1.0) * p).round() as usize;
        rtts_ns.get(i).copied().unwrap_or(0) as f64 / 1e3
    };
    println!(
        "{}",
        json!({"p50_us": pct(0.50), "p99_us": pct(0.99), "samples": rtts_ns.len()})
    );
    Ok(())
}

fn connect_rate(to: SocketAddr, time: Duration, workers: usize) -> anyhow::Result<()> {
    let start = Instant::now();
    let deadline = start + time;
    let per_worker = MAX_ITERATIONS / workers.max(1);
    let handles: Vec<_> = (0..workers.max(1))
        .map(|_| {
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0usize, 0usize);
                while ok + failed < per_worker && Instant::now() < deadline {
                    match connect(to).map(|mut s| exchange(&mut s)) {
                        Ok(Ok(())) => ok += 1,
                        _ => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for h in handles {
        let (o, f) = h.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?;
        ok += o;
        failed += f;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"connections": ok, "failed": failed, "secs": secs})
    );
    Ok(())
}
