use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::*;

#[tokio::test]
async fn a_rejected_mappings_file_is_handed_to_the_reconciler_as_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mappings.yaml");
    std::fs::write(
        &path,
        "mappings:\n  - frontend: 198.18.0.10:8022\n    backend: 10.244.1.5:22\n",
    )
    .unwrap();
    let args = super::super::args::parse([
        "--external-iface",
        "eth0",
        "--ssh-ip",
        "198.18.0.10",
        "--mappings",
        path.to_str().unwrap(),
    ])
    .unwrap();
    let mut file = FileSource::open(path.clone(), &args).await.unwrap();
    std::fs::write(&path, "mappings:\n  - frontend: nonsense\n").unwrap();
    // The reconciler counts it (`Reconciler::rejected`), once.
    let next = file
        .reload("SIGHUP", Instant::now(), &Snapshot::read(&path))
        .await;
    assert!(matches!(next, Next::Rejected(_)), "rejected whole");
    assert_eq!(file.applied.len(), 1, "the accepted file stays applied");
}

#[tokio::test]
async fn a_stalled_api_server_stops_start_up_with_a_message_naming_it() {
    let api = ssh_fwd_tests::fake_api::FakeApi::start_on_loopback().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    api.stall();
    let args = super::super::args::parse([
        "--external-iface",
        "eth0",
        "--kubernetes",
        "--ssh-ip",
        "198.18.0.10",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ])
    .unwrap();
    let opened = tokio::time::timeout(
        Duration::from_secs(60),
        KubeFollower::open(&args, &AgentMetrics::new()),
    )
    .await
    .expect("start-up hangs on a stalled API server");
    let e = format!("{:#}", opened.err().expect("start-up must fail"));
    assert!(
        e.contains(&format!("http://{}", api.addr())) && e.contains("did not answer"),
        "{e}"
    );
}

/// A FIFO at `path` whose `n`-th open for reading gets `texts[n]` (the
/// last one from then on), as a file a writer changes between two
/// reads. Ends when `stop` is set.
fn serve_reads(
    path: &std::path::Path,
    texts: Vec<String>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let path = path.to_owned();
    std::thread::spawn(move || {
        let mut served = 0;
        while !stop.load(Ordering::Relaxed) {
            // Fails with ENXIO until a reader opens the FIFO.
            let Ok(mut w) = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
            else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            let text = &texts[served.min(texts.len() - 1)];
            w.write_all(text.as_bytes()).unwrap();
            drop(w);
            served += 1;
            // The reader sees its end of file before the next writer.
            std::thread::sleep(Duration::from_millis(30));
        }
        served
    })
}

#[tokio::test]
async fn the_text_applied_is_the_text_that_stayed_the_same_across_the_settle_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mappings.yaml");
    let entry =
        |port: u16| format!("  - frontend: 198.18.0.10:{port}\n    backend: 10.244.1.5:22\n");
    std::fs::write(&path, format!("mappings:\n{}", entry(8022))).unwrap();
    let args = super::super::args::parse([
        "--external-iface",
        "eth0",
        "--ssh-ip",
        "198.18.0.10",
        "--mappings",
        path.to_str().unwrap(),
        "--watch-interval",
        "10ms",
        "--settle-interval",
        "100ms",
    ])
    .unwrap();
    let mut file = FileSource::open(path.clone(), &args).await.unwrap();
    // Two entries at the poll and after the settle interval; then a
    // writer truncates it and is half way through again.
    let whole = format!("mappings:\n{}{}", entry(8023), entry(8024));
    let half = format!("mappings:\n{}", entry(8023));
    std::fs::remove_file(&path).unwrap();
    let stop = Arc::default();
    let writer = serve_reads(
        &path,
        vec![whole.clone(), whole.clone(), half],
        Arc::clone(&stop),
    );
    let next = tokio::time::timeout(Duration::from_secs(10), file.next())
        .await
        .expect("a change");
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(matches!(next, Next::Apply(_)));
    assert_eq!(
        file.applied.len(),
        2,
        "the bytes applied must be those compared: {:?}",
        file.applied
    );
    assert_eq!(file.last_text.bytes(), Some(whole.as_bytes()));
}
