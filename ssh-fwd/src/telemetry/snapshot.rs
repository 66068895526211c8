//! A part of `/metrics` too costly to render on every scrape: the agent's
//! sample per mapping and direction is 65,536 samples and some 50,000 map
//! reads at 16,384 mappings, seconds of work in a debug build. A scrape
//! takes the text of the last rendering; when that is older than
//! [`FRESH`], it starts a new rendering on a thread of its own and waits up
//! to [`WAIT`] for it. Small tables so come out fresh; large ones at most
//! one scrape old, and a scrape never waits on them longer than [`WAIT`].
//! The first rendering starts with the process; only a scrape that comes
//! before it is done, with nothing to serve yet, waits for all of it. At
//! most one rendering runs at a time; one that fails (the maps unreadable
//! for a moment) leaves the last text in place.

use std::{
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

/// A rendering younger than this is served as it is.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long a scrape waits for a new rendering when it has an older one.
pub const WAIT: Duration = Duration::from_millis(30);

/// Renders OpenMetrics families (no `# EOF`) for a scrape; `None` if it
/// cannot now.
pub type Render = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// Rendered text, refreshed on demand off the scrape's path.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
}

struct Inner {
    render: Render,
    fresh: Duration,
    wait: Duration,
    state: Mutex<State>,
    rendered: Condvar,
}

#[derive(Default)]
struct State {
    /// The last rendering and when it started.
    text: Option<(Arc<str>, Instant)>,
    rendering: bool,
}

impl Snapshot {
    /// Starts the first rendering at once.
    pub fn new(render: impl Fn() -> Option<String> + Send + Sync + 'static) -> Self {
        Self::with_timing(FRESH, WAIT, Box::new(render))
    }

    /// As [`Snapshot::new`], with other ages and waits (tests).
    pub fn with_timing(fresh: Duration, wait: Duration, render: Render) -> Self {
        let snapshot = Self {
            inner: Arc::new(Inner {
                render,
                fresh,
                wait,
                state: Mutex::default(),
                rendered: Condvar::new(),
            }),
        };
        snapshot.refresh_if_stale();
        snapshot
    }

    /// The text for this scrape: fresh if it renders within the wait, else
    /// the last one.
    pub fn text(&self) -> Arc<str> {
        self.refresh_if_stale();
        let inner = &self.inner;
        let mut state = inner.lock();
        if state.rendering {
            state = inner
                .rendered
                .wait_timeout_while(state, inner.wait, |s| s.rendering)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.text.is_none() {
            // Nothing else to serve: wait for the whole rendering.
            state = inner
                .rendered
                .wait_while(state, |s| s.rendering)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state
            .text
            .as_ref()
            .map_or_else(|| Arc::from(""), |(text, _)| Arc::clone(text))
    }
}

impl Snapshot {
    /// Starts a rendering unless one runs or the last one is fresh.
    fn refresh_if_stale(&self) {
        let inner = &self.inner;
        let start = {
            let mut state = inner.lock();
            let stale = state
                .text
                .as_ref()
                .is_none_or(|(_, at)| at.elapsed() >= inner.fresh);
            let start = stale && !state.rendering;
            state.rendering |= start;
            start
        };
        if start {
            spawn_rendering(Arc::clone(inner));
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends a rendering however its thread ends, so a panic in `render` does
/// not stop every later one.
struct Rendering(Arc<Inner>);

impl Drop for Rendering {
    fn drop(&mut self) {
        self.0.lock().rendering = false;
        self.0.rendered.notify_all();
    }
}

fn spawn_rendering(inner: Arc<Inner>) {
    let guard = Rendering(inner);
    let spawned = std::thread::Builder::new()
        .name("metrics-render".into())
        .spawn(move || {
            let started = Instant::now();
            if let Some(text) = (guard.0.render)() {
                guard.0.lock().text = Some((text.into(), started));
            }
        });
    if let Err(e) = spawned {
        // The guard went down with the closure: the next scrape tries again.
        tracing::debug!(error = %e, "cannot start a thread to render metrics");
    }
}

#[cfg(test)]
mod tests;
