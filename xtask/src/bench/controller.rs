//! `cargo xtask bench controller`: how fast the controller gives N labelled
//! pods their ports, Services and published commands, how long one new pod
//! waits, what a restart costs, and the controller's memory. The API server
//! is the in-process fake on loopback; no packets leave this host.

use std::{
    collections::BTreeSet,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use ssh_fwd_tests::fake_api::{FakeApi, Kind, key_of};

use super::stats::Summary;

const RANGE: (u16, u16) = (8000, 16000);

/// One scenario's figures for one build.
#[derive(Debug, Default)]
struct Figures {
    all_published: Duration,
    /// CPU time until all were published: the controller's, and this
    /// process's (the fake API server, the benchmark's polling).
    controller_cpu: Duration,
    api_cpu: Duration,
    p50: Duration,
    p99: Duration,
    ready_again: Duration,
    /// Resident memory when all were published, once the new pods were
    /// served one at a time (settled), and the peak (VmHWM).
    rss_mib: f64,
    settled_mib: f64,
    peak_mib: f64,
    requests: usize,
    /// Reconcile passes and their mean duration while all pods were
    /// published, and while the new pods came one at a time.
    start_passes: Passes,
    new_pod_passes: Passes,
}

/// What to measure: `runs` of each build and scenario, the builds taking
/// turns, so that a slow spell of the machine falls on both.
#[derive(clap::Args, Debug)]
pub struct Options {
    #[arg(long, default_value_t = 5_000)]
    pub pods: usize,
    #[arg(long, default_value_t = 100)]
    pub new_pods: usize,
    #[arg(long, default_value_t = 0)]
    pub unlabelled: usize,
    /// Runs of each build and scenario, the builds taking turns; the
    /// table shows the median publish time with its range, and the
    /// other figures of the run at the median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub runs: u16,
    /// An earlier build's `ssh-fwd` (its eBPF programs are inside) to
    /// measure beside this one in the same run, e.g. one built from main.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub before: Option<PathBuf>,
    /// Measure this build as "after" instead of building the worktree's.
    #[arg(long, value_name = "SSH_FWD_BINARY")]
    pub after: Option<PathBuf>,
}

pub fn run(options: Options) -> anyhow::Result<()> {
    let Options {
        pods,
        new_pods,
        unlabelled,
        runs,
        before,
        after,
    } = options;
    let ports = usize::from(RANGE.1 - RANGE.0) + 1;
    ensure!(
        pods + new_pods <= ports,
        "at most {ports} pods fit the port range {}-{}",
        RANGE.0,
        RANGE.1
    );
    let after = match after {
        Some(bin) => bin,
        None => crate::build_ssh_fwd_profile(true)?,
    };
    let mut builds: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(before) = before {
        builds.push(("before", before));
    }
    builds.push(("after", after));
    let mut rows = Vec::new();
    let mut scenarios = vec![0];
    if unlabelled > 0 {
        scenarios.push(unlabelled);
    }
    for extra in scenarios {
        let mut measured: Vec<Vec<Figures>> = builds.iter().map(|_| Vec::new()).collect();
        for round in 1..=runs {
            for ((label, bin), all) in builds.iter().zip(&mut measured) {
                println!(
                    "==> {label} (run {round} of {runs}): {pods} labelled pods, {extra} unlabelled"
                );
                let figures = measure(bin, pods, new_pods, extra)?;
                println!(
                    "==> {label} (run {round} of {runs}): all published in {:.2} s",
                    figures.all_published.as_secs_f64()
                );
                all.push(figures);
            }
        }
        let figures: Vec<Median> = measured.into_iter().map(Median::of).collect();
        rows.push((extra, figures));
    }
    let labels: Vec<&str> = builds.iter().map(|(l, _)| *l).collect();
    println!();
    println!("| figure | {} |", labels.join(" | "));
    println!("|---|{}", "---|".repeat(labels.len()));
    for (extra, figures) in &rows {
        let what = match extra {
            0 => format!("{pods} pods"),
            n => format!("{pods} pods + {n} unlabelled"),
        };
        let cells = |f: &dyn Fn(&Figures) -> String| -> String {
            figures
                .iter()
                .map(|m| f(&m.run))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let published: Vec<String> = figures.iter().map(Median::publish_cell).collect();
        println!(
            "| {what}: controller start to all published (Service, status, label, annotation, event) | {} |",
            published.join(" | ")
        );
        println!(
            "| {what}: CPU time until all published: controller; fake API server | {} |",
            cells(&|f| format!(
                "{:.2} s; {:.2} s",
                f.controller_cpu.as_secs_f64(),
                f.api_cpu.as_secs_f64()
            ))
        );
        println!(
            "| {what}: new pod to its endpoint annotation, p50 / p99 ({new_pods} pods) | {} |",
            cells(&|f| format!("{:.1} ms / {:.1} ms", ms(f.p50), ms(f.p99)))
        );
        println!(
            "| {what}: restart to ready; Services and events added by the restart | {} |",
            cells(&|f| format!("{:.2} s; 0 and 0", f.ready_again.as_secs_f64()))
        );
        println!(
            "| {what}: controller resident memory: all published; settled (after the new pods); peak | {} |",
            cells(&|f| format!(
                "{:.1} MiB; {:.1} MiB; {:.1} MiB",
                f.rss_mib, f.settled_mib, f.peak_mib
            ))
        );
        println!(
            "| {what}: API requests in all (each pod announced once) | {} |",
            cells(&|f| f.requests.to_string())
        );
        println!(
            "| {what}: reconcile passes until all published; their mean time | {} |",
            cells(&|f| f.start_passes.to_string())
        );
        println!(
            "| {what}: reconcile passes per new pod; their mean time | {} |",
            cells(&|f| f.new_pod_passes.per(new_pods))
        );
    }
    Ok(())
}

/// The runs of one build in one scenario: the run whose publish time is
/// the median (the upper one of an even count), whose figures the table
/// shows, and the spread of the publish times.
struct Median {
    run: Figures,
    publish: Summary,
}

impl Median {
    fn of(mut runs: Vec<Figures>) -> Self {
        let times: Vec<f64> = runs.iter().map(|f| f.all_published.as_secs_f64()).collect();
        let publish = Summary::of(&times).expect("at least one run");
        runs.sort_by_key(|f| f.all_published);
        let run = runs.swap_remove(runs.len() / 2);
        Self { run, publish }
    }

    fn publish_cell(&self) -> String {
        let Summary {
            median,
            min,
            max,
            rounds,
        } = self.publish;
        if rounds == 1 {
            return format!("{median:.2} s");
        }
        format!(
            "{median:.2} s (median of {rounds} runs, {min:.2}-{max:.2} s; other figures: the median run's)"
        )
    }
}

fn measure(bin: &Path, pods: usize, new_pods: usize, unlabelled: usize) -> anyhow::Result<Figures> {
    let api = FakeApi::start_on_loopback()?;
    // The controller never reads EndpointSlices; emulating them would
    // measure the fake.
    api.without_endpoint_slices();
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig())?;
    println!("==> creating {pods} labelled pods and {unlabelled} others in the fake API");
    for i in 0..pods {
        api.apply(Kind::Pod, pod(i));
    }
    for i in 0..unlabelled {
        api.apply(Kind::Pod, unlabelled_pod(i));
    }

    println!("==> starting the controller and waiting until every pod is published");
    let started = Instant::now();
    let api_cpu_before = super::convergence::cpu_time(std::process::id())?;
    let metrics = free_loopback_addr()?;
    let mut controller = spawn(
        bin,
        &kubeconfig,
        &dir.path().join("controller-1.log"),
        Some(metrics),
    )?;
    let mut published = Published::default();
    wait_alive(&mut controller, Duration::from_secs(600), || {
        // Reads only the changes since the last look: cheap enough to look
        // often, and to hold the fake API's lock only briefly.
        std::thread::sleep(Duration::from_millis(20));
        published.follow(&api) >= pods
    })?;
    let all_published = started.elapsed();
    let controller_cpu = super::convergence::cpu_time(controller.id())?;
    let api_cpu = super::convergence::cpu_time(std::process::id())? - api_cpu_before;
    keep_log(&dir.path().join("controller-1.log"), pods, unlabelled)?;
    let rss = super::convergence::rss_kib(controller.id())?;
    check_unique_ports(&api, pods)?;
    let start_passes = Passes::scrape(metrics)?;

    println!("==> {new_pods} new pods, one at a time");
    let mut delays = Vec::with_capacity(new_pods);
    for i in pods..pods + new_pods {
        let created = Instant::now();
        api.apply(Kind::Pod, pod(i));
        wait_alive(&mut controller, Duration::from_secs(30), || {
            endpoint(&api, i).is_some()
        })?;
        delays.push(created.elapsed());
    }
    let new_pod_passes = Passes::scrape(metrics)?.since(&start_passes);
    let settled = super::convergence::rss_kib(controller.id())?;
    let peak = super::convergence::peak_rss_kib(controller.id())?;
    delays.sort();
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];

    println!("==> restart: SIGTERM (the Lease is handed back), start again");
    let events_before = api.list(Kind::Event).len();
    stop(&mut controller)?;
    let restarted = Instant::now();
    let log = dir.path().join("controller-2.log");
    let mut controller = spawn(bin, &kubeconfig, &log, None)?;
    wait(Duration::from_secs(120), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("controller ready"))
    })?;
    let ready_again = restarted.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let services = api.list(Kind::Service).len();
    let events_after = api.list(Kind::Event).len();
    stop(&mut controller)?;
    ensure!(
        services == pods + new_pods,
        "{services} Services after the restart"
    );
    ensure!(
        events_after == events_before,
        "the restart sent {} events",
        events_after - events_before
    );

    let requests = api.requests();
    let mut by_call = std::collections::BTreeMap::<String, usize>::new();
    for r in &requests {
        *by_call
            .entry(format!("{} {}", r.verb, r.resource))
            .or_default() += 1;
    }
    println!("==> API requests by verb and resource: {by_call:?}");
    let announced = requests
        .iter()
        .filter(|r| r.resource == "events" && r.verb == "create")
        .count();
    let repeated = requests
        .iter()
        .filter(|r| r.resource == "events" && r.verb == "patch")
        .count();
    ensure!(
        announced == pods + new_pods && repeated == 0,
        "{announced} events created and {repeated} repeated for {} pods",
        pods + new_pods
    );
    Ok(Figures {
        all_published,
        controller_cpu,
        api_cpu,
        p50: pct(0.5),
        p99: pct(0.99),
        ready_again,
        rss_mib: rss as f64 / 1024.0,
        settled_mib: settled as f64 / 1024.0,
        peak_mib: peak as f64 / 1024.0,
        requests: requests.len(),
        start_passes,
        new_pod_passes,
    })
}

