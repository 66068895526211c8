use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use super::*;

/// A rendering that takes `took` and says how many came before it; counts
/// how many ran at once at most.
fn counting(took: Duration) -> (Render, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let done = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let (d, m) = (Arc::clone(&done), Arc::clone(&most_at_once));
    let render = move || {
        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(took);
        running.fetch_sub(1, Ordering::SeqCst);
        Some(format!("rendering {}\n", d.fetch_add(1, Ordering::SeqCst)))
    };
    (Box::new(render), done, most_at_once)
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_quick_rendering_is_served_fresh_and_reused_while_fresh() {
    let (render, done, _) = counting(MS);
    let snapshot = Snapshot::with_timing(200 * MS, 100 * MS, render);
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    std::thread::sleep(250 * MS);
    assert_eq!(&*snapshot.text(), "rendering 1\n");
    assert_eq!(done.load(Ordering::SeqCst), 2);
}

#[test]
fn a_slow_rendering_keeps_scrapes_short_and_is_served_by_the_next() {
    let (render, done, most_at_once) = counting(300 * MS);
    let snapshot = Snapshot::with_timing(Duration::ZERO, 20 * MS, render);
    // The first rendering started with the snapshot; with nothing to serve
    // yet, the first scrape waits for it.
    assert_eq!(&*snapshot.text(), "rendering 0\n");
    // Every later one waits no longer than the wait, and gets the newest
    // finished rendering.
    let started = Instant::now();
    let mut seen = vec![];
    while started.elapsed() < 1000 * MS {
        let asked = Instant::now();
        let text = snapshot.text();
        assert!(
            asked.elapsed() < 200 * MS,
            "a scrape waited {:?}",
            asked.elapsed()
        );
        seen.push(text);
        std::thread::sleep(10 * MS);
    }
    assert!(seen.iter().any(|t| &**t == "rendering 0\n"));
    assert!(seen.iter().any(|t| &**t == "rendering 2\n"), "{seen:?}");
    assert_eq!(
        most_at_once.load(Ordering::SeqCst),
        1,
        "renderings overlapped"
    );
    assert!(done.load(Ordering::SeqCst) <= 5);
}

#[test]
fn scrapes_at_once_share_one_rendering() {
    let (render, done, most_at_once) = counting(50 * MS);
    let snapshot = Snapshot::with_timing(Duration::from_secs(60), Duration::from_secs(1), render);
    let texts: Vec<Arc<str>> = std::thread::scope(|s| {
        let scrapes: Vec<_> = (0..8).map(|_| s.spawn(|| snapshot.text())).collect();
        scrapes
            .into_iter()
            .map(|t| t.join().expect("scrape"))
            .collect()
    });
    assert!(texts.iter().all(|t| &**t == "rendering 0\n"), "{texts:?}");
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert_eq!(most_at_once.load(Ordering::SeqCst), 1);
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
    let texts: Vec<Arc<str>> = (0..3).map(|_| snapshot.text()).collect();
    assert_eq!(&*texts[0], "", "nothing rendered yet");
    assert!(texts.iter().any(|t| &**t == "recovered\n"), "{texts:?}");
}

#[test]
fn a_rendering_that_cannot_be_done_keeps_the_last_text() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let render = move || (c.fetch_add(1, Ordering::SeqCst) == 0).then(|| "first\n".to_owned());
    let snapshot = Snapshot::with_timing(Duration::ZERO, 100 * MS, Box::new(render));
    assert_eq!(&*snapshot.text(), "first\n");
    assert_eq!(&*snapshot.text(), "first\n");
    assert!(calls.load(Ordering::SeqCst) >= 2, "it tried again");
}
