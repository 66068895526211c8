//! Each test holds its renderings at a gate it opens itself, or waits for
//! what it needs with a deadline, so what it checks does not depend on how
//! fast a loaded machine runs the rendering threads.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::*;

const MS: Duration = Duration::from_millis(1);
/// How long a test waits for what must happen before it fails.
const DEADLINE: Duration = Duration::from_secs(20);

/// Renderings that each wait for the test to let them finish (one
/// message on the gate each), say how many finished before them, and
/// count how many ran at once at most.
struct Gated {
    gate: mpsc::Sender<()>,
    started: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

fn held() -> (Gated, Render) {
    let (gate, opened) = mpsc::channel::<()>();
    let opened = Mutex::new(opened);
    let started = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let running = AtomicUsize::new(0);
    let (s, d, m) = (started.clone(), done.clone(), most_at_once.clone());
    let render = move || {
        s.fetch_add(1, Ordering::SeqCst);
        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(now, Ordering::SeqCst);
        let passed = opened.lock().unwrap().recv_timeout(DEADLINE);
        running.fetch_sub(1, Ordering::SeqCst);
        passed.expect("the test opens the gate");
        Some(format!("rendering {}\n", d.fetch_add(1, Ordering::SeqCst)))
    };
    let gated = Gated {
        gate,
        started,
        done,
        most_at_once,
    };
    (gated, Box::new(render))
}

impl Gated {
    /// Lets the running rendering finish, and waits until `snapshot` holds
    /// its text and renders no more.
    fn finish(&self, snapshot: &Snapshot) {
        self.gate.send(()).unwrap();
        idle(snapshot);
    }
}

/// Waits until no rendering runs.
fn idle(snapshot: &Snapshot) {
    until("the rendering is done", || !snapshot.inner.lock().rendering);
}

/// Waits until `check` holds, failing past [`DEADLINE`].
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        std::thread::sleep(MS);
    }
}

#[test]
fn a_quick_rendering_is_served_fresh_and_reused_while_fresh() {
    let (gated, render) = held();
    // Fresh for longer than any test runs: the first rendering is reused.
    gated.gate.send(()).unwrap();
    let snapshot = Snapshot::with_timing(Duration::from_secs(3600), DEADLINE, render);
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    assert_eq!(gated.started.load(Ordering::SeqCst), 1);
    // Fresh for 50 ms: once that has passed, a scrape renders anew and
    // waits (up to the deadline) for it.
    let (gated, render) = held();
    let snapshot = Snapshot::with_timing(50 * MS, DEADLINE, render);
    gated.finish(&snapshot);
    std::thread::sleep(60 * MS);
    gated.gate.send(()).unwrap();
    assert_eq!(&*snapshot.text(), "rendering 1\n");
    assert_eq!(gated.done.load(Ordering::SeqCst), 2);
}

#[test]
fn a_slow_rendering_keeps_scrapes_short_and_is_served_by_the_next() {
    let (gated, render) = held();
    let snapshot = Snapshot::with_timing(Duration::ZERO, 20 * MS, render);
    // The first rendering started with the snapshot; with nothing to serve
    // yet, the first scrape waits for all of it.
    gated.gate.send(()).unwrap();
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    // The next rendering is held until the test lets it go: every scrape
    // meanwhile returns (it does not wait for the rendering) with the last
    // finished one, and starts no second rendering beside it.
    for _ in 0..5 {
        assert_eq!(&*snapshot.text(), "rendering 0\n");
    }
    until("the second rendering runs", || {
        gated.started.load(Ordering::SeqCst) == 2
    });
    assert_eq!(gated.started.load(Ordering::SeqCst), 2, "one at a time");
    // Once it is done, the next scrape serves it (and starts the third,
    // held again).
    gated.finish(&snapshot);
    assert_eq!(&*snapshot.text(), "rendering 1\n");
    gated.finish(&snapshot);
    until("a scrape serves the third", || {
        &*snapshot.text() == "rendering 2\n"
    });
    assert_eq!(
        gated.most_at_once.load(Ordering::SeqCst),
        1,
        "renderings overlapped"
    );
    // Let the one the last scrape started go.
    gated.gate.send(()).unwrap();
}

#[test]
fn scrapes_at_once_share_one_rendering() {
    let (gated, render) = held();
    let snapshot = Snapshot::with_timing(Duration::from_secs(3600), DEADLINE, render);
    let texts: Vec<Arc<str>> = std::thread::scope(|s| {
        let scrapes: Vec<_> = (0..8).map(|_| s.spawn(|| snapshot.text())).collect();
        gated.gate.send(()).unwrap();
        scrapes
            .into_iter()
            .map(|t| t.join().expect("scrape"))
            .collect()
    });
    assert!(texts.iter().all(|t| &**t == "rendering 0\n"), "{texts:?}");
    assert_eq!(gated.done.load(Ordering::SeqCst), 1);
    assert_eq!(gated.most_at_once.load(Ordering::SeqCst), 1);
}

#[test]
fn a_rendering_that_panics_does_not_stop_later_ones() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let render = move || {
        assert!(
            c.fetch_add(1, Ordering::SeqCst) > 0,
            "the first rendering fails"
        );
        Some("recovered\n".to_owned())
    };
    let snapshot = Snapshot::with_timing(Duration::ZERO, 100 * MS, Box::new(render));
    // A scrape after the panic returns, and a later one is served.
    until("a rendering after the panic is served", || {
        &*snapshot.text() == "recovered\n"
    });
    assert!(calls.load(Ordering::SeqCst) >= 2);
}

#[test]
fn a_rendering_that_cannot_be_done_keeps_the_last_text() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let render = move || (c.fetch_add(1, Ordering::SeqCst) == 0).then(|| "first\n".to_owned());
    let snapshot = Snapshot::with_timing(Duration::ZERO, 100 * MS, Box::new(render));
    assert_eq!(&*snapshot.text(), "first\n");
    // Each scrape finds the text stale and starts a rendering, which
    // yields nothing: the last text stays.
    until("it tries again", || {
        assert_eq!(&*snapshot.text(), "first\n");
        calls.load(Ordering::SeqCst) >= 2
    });
}