/// Where the time went: the controller's log, kept when asked for.
fn keep_log(log: &Path, pods: usize, unlabelled: usize) -> anyhow::Result<()> {
    if let Some(dir) = std::env::var_os("BENCH_KEEP_LOGS") {
        let kept = Path::new(&dir).join(format!("controller-{pods}-{unlabelled}.log"));
        std::fs::copy(log, &kept)
            .with_context(|| format!("keeping the controller's log as {}", kept.display()))?;
    }
    Ok(())
}

/// A pod that does not ask for SSH, as a busy cluster has them by the
/// ten thousand.
fn unlabelled_pod(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("web-{i}"), "namespace": format!("team-{}", i % 100),
                        "labels": {"app.kubernetes.io/name": "web", "pod-template-hash": "5d8f7c9b4"},
                        "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}},
           "spec": {"containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}]}],
                    "nodeName": format!("node-{}", i % 50)},
           "status": {"phase": "Running", "podIP": format!("10.{}.{}.9", 128 + i / 65536 % 64, i / 256 % 256),
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pod(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("job-{i}-rank-0"), "namespace": "jobs",
                        "labels": {"ssh-fwd.io/ssh": "enabled"}},
           "spec": {"containers": [{"name": "job", "image": "hpc"}]},
           // Never contacted: the benchmark sends no packets to pods.
           "status": {"phase": "Running", "podIP": format!("10.{}.{}.5", i / 256 % 256, i % 256)}})
}

