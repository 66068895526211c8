//! Forwards the programs' aya-log records into tracing.

use aya::Ebpf;
use tokio::io::unix::AsyncFd;

pub fn forward(ebpf: &mut Ebpf) {
    let logger = match aya_log::EbpfLogger::init(ebpf) {
        Ok(logger) => logger,
        Err(e) => {
            tracing::debug!(error = %e, "kernel programs have no log buffer; continuing without their logs");
            return;
        }
    };
    // SAFETY: the logger owns its fd and the AsyncFd owns the logger, so the
    // fd stays open exactly as long as it is registered.
    let registered =
        unsafe { AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE) };
    let mut fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            tracing::warn!(error = %e, "cannot poll the kernel programs' log buffer");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else {
                return;
            };
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
