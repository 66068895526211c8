//! Who may open a connection through a frontend, and how fast: the keys and
//! values of [`ALLOWLIST`](super::ALLOWLIST), [`GUARDS`](super::GUARDS) and
//! [`SYN_BUCKETS`](super::SYN_BUCKETS). See `docs/guard.md`.

use core::net::{Ipv4Addr, Ipv6Addr};

use super::Addr6;

/// The part of an [`ALLOWLIST`](super::ALLOWLIST) key the trie matches
/// by prefix: the mapping's slot, then the client address, both in
/// network byte order, so a prefix of `32 + n` bits is "this slot, and the
/// first `n` bits of the address".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllowData {
    /// The slot, big-endian.
    pub slot: u32,
    /// The address, network byte order.
    pub addr: u32,
}

impl AllowData {
    /// The bits of the slot in a key's prefix length.
    pub const SLOT_BITS: u32 = 32;
    /// A key's prefix length when it holds a full address (a lookup).
    pub const FULL: u32 = Self::SLOT_BITS + 32;

    /// `addr` (network byte order, as the packet holds it) in `slot`.
    pub const fn new(slot: u32, addr: u32) -> Self {
        Self {
            slot: slot.to_be(),
            addr,
        }
    }

    /// The range `ip/prefix` of `slot`, with the bits past the prefix zero,
    /// and its prefix length in the trie.
    pub const fn range(slot: u32, ip: Ipv4Addr, prefix: u8) -> (u32, Self) {
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix as u32)
        };
        let addr = (u32::from_be_bytes(ip.octets()) & mask).to_be();
        (Self::SLOT_BITS + prefix as u32, Self::new(slot, addr))
    }

    pub const fn slot(&self) -> u32 {
        u32::from_be(self.slot)
    }

    pub const fn ip(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.addr.to_ne_bytes();
        Ipv4Addr::new(a, b, c, d)
    }
}

/// The part of an [`ALLOWLIST6`](super::ALLOWLIST6) key the trie matches
/// by prefix, as [`AllowData`] for IPv6: the slot, big-endian, then the
/// client address in wire order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllowData6 {
    /// The slot, big-endian.
    pub slot: u32,
    pub addr: Addr6,
}

impl AllowData6 {
    /// A key's prefix length when it holds a full address (a lookup).
    pub const FULL: u32 = AllowData::SLOT_BITS + 128;

    /// `addr` (wire order, as the packet holds it) in `slot`.
    pub const fn new(slot: u32, addr: Addr6) -> Self {
        Self {
            slot: slot.to_be(),
            addr,
        }
    }

    /// The range `ip/prefix` of `slot`, with the bits past the prefix zero,
    /// and its prefix length in the trie.
    pub const fn range(slot: u32, ip: Ipv6Addr, prefix: u8) -> (u32, Self) {
        let prefix = if prefix > 128 { 128 } else { prefix };
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix as u32)
        };
        let bits = u128::from_be_bytes(ip.octets()) & mask;
        let addr = Addr6::from_octets(bits.to_be_bytes());
        (AllowData::SLOT_BITS + prefix as u32, Self::new(slot, addr))
    }

    pub const fn slot(&self) -> u32 {
        u32::from_be(self.slot)
    }

    pub const fn ip(&self) -> Ipv6Addr {
        self.addr.ip()
    }
}

/// Value of [`GUARDS`](super::GUARDS), indexed by slot: the mapping's
/// per-source rate of new connections, read only when its frontend
/// carries [`FLAG_SYN_LIMIT`](super::FLAG_SYN_LIMIT).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Guard {
    /// Nanoseconds per new connection: one second over the rate.
    pub interval_ns: u64,
    /// How far ahead of now a source's bucket may run: the burst times the
    /// interval.
    pub burst_ns: u64,
}

impl Guard {
    /// `rate` new connections a second, `burst` at once (both at least 1).
    pub const fn new(rate: u32, burst: u32) -> Self {
        let rate = if rate == 0 { 1 } else { rate };
        let burst = if burst == 0 { 1 } else { burst };
        let interval_ns = 1_000_000_000 / rate as u64;
        Self {
            interval_ns,
            burst_ns: interval_ns * burst as u64,
        }
    }

    /// The rate a second this value was made from (rounded).
    pub const fn rate(&self) -> u32 {
        if self.interval_ns == 0 {
            return 0;
        }
        (1_000_000_000 / self.interval_ns) as u32
    }

    /// The burst this value was made from.
    pub const fn burst(&self) -> u32 {
        if self.interval_ns == 0 {
            return 0;
        }
        (self.burst_ns / self.interval_ns) as u32
    }
}

/// Value of [`SYN_BUCKETS`](super::SYN_BUCKETS): a source's bucket as the
/// time its next new connection would be on schedule
/// (`bpf_ktime_get_ns`); see [`crate::guard::admit`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub due_ns: u64,
}

const _: () = assert!(size_of::<AllowData>() == 8);
const _: () = assert!(size_of::<AllowData6>() == 20);
const _: () = assert!(size_of::<Guard>() == 16);
const _: () = assert!(size_of::<Bucket>() == 8);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)] structs of integers only, no padding (checked by
    // the size assertions): every bit pattern is valid.
    unsafe impl aya::Pod for AllowData {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AllowData6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Guard {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Bucket {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_keeps_only_its_prefix_bits() {
        let (len, data) = AllowData::range(7, Ipv4Addr::new(10, 1, 2, 3), 16);
        assert_eq!(len, 48);
        assert_eq!(data.slot(), 7);
        assert_eq!(data.ip(), Ipv4Addr::new(10, 1, 0, 0));
        let (len, data) = AllowData::range(7, Ipv4Addr::new(10, 1, 2, 3), 0);
        assert_eq!((len, data.ip()), (32, Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn an_ipv6_range_keeps_only_its_prefix_bits() {
        let ip: Ipv6Addr = "2001:db8:aaaa:bbbb:1:2:3:4".parse().unwrap();
        let (len, data) = AllowData6::range(7, ip, 48);
        assert_eq!(len, 80);
        assert_eq!(data.slot(), 7);
        assert_eq!(data.ip(), "2001:db8:aaaa::".parse::<Ipv6Addr>().unwrap());
        let (len, data) = AllowData6::range(7, ip, 0);
        assert_eq!((len, data.ip()), (32, Ipv6Addr::UNSPECIFIED));
        let (len, data) = AllowData6::range(7, ip, 128);
        assert_eq!((len, data.ip()), (160, ip));
        // The lookup key of the address itself, as the programs build it.
        assert_eq!(AllowData6::new(7, Addr6::new(ip)), data);
    }

    #[test]
    fn a_guard_gives_back_its_rate_and_burst() {
        let g = Guard::new(20, 40);
        assert_eq!((g.interval_ns, g.burst_ns), (50_000_000, 2_000_000_000));
        assert_eq!((g.rate(), g.burst()), (20, 40));
    }
}