fn endpoint(api: &FakeApi, i: usize) -> Option<String> {
    let pod = api.get(Kind::Pod, "jobs", &format!("job-{i}-rank-0"))?;
    pod["metadata"]["annotations"][ENDPOINT]
        .as_str()
        .map(str::to_owned)
}

/// The pods with an endpoint annotation, followed from the fake API's
/// changes.
#[derive(Default)]
struct Published {
    pods: BTreeSet<String>,
    seen: u64,
}

impl Published {
    /// Takes in the pod changes since the last call; returns how many pods
    /// carry an endpoint now.
    fn follow(&mut self, api: &FakeApi) -> usize {
        let (changes, seen) = api.changes_after(Kind::Pod, self.seen);
        self.seen = seen;
        for change in changes {
            let Some(pod) = change.new.as_deref().or(change.old.as_deref()) else {
                continue;
            };
            let key = key_of(pod);
            let endpoint = change
                .new
                .as_ref()
                .is_some_and(|p| !p["metadata"]["annotations"][ENDPOINT].is_null());
            if endpoint {
                self.pods.insert(key);
            } else {
                self.pods.remove(&key);
            }
        }
        self.pods.len()
    }
}

const ENDPOINT: &str = "ssh-fwd.io/endpoint";

fn check_unique_ports(api: &FakeApi, pods: usize) -> anyhow::Result<()> {
    let ports: BTreeSet<u64> = api
        .list(Kind::Service)
        .iter()
        .filter_map(|s| s["spec"]["ports"][0]["port"].as_u64())
        .collect();
    ensure!(
        ports.len() == pods,
        "{} distinct ports for {pods} pods",
        ports.len()
    );
    ensure!(
        ports
            .iter()
            .all(|p| (u64::from(RANGE.0)..=u64::from(RANGE.1)).contains(p)),
        "a port outside the range"
    );
    Ok(())
}

