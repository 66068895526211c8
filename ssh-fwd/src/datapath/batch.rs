//! `BPF_MAP_UPDATE_BATCH` (Linux 5.6): many entries of one map written in
//! one system call, which aya does not offer. A start with 10,000 mappings
//! writes 40,000 entries; one call each cost a tenth of the agent's
//! start-up. Each entry is written as a single update would write it (the
//! kernel loops over them), in order, so a batch keeps the order of
//! [`Maps::apply`](super::maps::Maps::apply)'s groups: one group's batch
//! returns before the next group's starts.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{Pod, maps::MapData};

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// The part of `union bpf_attr` the batch commands use.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// A batch that stopped: the entries before `written` were written.
#[derive(Debug, thiserror::Error)]
#[error("{written} of {count} entries written, then: {source}")]
pub struct BatchError {
    pub written: usize,
    pub count: usize,
    #[source]
    pub source: io::Error,
}

/// Writes `keys[i] -> values[i]` for every `i` into `map`, whose keys are
/// `K` and whose values are `V`.
pub fn update<K: Pod, V: Pod>(map: &MapData, keys: &[K], values: &[V]) -> Result<(), BatchError> {
    assert_eq!(keys.len(), values.len(), "one value per key");
    // SAFETY: `keys` and `values` are `Pod` slices of `count` elements each,
    // the sizes the map was made with (aya checked them when it typed the
    // map).
    unsafe {
        update_raw(
            map,
            keys.as_ptr().cast(),
            values.as_ptr().cast(),
            keys.len(),
        )
    }
}

/// [`update`] for a per-CPU map: `values` holds, for each key, one `V` per
/// possible CPU, each padded to 8 bytes as the kernel lays them out.
pub fn update_per_cpu<K: Pod, V: Pod>(
    map: &MapData,
    keys: &[K],
    values: &[V],
    cpus: usize,
) -> Result<(), BatchError> {
    assert_eq!(size_of::<V>() % 8, 0, "per-CPU values are 8-byte aligned");
    assert_eq!(keys.len() * cpus, values.len(), "one value per key and CPU");
    // SAFETY: as in `update`; each key's value is `cpus` consecutive `V`s,
    // which is the per-CPU layout when `V` is a multiple of 8 bytes long.
    unsafe {
        update_raw(
            map,
            keys.as_ptr().cast(),
            values.as_ptr().cast(),
            keys.len(),
        )
    }
}

/// # Safety
/// `keys` and `values` must point at `count` keys and values of the sizes
/// the map holds, valid for the call.
unsafe fn update_raw(
    map: &MapData,
    keys: *const u8,
    values: *const u8,
    count: usize,
) -> Result<(), BatchError> {
    if count == 0 {
        return Ok(());
    }
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys as u64,
        values: values as u64,
        count: u32::try_from(count).unwrap_or(u32::MAX),
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix for this command, and
    // the caller vouches for the buffers it points at.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_BATCH,
            &raw mut attr,
            size_of::<BatchAttr>(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(BatchError {
        written: attr.count as usize,
        count,
        source: io::Error::last_os_error(),
    })
}
