//! Asking the kernel: each probe loads a trivial program, creates a tiny
//! map or makes a call the feature answers differently from a kernel
//! without it, and closes whatever it made. aya's probes
//! (`is_map_supported`, `is_program_supported`, `is_helper_supported`)
//! where they exist; the bpf(2) calls aya has no probe for (tcx and XDP
//! links, batch operations, an LRU's flags, getpeername's attach type) are
//! made here.
//!
//! Only the XDP link probe touches anything outside itself: a
//! pass-everything XDP program on `lo` in generic mode, detached as its
//! link's descriptor closes (the kernel has no error that tells a kernel
//! without XDP links from a missing interface).

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_map_supported, is_program_supported},
};

use super::{Feature, Probed};

/// `enum bpf_cmd`, `enum bpf_prog_type`, `enum bpf_map_type`,
/// `enum bpf_attach_type` (include/uapi/linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_LINK_CREATE: libc::c_long = 28;
const PROG_TYPE_SCHED_CLS: u32 = 3;
const PROG_TYPE_XDP: u32 = 6;
const PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
const MAP_TYPE_HASH: u32 = 1;
const MAP_TYPE_LRU_HASH: u32 = 9;
const ATTACH_CGROUP_INET4_GETPEERNAME: u32 = 29;
const ATTACH_XDP: u32 = 37;
const ATTACH_TCX_INGRESS: u32 = 46;
const BPF_F_NO_COMMON_LRU: u32 = 1 << 1;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

/// The helpers each group of programs calls (directly, or through
/// aya-ebpf's map and context methods), kept with `ssh-fwd-ebpf/src`.
const TC_HELPERS: &[BpfHelper] = &[
    BpfHelper::BPF_FUNC_map_lookup_elem,
    BpfHelper::BPF_FUNC_map_update_elem,
    BpfHelper::BPF_FUNC_map_delete_elem,
    BpfHelper::BPF_FUNC_ktime_get_ns,
    BpfHelper::BPF_FUNC_ktime_get_coarse_ns,
    BpfHelper::BPF_FUNC_redirect,
    BpfHelper::BPF_FUNC_redirect_neigh,
    BpfHelper::BPF_FUNC_redirect_peer,
    BpfHelper::BPF_FUNC_fib_lookup,
    BpfHelper::BPF_FUNC_skb_load_bytes,
    BpfHelper::BPF_FUNC_skb_store_bytes,
    BpfHelper::BPF_FUNC_l3_csum_replace,
    BpfHelper::BPF_FUNC_l4_csum_replace,
    BpfHelper::BPF_FUNC_csum_diff,
    BpfHelper::BPF_FUNC_csum_update,
    BpfHelper::BPF_FUNC_skb_adjust_room,
    BpfHelper::BPF_FUNC_skb_change_tail,
    BpfHelper::BPF_FUNC_check_mtu,
    BpfHelper::BPF_FUNC_ringbuf_reserve,
    BpfHelper::BPF_FUNC_ringbuf_submit,
];
const XDP_HELPERS: &[BpfHelper] = &[
    BpfHelper::BPF_FUNC_map_lookup_elem,
    BpfHelper::BPF_FUNC_map_update_elem,
    BpfHelper::BPF_FUNC_map_delete_elem,
    BpfHelper::BPF_FUNC_ktime_get_ns,
    BpfHelper::BPF_FUNC_ktime_get_coarse_ns,
    BpfHelper::BPF_FUNC_redirect,
    BpfHelper::BPF_FUNC_fib_lookup,
    BpfHelper::BPF_FUNC_csum_diff,
    BpfHelper::BPF_FUNC_xdp_adjust_head,
    BpfHelper::BPF_FUNC_xdp_adjust_tail,
    BpfHelper::BPF_FUNC_xdp_load_bytes,
    BpfHelper::BPF_FUNC_ringbuf_reserve,
    BpfHelper::BPF_FUNC_ringbuf_submit,
];
const HAIRPIN_HELPERS: &[BpfHelper] = &[
    BpfHelper::BPF_FUNC_map_lookup_elem,
    BpfHelper::BPF_FUNC_map_update_elem,
    BpfHelper::BPF_FUNC_map_delete_elem,
    BpfHelper::BPF_FUNC_get_socket_cookie,
];