fn spawn(
    bin: &Path,
    kubeconfig: &Path,
    log: &Path,
    metrics: Option<SocketAddr>,
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log)?;
    let mut command = Command::new(bin);
    command
        .args([
            "controller",
            "--ssh-ip",
            "198.18.0.10",
            "--identity",
            "bench",
            "--lease-namespace",
            "ssh-fwd",
        ])
        .args([
            "--port-range",
            &format!("{}-{}", RANGE.0, RANGE.1),
            "--log-format",
            "json",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig);
    if let Some(addr) = metrics {
        command.arg("--metrics-addr").arg(addr.to_string());
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ssh-fwd controller")
}

fn stop(child: &mut Child) -> anyhow::Result<()> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the controller did not exit within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// [`wait`], failing at once if the controller exits.
fn wait_alive(
    controller: &mut Child,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let mut exited = None;
    wait(limit, || {
        exited = controller.try_wait().ok().flatten();
        exited.is_some() || done()
    })?;
    match exited {
        Some(status) => bail!("the controller exited early ({status})"),
        None => Ok(()),
    }
}

fn wait(limit: Duration, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            bail!("not done within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// How many reconcile passes the controller made and how long they took in
/// all, from its `/metrics`: where a pod's wait goes.
#[derive(Debug, Default)]
struct Passes {
    count: f64,
    seconds: f64,
}

impl Passes {
    fn scrape(addr: SocketAddr) -> anyhow::Result<Self> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .with_context(|| format!("connecting to the controller's /metrics on {addr}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let value = |name: &str| -> anyhow::Result<f64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .with_context(|| format!("{name} is not in the controller's /metrics"))?
                .trim()
                .parse()
                .with_context(|| format!("{name} is not a number"))
        };
        Ok(Self {
            count: value("ssh_fwd_controller_pass_duration_seconds_count")?,
            seconds: value("ssh_fwd_controller_pass_duration_seconds_sum")?,
        })
    }

    fn since(&self, earlier: &Self) -> Self {
        Self {
            count: self.count - earlier.count,
            seconds: self.seconds - earlier.seconds,
        }
    }

    fn mean_ms(&self) -> f64 {
        if self.count == 0.0 {
            return 0.0;
        }
        self.seconds * 1e3 / self.count
    }

    /// Passes per pod over `pods` pods, and the mean pass.
    fn per(&self, pods: usize) -> String {
        let per = self.count / pods.max(1) as f64;
        format!("{per:.1}; {:.1} ms", self.mean_ms())
    }
}

impl std::fmt::Display for Passes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {:.1} ms", self.count, self.mean_ms())
    }
}

/// A loopback address nothing listens on, for the controller's /metrics.
fn free_loopback_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_the_median_run_and_the_spread_of_publish_times() {
        let run = |secs: f64, rss_mib: f64| Figures {
            all_published: Duration::from_secs_f64(secs),
            rss_mib,
            ..Figures::default()
        };
        let median = Median::of(vec![run(3.0, 1.0), run(1.0, 2.0), run(2.0, 3.0)]);
        assert_eq!(median.run.rss_mib, 3.0, "the figures of the 2.0 s run");
        assert_eq!(
            median.publish_cell(),
            "2.00 s (median of 3 runs, 1.00-3.00 s; other figures: the median run's)"
        );
        let even = Median::of(vec![
            run(4.0, 1.0),
            run(1.0, 2.0),
            run(3.0, 3.0),
            run(2.0, 4.0),
        ]);
        assert_eq!(even.run.rss_mib, 3.0, "the upper median: the 3.0 s run");
        assert!(even.publish_cell().starts_with("2.50 s (median of 4 runs"));
        assert_eq!(Median::of(vec![run(1.5, 1.0)]).publish_cell(), "1.50 s");
    }

    #[test]
    fn follows_which_pods_carry_an_endpoint_through_patches_and_deletes() {
        let api = FakeApi::start_on_loopback().unwrap();
        let mut published = Published::default();
        api.apply(Kind::Pod, pod(0));
        api.apply(Kind::Pod, pod(1));
        assert_eq!(published.follow(&api), 0);
        let annotate = |endpoint: Value| json!({"metadata": {"annotations": {ENDPOINT: endpoint}}});
        api.patch(
            Kind::Pod,
            "jobs",
            "job-0-rank-0",
            &annotate(json!("h:8000")),
        );
        api.patch(
            Kind::Pod,
            "jobs",
            "job-1-rank-0",
            &annotate(json!("h:8001")),
        );
        assert_eq!(published.follow(&api), 2);
        api.patch(Kind::Pod, "jobs", "job-1-rank-0", &annotate(Value::Null));
        api.delete(Kind::Pod, "jobs", "job-0-rank-0");
        assert_eq!(published.follow(&api), 0);
        // Nothing new: the same answer, from no changes.
        assert_eq!(published.follow(&api), 0);
        api.patch(
            Kind::Pod,
            "jobs",
            "job-1-rank-0",
            &annotate(json!("h:8002")),
        );
        assert_eq!(published.follow(&api), 1);
    }
}
