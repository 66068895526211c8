//! What each client holds ([`SOURCES`], [`SOURCES6`]), changed the only
//! way that loses nothing the programs count meanwhile: by the kernel,
//! which adds atomically. The agent runs the never-attached program
//! [`PROG_QUOTA`] on a frame that says the change (`BPF_PROG_TEST_RUN`);
//! see [`QuotaChange`].

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
    sync::Arc,
};

use anyhow::{Context as _, anyhow};
use aya::{
    Ebpf, Pod,
    maps::{HashMap, MapData},
    programs::{ProgramFd, Xdp},
};
use ssh_fwd_common::maps::{PROG_QUOTA, QuotaChange};

use super::table::{Quota, Table};
use crate::datapath::object;

/// The loaded [`PROG_QUOTA`]; cheap to clone, for the sweep's thread.
#[derive(Clone, Debug)]
pub struct Adder {
    program: Arc<ProgramFd>,
}

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `XDP_PASS`: the program made the change.
const XDP_PASS: u32 = 2;

/// The part of `union bpf_attr` `BPF_PROG_TEST_RUN` reads, up to the
/// output fields it writes (`retval`, `duration`).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

impl Adder {
    /// Hands [`PROG_QUOTA`] to the verifier.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> anyhow::Result<Self> {
        let prog: &mut Xdp = ebpf
            .program_mut(PROG_QUOTA)
            .ok_or_else(|| anyhow!("eBPF object lacks {PROG_QUOTA}; rebuild ssh-fwd"))?
            .try_into()
            .context(PROG_QUOTA)?;
        object::retrying(|| prog.load())
            .map_err(|e| object::verifier_to_debug(PROG_QUOTA, e))
            .with_context(|| format!("loading program {PROG_QUOTA}"))?;
        let program = prog
            .fd()
            .context(PROG_QUOTA)?
            .try_clone()
            .context(PROG_QUOTA)?;
        Ok(Self {
            program: Arc::new(program),
        })
    }

    /// Makes `change` in the kernel.
    pub fn apply(&self, change: &QuotaChange) -> io::Result<()> {
        let frame = change.to_frame();
        let mut attr = TestRunAttr {
            prog_fd: self.program.as_fd().as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat: 1,
            ..TestRunAttr::default()
        };
        // SAFETY: `attr` is a valid `bpf_attr` prefix for this command; its
        // input points at `frame`, which outlives the call, and it asks
        // for no output but its own fields.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &raw mut attr,
                size_of::<TestRunAttr>(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if attr.retval != XDP_PASS {
            return Err(io::Error::other(format!(
                "{PROG_QUOTA} refused the change {change:?} (verdict {})",
                attr.retval
            )));
        }
        Ok(())
    }
}

/// One family's quota table, changed through an [`Adder`].
pub struct Counted<'a, S: Pod> {
    pub table: &'a mut HashMap<MapData, S, u64>,
    pub adder: &'a Adder,
    /// [`QuotaChange::V4`] or [`QuotaChange::V6`].
    pub family: u32,
}

impl<S: Pod + Into<u64>> Table<S, u64> for Counted<'_, S> {
    fn entries(&self) -> Vec<(S, u64)> {
        self.table.entries()
    }

    fn get(&self, key: &S) -> Option<u64> {
        Table::get(&*self.table, key)
    }

    fn take(&mut self, key: &S) -> Option<u64> {
        self.table.take(key)
    }

    fn put_back(&mut self, key: &S, value: &u64) -> bool {
        self.table.put_back(key, value)
    }
}

impl<S: Pod + Into<u64>> Quota<S> for Counted<'_, S> {
    fn add(&mut self, source: &S, n: u64) {
        let change = QuotaChange {
            source: (*source).into(),
            delta: n,
            family: self.family,
            _pad: 0,
        };
        if let Err(e) = self.adder.apply(&change) {
            tracing::warn!(
                error = %e,
                "cannot change a client's count of connections (--conns-per-source); it may be \
                 held to fewer connections than the limit"
            );
        }
    }
}
