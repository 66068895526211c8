//! Facts about a network interface in the agent's network namespace.

use std::ffi::CString;

use anyhow::bail;

/// The interface index, or an error that says how to find the right name.
pub fn index(name: &str) -> anyhow::Result<u32> {
    let Ok(c) = CString::new(name) else {
        bail!("interface name {name:?} contains a NUL byte");
    };
    // SAFETY: `c` is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        bail!(
            "interface {name} does not exist in this network namespace; `ip -br link` lists \
             the interfaces, pass the external one with --iface"
        );
    }
    Ok(index)
}

/// The name of the interface with this index, if there is one.
pub fn name_of(index: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has room for IF_NAMESIZE bytes, as the call requires.
    let ptr = unsafe { libc::if_indextoname(index, buf.as_mut_ptr().cast()) };
    if ptr.is_null() {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut EthtoolDrvinfo,
    _pad: [u8; 16],
}

const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// The kernel driver behind an interface (`veth`, `mlx5_core`, ...), as
/// `ethtool -i` shows it. Asked through a socket, so it answers for the
/// current network namespace even where /sys belongs to another.
pub fn driver(name: &str) -> Option<String> {
    if name.len() >= libc::IFNAMSIZ {
        return None;
    }
    let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut info,
        _pad: [0; 16],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: a plain datagram socket, closed below; the ioctl writes only
    // into `info`, which outlives the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let rc = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        libc::close(fd);
        if rc != 0 {
            return None;
        }
    }
    let end = info.driver.iter().position(|b| *b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}
