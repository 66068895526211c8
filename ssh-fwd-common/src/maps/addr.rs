//! The two address families a layout can be built on: the type parameter
//! of [`Endpoint`](super::Endpoint) and [`ConnKey`](super::ConnKey), so
//! that IPv4 and IPv6 share one definition of every connection-tracking
//! layout and one state machine over them.

use core::{fmt::Debug, hash::Hash, net::Ipv6Addr};

/// An address as the maps hold it, raw: the bytes of the packet's field in
/// network byte order, as loaded. Sealed: the layouts built on it are free
/// of implicit padding only because of each family's [`Addr::Pad`], and
/// the size assertions check these two families alone.
pub trait Addr: Copy + Eq + Ord + Hash + Debug + sealed::Sealed {
    /// What an [`Endpoint`](super::Endpoint) needs after its port to be a
    /// multiple of 8 bytes long. The connection tables' values put `u64`
    /// times after their endpoint, and the kernel programs update an
    /// entry's `slot` and `flags`, which follow it, with one atomic
    /// operation on an aligned 8-byte word.
    type Pad: Copy + Eq + Ord + Hash + Debug;
    /// The padding, zero.
    const PAD: Self::Pad;
    /// All bits zero (`0.0.0.0`, `::`): what a zeroed entry holds.
    const UNSPECIFIED: Self;
}

/// An IPv6 address, raw: four 32-bit words each holding four bytes of the
/// address in wire order, as the packet's field loads into them. Words
/// rather than bytes so that the kernel programs compare and copy it four
/// bytes at a time (BPF has no unaligned loads: a byte array is moved a
/// byte at a time).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr6(pub [u32; 4]);

impl Addr6 {
    pub const fn new(ip: Ipv6Addr) -> Self {
        Self::from_octets(ip.octets())
    }

    pub const fn from_octets(b: [u8; 16]) -> Self {
        let mut words = [0; 4];
        let mut i = 0;
        while i < 4 {
            words[i] = u32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
            i += 1;
        }
        Self(words)
    }

    pub const fn octets(&self) -> [u8; 16] {
        let mut out = [0; 16];
        let mut i = 0;
        while i < 4 {
            let [a, b, c, d] = self.0[i].to_ne_bytes();
            out[4 * i] = a;
            out[4 * i + 1] = b;
            out[4 * i + 2] = c;
            out[4 * i + 3] = d;
            i += 1;
        }
        out
    }

    pub const fn ip(&self) -> Ipv6Addr {
        Ipv6Addr::from_octets(self.octets())
    }
}

impl Addr for u32 {
    type Pad = u16;
    const PAD: u16 = 0;
    const UNSPECIFIED: u32 = 0;
}

impl Addr for Addr6 {
    type Pad = [u16; 3];
    const PAD: [u16; 3] = [0; 3];
    const UNSPECIFIED: Addr6 = Addr6([0; 4]);
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for super::Addr6 {}
}

const _: () = assert!(size_of::<Addr6>() == 16 && align_of::<Addr6>() == 4);

// SAFETY: #[repr(C)] around four u32s, no padding (asserted above): every
// bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for Addr6 {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_address_is_held_in_wire_order() {
        let ip = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x1234, 0x5678);
        let a = Addr6::new(ip);
        assert_eq!(a.0[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(a.0[3].to_ne_bytes(), [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(a.octets(), ip.octets());
        assert_eq!(a.ip(), ip);
    }
}
