//! `--announce l2`: the keys and values of
//! [`ANNOUNCE`](super::ANNOUNCE) (the SSH IPs this node answers ARP for,
//! on which interface, with which MAC) and
//! [`ARP_HEARD`](super::ARP_HEARD) (another MAC heard claiming one of
//! them).

use core::net::{Ipv4Addr, Ipv6Addr};

use super::Addr6;

/// Key of [`ANNOUNCE`](super::ANNOUNCE): an SSH IP on one external
/// interface.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AnnounceKey {
    /// The interface the request arrives on (host order).
    pub ifindex: u32,
    /// The SSH IP, network byte order.
    pub addr: u32,
}

impl AnnounceKey {
    pub const fn new(ifindex: u32, ip: Ipv4Addr) -> Self {
        Self {
            ifindex,
            addr: u32::from_ne_bytes(ip.octets()),
        }
    }

    pub const fn ip(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.addr.to_ne_bytes();
        Ipv4Addr::new(a, b, c, d)
    }
}

/// Key of [`ANNOUNCE6`](super::ANNOUNCE6): an IPv6 SSH IP on one
/// external interface.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AnnounceKey6 {
    /// The interface the solicitation arrives on (host order).
    pub ifindex: u32,
    pub addr: Addr6,
}

impl AnnounceKey6 {
    pub const fn new(ifindex: u32, ip: Ipv6Addr) -> Self {
        Self {
            ifindex,
            addr: Addr6::new(ip),
        }
    }

    pub const fn ip(&self) -> Ipv6Addr {
        self.addr.ip()
    }
}

/// Value of [`ANNOUNCE`](super::ANNOUNCE): the MAC the answer gives (the
/// interface's own), `ANNOUNCE_*` flags, and when the agent began to
/// announce (Unix milliseconds, for `ssh-fwd status`; the programs never
/// read it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announce {
    pub mac: [u8; 6],
    pub flags: u16,
    pub since_ms: u64,
}

/// [`Announce`] flag: the programs stop answering for the address (remove
/// the entry) as soon as they hear another MAC claim it. The Kubernetes
/// mode's rule, where a Lease decides the holder: an old holder that can
/// no longer renew, or whose agent died, gives way to the new one's
/// gratuitous ARP. Without it (file mode) the node answers whatever it
/// hears.
pub const ANNOUNCE_YIELD: u16 = 1;

/// Value of [`ARP_HEARD`](super::ARP_HEARD), keyed by the SSH IP
/// (network byte order): the last MAC other than ours heard claiming it
/// (a gratuitous ARP, or an answer to a request), and when
/// (`bpf_ktime_get_ns`, CLOCK_MONOTONIC). Written by the programs only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub at_ns: u64,
}

const _: () = assert!(size_of::<AnnounceKey>() == 8);
const _: () = assert!(size_of::<AnnounceKey6>() == 20);
const _: () = assert!(size_of::<Announce>() == 16);
const _: () = assert!(size_of::<Heard>() == 16);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)] structs of integers and byte arrays, the padding
    // explicit (checked by the size assertions): every bit pattern is valid.
    unsafe impl aya::Pod for AnnounceKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AnnounceKey6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Announce {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Heard {}
}
