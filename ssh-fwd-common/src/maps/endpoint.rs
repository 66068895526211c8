//! Addresses and what a mapping points at: the keys and values of
//! [`FRONTENDS`](super::FRONTENDS), [`REVERSE`](super::REVERSE) and
//! [`MAPPING_NAMES`](super::MAPPING_NAMES).

use core::net::{Ipv4Addr, Ipv6Addr};

use super::{Addr, Addr6};

/// An address and TCP port, both in network byte order: IPv4 by default,
/// [`Endpoint6`] for IPv6.
#[repr(C)]
#[derive(Clone, Copy, Debug, Eq, Hash, PartialOrd, Ord)]
#[expect(
    clippy::derived_hash_with_manual_eq,
    reason = "PartialEq compares exactly the fields Hash hashes"
)]
pub struct Endpoint<A: Addr = u32> {
    pub addr: A,
    pub port: u16,
    pub _pad: A::Pad,
}

// Written out to be inlined always: the decisions that compare frontends
// are generic, and with a derived comparison (inlined at rustc's
// discretion) the ingress programs compiled to more instructions.
impl<A: Addr> PartialEq for Endpoint<A> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr && self.port == other.port && self._pad == other._pad
    }
}

/// An IPv6 address and TCP port.
pub type Endpoint6 = Endpoint<Addr6>;

impl<A: Addr> Endpoint<A> {
    /// All zero, as a zeroed entry holds it.
    pub const ZERO: Self = Self {
        addr: A::UNSPECIFIED,
        port: 0,
        _pad: A::PAD,
    };

    pub const fn port(&self) -> u16 {
        u16::from_be(self.port)
    }
}

impl Endpoint {
    pub const fn new(ip: Ipv4Addr, port: u16) -> Self {
        Self {
            addr: u32::from_ne_bytes(ip.octets()),
            port: port.to_be(),
            _pad: 0,
        }
    }

    pub const fn ip(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.addr.to_ne_bytes();
        Ipv4Addr::new(a, b, c, d)
    }
}

// Named apart from IPv4's `new` and `ip`: a path such as `Endpoint::new`
// leaves the family to inference, which two functions of one name would
// make ambiguous.
impl Endpoint6 {
    pub const fn new6(ip: Ipv6Addr, port: u16) -> Self {
        Self {
            addr: Addr6::new(ip),
            port: port.to_be(),
            _pad: [0; 3],
        }
    }

    pub const fn ip6(&self) -> Ipv6Addr {
        self.addr.ip()
    }
}

/// Where a packet is rewritten to, and which mapping it is counted against.
/// Value of [`FRONTENDS`](super::FRONTENDS) (endpoint = backend) and
/// [`REVERSE`](super::REVERSE) (endpoint = the backend's primary frontend).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatTarget<A: Addr = u32> {
    pub endpoint: Endpoint<A>,
    /// Index into [`MAPPING_STATS`](super::MAPPING_STATS) and
    /// [`MAPPING_NAMES`](super::MAPPING_NAMES).
    pub slot: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
}

/// An IPv6 frontend's or backend's target: the value of
/// [`FRONTENDS6`](super::FRONTENDS6) and [`REVERSE6`](super::REVERSE6).
/// Slots are shared with IPv4: a slot indexes the same counters and names
/// whatever its mapping's family.
pub type NatTarget6 = NatTarget<Addr6>;

/// Longest mapping name kept in [`MAPPING_NAMES`](super::MAPPING_NAMES), in
/// bytes.
pub const MAX_NAME_LEN: usize = 127;

/// Value of [`MAPPING_NAMES`](super::MAPPING_NAMES): UTF-8, zero-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingName {
    pub len: u8,
    pub bytes: [u8; MAX_NAME_LEN],
}

impl MappingName {
    pub const EMPTY: Self = Self {
        len: 0,
        bytes: [0; MAX_NAME_LEN],
    };

    /// Truncates at a character boundary if the name is longer than
    /// [`MAX_NAME_LEN`].
    pub fn new(name: &str) -> Self {
        let mut end = name.len().min(MAX_NAME_LEN);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut out = Self::EMPTY;
        out.bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        out.len = end as u8;
        out
    }

    pub fn as_str(&self) -> &str {
        let len = (self.len as usize).min(MAX_NAME_LEN);
        core::str::from_utf8(&self.bytes[..len]).unwrap_or("")
    }
}

/// Value of [`HAIRPIN_SOCKS`](super::HAIRPIN_SOCKS): what one socket
/// dialled and where it went; [`HairpinSock6`] for an IPv6 socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HairpinSock<A: Addr = u32> {
    pub frontend: Endpoint<A>,
    pub backend: Endpoint<A>,
}

/// Value of [`HAIRPIN_SOCKS6`](super::HAIRPIN_SOCKS6): an IPv6 socket's
/// (an IPv4 frontend dialled as an IPv4-mapped address included).
pub type HairpinSock6 = HairpinSock<Addr6>;

/// Value of [`OWNERS`](super::OWNERS): the interfaces a pod's packets come
/// in by. `ifindex` is the host end of the pod's veth (or netkit) pair,
/// where the reply program runs; `master` the bridge that end is a port of
/// (0 for none), which is where a bridged pod's packets enter the node's
/// IP layer, as the egress program sees them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub ifindex: u32,
    pub master: u32,
}

const _: () = assert!(size_of::<Endpoint>() == 8);
const _: () = assert!(size_of::<Endpoint6>() == 24 && align_of::<Endpoint6>() == 4);
const _: () = assert!(size_of::<NatTarget>() == 16);
const _: () = assert!(size_of::<NatTarget6>() == 32);
const _: () = assert!(size_of::<MappingName>() == MAX_NAME_LEN + 1);
const _: () = assert!(size_of::<HairpinSock>() == 16);
const _: () = assert!(size_of::<HairpinSock6>() == 48);
const _: () = assert!(size_of::<Owner>() == 8);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)], made only of integers and arrays of
    // integers, with explicit padding fields, so every bit pattern is valid and
    // there are no implicit padding bytes (checked by the size assertions).
    unsafe impl aya::Pod for Endpoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Endpoint6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for NatTarget {}
    // SAFETY: as above.
    unsafe impl aya::Pod for NatTarget6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for MappingName {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HairpinSock {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HairpinSock6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Owner {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_stores_wire_bytes() {
        let e = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
        assert_eq!(e.addr.to_ne_bytes(), [198, 18, 0, 10]);
        assert_eq!(e.port.to_ne_bytes(), [0x1f, 0x56]);
        assert_eq!(e.ip(), Ipv4Addr::new(198, 18, 0, 10));
        assert_eq!(e.port(), 8022);
    }

    #[test]
    fn an_ipv6_endpoint_stores_wire_bytes() {
        let ip = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let e = Endpoint6::new6(ip, 8022);
        assert_eq!(e.addr.octets(), ip.octets());
        assert_eq!(e.port.to_ne_bytes(), [0x1f, 0x56]);
        assert_eq!((e.ip6(), e.port()), (ip, 8022));
    }

    #[test]
    fn mapping_name_truncates_at_char_boundary() {
        let long = "é".repeat(100);
        let n = MappingName::new(&long);
        assert!(n.as_str().len() <= MAX_NAME_LEN);
        assert_eq!(n.as_str().len() % 2, 0);
        assert_eq!(MappingName::new("job-4711").as_str(), "job-4711");
    }
}
