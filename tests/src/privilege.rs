//! Tests that need root, network namespaces or BPF are marked
//! `#[ignore = "..."]`: a plain `cargo test` reports them as ignored, never
//! as passed. `cargo xtask test` runs them (`--include-ignored`), and each
//! starts with [`require`], which fails with the reason when the machine
//! cannot run it.
//!
//! The tests are one binary, and libtest runs tests of every module side by
//! side, each on a thread of its own. Everything a test makes is named
//! after its process and a counter, so tests share the machine; one whose
//! load is its point (the soak) starts with [`require_alone`] instead, and
//! runs while no other privileged test does. The hold is kept in a
//! thread-local, so it ends with the test's thread, however the test ends.

use std::{
    cell::RefCell,
    sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard},
};

/// Why this process cannot run privileged tests, if it cannot.
pub fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, CAP_BPF, CAP_NET_ADMIN)".into());
    }
    for tool in [
        "ip",
        "nsenter",
        "sshd",
        "ssh",
        "timeout",
        "bpftool",
        "tcpdump",
        "ethtool",
        "prometheus",
        "promtool",
    ] {
        if which(tool).is_none() {
            return Some(format!("needs `{tool}` (cargo xtask setup installs it)"));
        }
    }
    None
}

/// Fails the calling test, saying why, when it cannot run here; then
/// waits while a test runs alone, and shares the machine until the calling
/// thread ends.
pub fn require() {
    fail_unless_privileged();
    hold(&MACHINE, false);
}

/// [`require`] for a test that must have the machine to itself: waits
/// until no other privileged test runs, and holds off the others until the
/// calling thread ends.
pub fn require_alone() {
    fail_unless_privileged();
    hold(&MACHINE, true);
}

/// Shared by the privileged tests running, or held by the one running alone.
static MACHINE: RwLock<()> = RwLock::new(());

/// The calling thread's hold on [`MACHINE`].
enum Hold {
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
    },
    Alone {
        _guard: RwLockWriteGuard<'static, ()>,
    },
}

thread_local! {
    static HELD: RefCell<Option<Hold>> = const { RefCell::new(None) };
}

/// Takes `lock` for the calling thread, `alone` or shared, once: a second
/// call on the same thread keeps the first hold (a test may call
/// [`require`] from its helpers as well).
fn hold(lock: &'static RwLock<()>, alone: bool) {
    HELD.with_borrow_mut(|held| match (&*held, alone) {
        (Some(Hold::Alone { .. }), _) | (Some(Hold::Shared { .. }), false) => {}
        (Some(Hold::Shared { .. }), true) => {
            panic!("require_alone after require on one thread: it would wait for itself")
        }
        (None, false) => {
            *held = Some(Hold::Shared {
                _guard: lock.read().unwrap_or_else(PoisonError::into_inner),
            });
        }
        (None, true) => {
            *held = Some(Hold::Alone {
                _guard: lock.write().unwrap_or_else(PoisonError::into_inner),
            });
        }
    });
}

fn fail_unless_privileged() {
    if let Some(why) = missing() {
        panic!("this test cannot run here: {why}; run it with `sudo -E cargo xtask test`");
    }
}

pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use std::{sync::mpsc, thread, time::Duration};

    use super::*;

    /// A thread that takes `lock` (`alone` or shared), says so, and ends
    /// (letting go) when told to.
    fn holder(lock: &'static RwLock<()>, alone: bool) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (took, taken) = mpsc::channel();
        let (end, ended) = mpsc::channel::<()>();
        thread::spawn(move || {
            // Again, as a test's helper would: the first hold stays.
            hold(lock, alone);
            hold(lock, alone);
            took.send(()).unwrap();
            let _ = ended.recv();
        });
        (taken, end)
    }

    #[test]
    fn a_test_alone_waits_for_the_shared_ones_and_holds_off_the_next_until_its_thread_ends() {
        let lock: &'static RwLock<()> = Box::leak(Box::default());
        let limit = Duration::from_secs(10);
        let (first, end_first) = holder(lock, false);
        first
            .recv_timeout(limit)
            .expect("a shared hold is taken at once");
        let (second, end_second) = holder(lock, false);
        second.recv_timeout(limit).expect("holds are shared");
        let (alone, end_alone) = holder(lock, true);
        let window = Duration::from_millis(300);
        assert!(alone.recv_timeout(window).is_err(), "alone beside others");
        drop((end_first, end_second));
        alone
            .recv_timeout(limit)
            .expect("alone once the others ended");
        let (next, _end_next) = holder(lock, false);
        assert!(next.recv_timeout(window).is_err(), "shared beside alone");
        drop(end_alone);
        next.recv_timeout(limit).expect("shared once alone ended");
    }
}