/// What one probe found: the feature's presence, and for a missing one
/// the kernel's words (for the debug log).
pub struct Finding {
    pub feature: Feature,
    pub present: bool,
    pub detail: String,
}

/// Probes every feature. A probe that fails in an unexpected way counts
/// the feature present: loading the data path then says what is wrong,
/// which a wrong "missing" would hide behind a fallback.
pub fn probe_all() -> (Probed, Vec<Finding>) {
    let mut probed = Probed::all_present();
    let mut findings = Vec::new();
    // bpf(2) refused outright (seccomp, no CAP_BPF): every probe would
    // fail, and a feature "missing" would hide the cause, which the
    // preflight and the load name.
    if let Err(e) = map_create(MAP_TYPE_HASH, 0)
        && matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
    {
        tracing::debug!(error = %e, "bpf(2) refused; kernel features not probed");
        return (probed, findings);
    }
    for feature in Feature::ALL {
        let (present, detail) = match probe(feature) {
            Ok(Ok(())) => (true, String::new()),
            Ok(Err(why)) => (false, why),
            Err(e) => {
                tracing::debug!(feature = feature.name(), error = %e, "probe inconclusive; taken as present");
                (true, String::new())
            }
        };
        probed.set(feature, present);
        findings.push(Finding {
            feature,
            present,
            detail,
        });
    }
    (probed, findings)
}

/// `Ok(Ok(()))`: present; `Ok(Err(why))`: missing; `Err`: cannot tell.
fn probe(feature: Feature) -> io::Result<Result<(), String>> {
    match feature {
        Feature::Tcx => tcx(),
        Feature::XdpLink => xdp_link(),
        Feature::RingBuffer => {
            let ok = is_map_supported(MapType::RingBuf).map_err(io::Error::other)?;
            Ok(ok
                .then_some(())
                .ok_or_else(|| "BPF_MAP_TYPE_RINGBUF refused".into()))
        }
        Feature::BatchMapOps => batch(),
        Feature::PerCpuLru => match map_create(MAP_TYPE_LRU_HASH, BPF_F_NO_COMMON_LRU) {
            Ok(_map) => Ok(Ok(())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                Ok(Err(format!("LRU hash with BPF_F_NO_COMMON_LRU: {e}")))
            }
            Err(e) => Err(e),
        },
        Feature::CgroupConnect => {
            let ok = is_program_supported(ProgramType::CgroupSockAddr).map_err(io::Error::other)?;
            Ok(ok
                .then_some(())
                .ok_or_else(|| "BPF_PROG_TYPE_CGROUP_SOCK_ADDR refused".into()))
        }
        Feature::CgroupGetpeername => {
            match prog_load(PROG_TYPE_CGROUP_SOCK_ADDR, ATTACH_CGROUP_INET4_GETPEERNAME) {
                Ok(_prog) => Ok(Ok(())),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    Ok(Err(format!("BPF_CGROUP_INET4_GETPEERNAME refused: {e}")))
                }
                Err(e) => Err(e),
            }
        }
        Feature::TcHelpers => helpers(ProgramType::SchedClassifier, TC_HELPERS),
        Feature::XdpHelpers => helpers(ProgramType::Xdp, XDP_HELPERS),
        Feature::HairpinHelpers => helpers(ProgramType::CgroupSockAddr, HAIRPIN_HELPERS),
    }
}

fn helpers(program: ProgramType, helpers: &[BpfHelper]) -> io::Result<Result<(), String>> {
    let mut missing = Vec::new();
    for helper in helpers {
        if !is_helper_supported(program, *helper).map_err(io::Error::other)? {
            missing.push(format!("{helper:?}"));
        }
    }
    Ok(if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing from {program:?}: {}", missing.join(", ")))
    })
}

/// A tcx link to an interface that does not exist: ENODEV where tcx is
/// known, EINVAL where the attach type is not.
fn tcx() -> io::Result<Result<(), String>> {
    let prog = prog_load(PROG_TYPE_SCHED_CLS, 0)?;
    match link_create(&prog, u32::MAX, ATTACH_TCX_INGRESS, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok(Err(format!("BPF_LINK_CREATE with BPF_TCX_INGRESS: {e}")))
        }
        Err(e) => Err(e),
        Ok(_link) => Ok(Ok(())),
    }
}

