//! `BPF_MAP_LOOKUP_AND_DELETE_ELEM` on a hash map (Linux 5.14), which aya
//! offers only for queues and stacks: removes an entry and returns the
//! value it held, in one step, so that the agent decides on exactly what it
//! removed. A plain lookup, then a delete, would remove whatever the kernel
//! programs wrote in between.

use std::{
    io,
    mem::MaybeUninit,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{Pod, maps::MapData};

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
/// Update flag: store only if the key has no entry.
pub const BPF_NOEXIST: u64 = 1;

/// The part of `union bpf_attr` the element commands use.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Removes `key` from `map` and returns its value; `None` if there was none.
pub fn lookup_and_delete<K: Pod, V: Pod>(map: &MapData, key: &K) -> io::Result<Option<V>> {
    let mut value = MaybeUninit::<V>::uninit();
    let attr = ElemAttr {
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(key) as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix for this command, its key
    // points at a `K` and its value at room for a `V`, the sizes the map
    // was made with (aya checked them when it typed the map); both outlive
    // the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_AND_DELETE_ELEM,
            &raw const attr,
            size_of::<ElemAttr>(),
        )
    };
    if rc == 0 {
        // SAFETY: the kernel wrote the value; `V: Pod` takes any bytes.
        return Ok(Some(unsafe { value.assume_init() }));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(None),
        _ => Err(e),
    }
}
