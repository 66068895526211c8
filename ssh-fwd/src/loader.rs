//! Loads the embedded eBPF object, reusing maps pinned by a previous agent.

use anyhow::Context as _;
use aya::{Ebpf, EbpfLoader};

use crate::{pins::PinLayout, preflight};

/// The eBPF object built by build.rs from `ssh-fwd-ebpf`.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ssh-fwd"));

pub fn load(layout: &PinLayout) -> anyhow::Result<Ebpf> {
    raise_memlock_limit();
    EbpfLoader::new()
        .default_map_pin_directory(layout.maps_dir())
        .load(OBJECT)
        .map_err(|e| {
            let hint = preflight::explain_bpf_error(&e);
            let e = anyhow::Error::new(e);
            match hint {
                Some(hint) => e.context(hint),
                None => e,
            }
        })
        .with_context(|| {
            format!(
                "loading the eBPF object with maps in {}",
                layout.maps_dir().display()
            )
        })
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } != 0 {
        tracing::debug!("could not raise RLIMIT_MEMLOCK; fine on Linux 5.11+");
    }
}