/// An XDP link on `lo` in generic mode, closed at once. EBUSY or EEXIST
/// (another XDP program on `lo`) still means the link type is known.
fn xdp_link() -> io::Result<Result<(), String>> {
    let prog = prog_load(PROG_TYPE_XDP, 0)?;
    match link_create(&prog, 1, ATTACH_XDP, XDP_FLAGS_SKB_MODE) {
        Ok(_link) => Ok(Ok(())),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) => Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok(Err(format!("BPF_LINK_CREATE with BPF_XDP: {e}")))
        }
        Err(e) => Err(e),
    }
}

/// A batch lookup on an empty hash map: ENOENT where the command is
/// known, EINVAL where it is not.
fn batch() -> io::Result<Result<(), String>> {
    let map = map_create(MAP_TYPE_HASH, 0)?;
    let mut keys = [0u32; 1];
    let mut values = [0u32; 1];
    let mut out_batch = 0u32;
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: std::ptr::from_mut(&mut out_batch) as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: 1,
        map_fd: raw(&map),
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: a `bpf_attr` prefix for BPF_MAP_LOOKUP_BATCH whose buffers
    // hold one 4-byte key and value, alive for the call.
    match unsafe {
        sys_bpf(
            BPF_MAP_LOOKUP_BATCH,
            std::ptr::from_mut(&mut attr).cast(),
            size_of::<BatchAttr>(),
        )
    } {
        Ok(_) => Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok(Err(format!("BPF_MAP_LOOKUP_BATCH: {e}")))
        }
        Err(e) => Err(e),
    }
}

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

/// The prefix of `union bpf_attr` BPF_PROG_LOAD reads here.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The prefix of `union bpf_attr` BPF_LINK_CREATE reads here (tcx's
/// relative fd and expected revision left zero).
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target: u32,
    attach_type: u32,
    flags: u32,
    relative: u32,
    pad: u32,
    expected_revision: u64,
}

#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// `r0 = 1; exit`: accepted by every program type probed here (a
/// sock_addr program must return 1).
fn prog_load(prog_type: u32, expected_attach_type: u32) -> io::Result<OwnedFd> {
    let insns: [u64; 2] = [
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0, imm 1
        0xb7 | (1u64 << 32),
        // BPF_JMP | BPF_EXIT
        0x95,
    ];
    let license = c"GPL";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: 2,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: [0; 16],
        prog_ifindex: 0,
        expected_attach_type,
    };
    // SAFETY: a BPF_PROG_LOAD prefix whose pointers are alive for the call.
    let rc = unsafe {
        sys_bpf(
            BPF_PROG_LOAD,
            std::ptr::from_mut(&mut attr).cast(),
            size_of::<ProgLoadAttr>(),
        )
    }?;
    new_fd(rc)
}

fn link_create(prog: &OwnedFd, target: u32, attach_type: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: raw(prog),
        target,
        attach_type,
        flags,
        relative: 0,
        pad: 0,
        expected_revision: 0,
    };
    // SAFETY: a BPF_LINK_CREATE prefix with no pointers.
    let rc = unsafe {
        sys_bpf(
            BPF_LINK_CREATE,
            std::ptr::from_mut(&mut attr).cast(),
            size_of::<LinkCreateAttr>(),
        )
    }?;
    new_fd(rc)
}

fn map_create(map_type: u32, map_flags: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
        map_flags,
    };
    // SAFETY: a BPF_MAP_CREATE prefix with no pointers.
    let rc = unsafe {
        sys_bpf(
            BPF_MAP_CREATE,
            std::ptr::from_mut(&mut attr).cast(),
            size_of::<MapCreateAttr>(),
        )
    }?;
    new_fd(rc)
}

fn raw(fd: &OwnedFd) -> u32 {
    use std::os::fd::AsRawFd as _;
    u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX)
}

/// bpf(2), answering the kernel's non-negative return value.
///
/// # Safety
/// `attr` points at `size` bytes that are a valid `bpf_attr` prefix for
/// `cmd`, with every pointer in it valid for the call.
unsafe fn sys_bpf(
    cmd: libc::c_long,
    attr: *mut libc::c_void,
    size: usize,
) -> io::Result<libc::c_long> {
    // SAFETY: the caller vouches for `attr`.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The descriptor a command that makes one returned.
fn new_fd(rc: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(rc).map_err(io::Error::other)?;
    // SAFETY: a new descriptor the kernel handed to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
