//! The batch map commands (Linux 5.6), which aya does not offer.
//!
//! `BPF_MAP_UPDATE_BATCH`: many entries of one map written in one system
//! call. A start with 10,000 mappings
//! writes 40,000 entries; one call each cost a tenth of the agent's
//! start-up. Each entry is written as a single update would write it (the
//! kernel loops over them), in order, so a batch keeps the order of
//! [`Maps::apply`](super::maps::Maps::apply)'s groups: one group's batch
//! returns before the next group's starts.
//!
//! `BPF_MAP_LOOKUP_BATCH` on a hash map: every entry, read a bucket at a
//! time. A walk with `BPF_MAP_GET_NEXT_KEY` starts over from the first
//! bucket whenever the key it stands on was removed, so a table the kernel
//! churns (an LRU under a SYN flood) may never let it finish; a batch walk
//! goes through the buckets by their number and ends after the last,
//! whatever is removed or added meanwhile (an entry added or moved behind
//! it is missed, one moved ahead may be read twice: right for counts and
//! sweeps, which see the rest at the next walk).

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{Pod, maps::MapData};

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// Entries asked for per lookup call: a bucket holding more than this
/// answers ENOSPC, and the call is retried with room for more.
const CHUNK: usize = 4_096;

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

/// Runs the batch command `cmd` on `attr`; the kernel writes back how many
/// entries it handled into `attr.count`.
///
/// # Safety
/// `attr` is a valid `bpf_attr` prefix for `cmd`, and the buffers it
/// points at have room for `attr.count` keys and values of the sizes the
/// map holds, valid for the call.
unsafe fn bpf_batch(cmd: libc::c_long, attr: &mut BatchAttr) -> io::Result<()> {
    // SAFETY: the caller vouches for `attr` and its buffers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<BatchAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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
    unsafe { bpf_batch(BPF_MAP_UPDATE_BATCH, &mut attr) }.map_err(|source| BatchError {
        written: attr.count as usize,
        count,
        source,
    })
}

/// Every entry of the hash map `map`, at most `limit` of them.
pub fn entries<K: Pod, V: Pod>(map: &MapData, limit: usize) -> io::Result<Vec<(K, V)>> {
    let mut out = Vec::new();
    // The position: a bucket number for the hash maps.
    let mut position: u32 = 0;
    let mut next: u32 = 0;
    let mut first = true;
    let mut chunk = CHUNK;
    loop {
        let room = chunk.min(limit.saturating_sub(out.len()).max(1));
        let mut keys: Vec<K> = Vec::with_capacity(room);
        let mut values: Vec<V> = Vec::with_capacity(room);
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                std::ptr::from_ref(&position) as u64
            },
            out_batch: std::ptr::from_mut(&mut next) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: room as u32,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: `attr` is a valid `bpf_attr` prefix for this command; the
        // key and value buffers have room for `count` entries of the sizes
        // the map was made with (aya checked them when it typed the map),
        // and the batch tokens are the 4-byte bucket numbers hash maps
        // use; all outlive the call.
        let err = unsafe { bpf_batch(BPF_MAP_LOOKUP_BATCH, &mut attr) }.err();
        match err.as_ref().and_then(io::Error::raw_os_error) {
            None | Some(libc::ENOENT) => {}
            Some(libc::ENOSPC) if room < limit.max(1) => {
                // One bucket holds more than `room`: ask for more at once.
                chunk = room * 2;
                continue;
            }
            _ => return Err(err.unwrap_or_else(|| io::Error::other("batch lookup failed"))),
        }
        let filled = (attr.count as usize).min(room);
        // SAFETY: the kernel wrote `filled` keys and values; `Pod` types
        // take any bytes.
        unsafe {
            keys.set_len(filled);
            values.set_len(filled);
        }
        out.extend(keys.into_iter().zip(values));
        if err.is_some() || out.len() >= limit {
            return Ok(out);
        }
        position = next;
        first = false;
    }
}
