//! `--announce l2`: the keys and values of
//! [`ANNOUNCE`](super::ANNOUNCE) (the SSH IPs this node answers ARP for,
//! on which interface, with which MAC), [`ARP_HEARD`](super::ARP_HEARD)
//! (another agent heard claiming one of them),
//! [`AGENT_MACS`](super::AGENT_MACS) (the MACs that may) and
//! [`ARP_FOREIGN`](super::ARP_FOREIGN) (claims from any other MAC); and
//! [`on_claim`], what the programs do with a claim, the same for both
//! families.

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
/// the entry) as soon as they hear another agent claim it: a MAC in
/// [`AGENT_MACS`](super::AGENT_MACS) as [`MAC_OF_AGENT`], and no other.
/// The Kubernetes mode's rule, where a Lease decides the holder: an old
/// holder that can no longer renew, or whose agent died, gives way to the
/// new one's gratuitous ARP, and to no host of the segment that forges
/// one. Without it (file mode) the node answers whatever it hears.
pub const ANNOUNCE_YIELD: u16 = 1;

/// Value of [`ARP_HEARD`](super::ARP_HEARD), keyed by the SSH IP
/// (network byte order): the last other agent's MAC heard claiming it (a
/// gratuitous ARP, or an answer to a request), and when
/// (`bpf_ktime_get_ns`, CLOCK_MONOTONIC). Written by the programs only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub at_ns: u64,
}

/// A MAC, padded to 8 bytes: the key of [`AGENT_MACS`](super::AGENT_MACS),
/// the value of [`IFACE_MACS`](super::IFACE_MACS).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacKey {
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
}

impl MacKey {
    pub const fn new(mac: [u8; 6]) -> Self {
        Self { mac, _pad: [0; 2] }
    }
}

/// Value of [`AGENT_MACS`](super::AGENT_MACS): another agent's MAC, which
/// it published with its Leases; an entry flagged [`ANNOUNCE_YIELD`] gives
/// way to its claims.
pub const MAC_OF_AGENT: u32 = 1;
/// Value of [`AGENT_MACS`](super::AGENT_MACS): one of this node's own
/// interfaces' MACs; its claims, heard on another interface of the
/// segment, are no news.
pub const MAC_OF_NODE: u32 = 2;

/// Value of [`ARP_FOREIGN`](super::ARP_FOREIGN) and
/// [`NDP_FOREIGN`](super::NDP_FOREIGN), keyed by the SSH IP: the claims
/// of it from MACs in no agent's Lease, the last one's MAC and when
/// (CLOCK_MONOTONIC). Written by the programs only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Foreign {
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub at_ns: u64,
    pub claims: u64,
}

/// What the programs do with a frame in which `sender` claims an SSH IP
/// they answer for with `ours`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClaim {
    /// This node's own frame: no news.
    Ours,
    /// Another agent's claim: recorded (`ARP_HEARD`, `NDP_HEARD`), and
    /// with `give_way` the entry removed.
    Agent { give_way: bool },
    /// A MAC no agent published: counted (`ARP_FOREIGN`, `NDP_FOREIGN`),
    /// never given way to.
    Foreign,
}

/// Pure: what a claim by `sender` of an address answered for with `ours`
/// does, given `sender`'s value in [`AGENT_MACS`](super::AGENT_MACS).
#[inline(always)]
pub fn on_claim(ours: &Announce, sender: [u8; 6], agent: Option<u32>) -> OnClaim {
    if sender == ours.mac || agent == Some(MAC_OF_NODE) {
        OnClaim::Ours
    } else if agent == Some(MAC_OF_AGENT) {
        OnClaim::Agent {
            give_way: ours.flags & ANNOUNCE_YIELD != 0,
        }
    } else {
        OnClaim::Foreign
    }
}

const _: () = assert!(size_of::<AnnounceKey>() == 8);
const _: () = assert!(size_of::<MacKey>() == 8);
const _: () = assert!(size_of::<Foreign>() == 24);
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
    // SAFETY: as above.
    unsafe impl aya::Pod for MacKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Foreign {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const OTHER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn entry(flags: u16) -> Announce {
        Announce {
            mac: OURS,
            flags,
            since_ms: 0,
        }
    }

    #[test]
    fn an_entry_flagged_to_yield_gives_way_to_another_agent_and_to_no_other_mac() {
        let yielding = entry(ANNOUNCE_YIELD);
        assert_eq!(
            on_claim(&yielding, OTHER, Some(MAC_OF_AGENT)),
            OnClaim::Agent { give_way: true }
        );
        assert_eq!(on_claim(&yielding, OTHER, None), OnClaim::Foreign);
        assert_eq!(
            on_claim(&entry(0), OTHER, Some(MAC_OF_AGENT)),
            OnClaim::Agent { give_way: false },
            "file mode answers whatever it hears"
        );
    }

    #[test]
    fn this_nodes_own_macs_are_no_news_whatever_else_says_so() {
        let yielding = entry(ANNOUNCE_YIELD);
        assert_eq!(on_claim(&yielding, OURS, None), OnClaim::Ours);
        assert_eq!(on_claim(&yielding, OURS, Some(MAC_OF_AGENT)), OnClaim::Ours);
        assert_eq!(on_claim(&yielding, OTHER, Some(MAC_OF_NODE)), OnClaim::Ours);
        assert_eq!(on_claim(&yielding, OTHER, Some(7)), OnClaim::Foreign);
    }
}
