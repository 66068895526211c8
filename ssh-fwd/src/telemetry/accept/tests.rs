use std::{
    collections::VecDeque,
    io,
    sync::{Arc, Mutex},
};

use tokio::io::DuplexStream;

use super::*;

/// One answer of the scripted listener.
#[derive(Clone, Copy)]
enum Step {
    Fail(i32),
    Accept,
    /// A connection arrives after this long.
    AcceptAfter(Duration),
}
use Step::{Accept, AcceptAfter, Fail};

/// A listener that answers from a script and records when each accept was
/// tried.
struct Scripted {
    script: VecDeque<Step>,
    tries: Arc<Mutex<Vec<Instant>>>,
}

impl RawAccept for Scripted {
    type Io = DuplexStream;

    async fn accept(&mut self) -> io::Result<(DuplexStream, SocketAddr)> {
        self.tries.lock().expect("tries").push(Instant::now());
        let step = self
            .script
            .pop_front()
            .expect("the test accepts no more than scripted");
        let wait = match step {
            Fail(errno) => return Err(io::Error::from_raw_os_error(errno)),
            Accept => Duration::ZERO,
            AcceptAfter(wait) => wait,
        };
        tokio::time::sleep(wait).await;
        Ok((
            tokio::io::duplex(64).0,
            "127.0.0.1:1".parse().expect("addr"),
        ))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok("127.0.0.1:9102".parse().expect("addr"))
    }
}

/// The log lines written while the guard of [`Logs::capture`] lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().expect("logs"))
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn count(&self, level: &str, needle: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.contains(level) && l.contains(needle))
            .count()
    }
}

fn scripted(script: &[Step]) -> (Accepting<Scripted>, Counter, Arc<Mutex<Vec<Instant>>>) {
    let tries = Arc::default();
    let errors = Counter::default();
    let listener = Scripted {
        script: script.iter().copied().collect(),
        tries: Arc::clone(&tries),
    };
    (
        Accepting::with_counter(listener, Server::Metrics, errors.clone()),
        errors,
        tries,
    )
}

/// Milliseconds between consecutive tries.
fn pauses(tries: &Mutex<Vec<Instant>>) -> Vec<u128> {
    let tries = tries.lock().expect("tries");
    tries
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect()
}

const EMFILE: Step = Fail(libc::EMFILE);
const LATER: Step = AcceptAfter(SETTLE);

#[tokio::test(start_paused = true)]
async fn running_out_of_descriptors_backs_off_warns_once_and_says_when_it_recovers() {
    let (logs, _guard) = Logs::capture();
    let mut script = vec![EMFILE; 9];
    script.extend([Accept, LATER]);
    let (mut listener, errors, tries) = scripted(&script);
    listener.next().await;
    assert_eq!(pauses(&tries), [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    assert_eq!(errors.get(), 9);
    assert_eq!(
        logs.count("WARN", "cannot accept connections"),
        1,
        "{:?}",
        logs.lines()
    );
    assert_eq!(logs.count("WARN", "ulimit -n"), 1, "{:?}", logs.lines());
    // Recovered only once accepting has worked for a while.
    assert_eq!(
        logs.count("INFO", "accepting connections again"),
        0,
        "{:?}",
        logs.lines()
    );
    listener.next().await;
    assert_eq!(
        logs.count("INFO", "accepting connections again"),
        1,
        "{:?}",
        logs.lines()
    );
    assert_eq!(
        logs.count("INFO", "failed_accepts=9"),
        1,
        "{:?}",
        logs.lines()
    );
}

#[tokio::test(start_paused = true)]
async fn accepts_that_alternate_with_failures_are_one_episode() {
    let (logs, _guard) = Logs::capture();
    // As while descriptors are scarce: each connection that ends frees one.
    let (mut listener, errors, tries) = scripted(&[
        EMFILE, EMFILE, Accept, EMFILE, Accept, EMFILE, EMFILE, Accept, LATER,
    ]);
    for _ in 0..4 {
        listener.next().await;
    }
    // After an accept the pause starts short again.
    assert_eq!(pauses(&tries), [10, 20, 0, 10, 0, 10, 20, 0]);
    assert_eq!(errors.get(), 5);
    assert_eq!(
        logs.count("WARN", "cannot accept connections"),
        1,
        "{:?}",
        logs.lines()
    );
    assert_eq!(
        logs.count("INFO", "accepting connections again"),
        1,
        "{:?}",
        logs.lines()
    );
    assert_eq!(
        logs.count("INFO", "failed_accepts=5"),
        1,
        "{:?}",
        logs.lines()
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_gone_before_its_accept_is_skipped_at_once_and_quietly() {
    let (logs, _guard) = Logs::capture();
    let (mut listener, errors, tries) = scripted(&[
        Fail(libc::ECONNABORTED),
        Fail(libc::EPROTO),
        Fail(libc::ENETUNREACH),
        Accept,
    ]);
    listener.next().await;
    assert_eq!(pauses(&tries), [0, 0, 0]);
    assert_eq!(errors.get(), 0);
    assert_eq!(logs.lines(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn each_episode_is_reported_once() {
    let (logs, _guard) = Logs::capture();
    let enfile = Fail(libc::ENFILE);
    let (mut listener, errors, _) =
        scripted(&[EMFILE, EMFILE, LATER, LATER, enfile, enfile, LATER, LATER]);
    for _ in 0..4 {
        listener.next().await;
    }
    assert_eq!(errors.get(), 4);
    assert_eq!(
        logs.count("WARN", "cannot accept connections"),
        2,
        "{:?}",
        logs.lines()
    );
    assert_eq!(logs.count("WARN", "fs.file-max"), 1, "{:?}", logs.lines());
    assert_eq!(
        logs.count("INFO", "accepting connections again"),
        2,
        "{:?}",
        logs.lines()
    );
}

#[tokio::test]
async fn the_failures_are_exported_by_server() {
    let label = ServerLabel {
        server: Server::Webhook,
    };
    let before = ACCEPT_ERRORS.get_or_create(&label).get();
    let listener = Scripted {
        script: [EMFILE, Accept].into_iter().collect(),
        tries: Arc::default(),
    };
    Accepting::new(listener, Server::Webhook).next().await;
    let text = super::super::metrics::render(&Registry::default());
    let line = format!(
        "ssh_fwd_accept_errors_total{{server=\"webhook\"}} {}",
        before + 1
    );
    assert!(text.contains(&line), "{text}");
}
