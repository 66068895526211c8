//! The frontend a connection was opened through, carried to the backend's
//! node in an IPv4 option of its SYN, so that the node that answers tracks
//! the connection and restores the right frontend, while the client's
//! address reaches the pod unchanged (as Cilium's DSR does with an option).
//!
//! Only the SYN carries it, so the option never costs MTU on data packets.
//! It is the first option, right after the 20-byte header: the node that
//! adds it inserts it there, and the node that reads it removes it again
//! before the pod sees the SYN.
//!
//! ```text
//! type 0x9e (copied, class 0, number 30: RFC 4727's experimental option)
//! len  8 (plain) or 16 (sealed)
//! frontend address (4 bytes, network order), frontend port (2 bytes)
//! sealed only: tag (8 bytes), SipHash-2-4 under the cluster's key
//! ```
//!
//! Anyone can put a plain option on a SYN, so a node believes one only
//! from an interface that nothing but other nodes reach
//! (`conntrack::trust::option_trusted`). The sealed form proves it comes
//! from a node that holds the cluster's key (`--cross-node-key`), and is
//! believed wherever it arrives: on a cluster whose nodes reach each other
//! over their external interfaces too. Its tag covers the connection's
//! 4-tuple and the SYN's sequence number, so it cannot be moved to
//! another connection or another handshake.

#[cfg(any(test, feature = "fixtures"))]
use crate::packet::{ETH_HLEN, IPV4_CHECK_OFF, IPV4_MIN_LEN, IPV4_TOT_LEN_OFF};
use crate::{
    csum,
    maps::{Addr, Endpoint},
    siphash::{Key, siphash24},
};

mod v6;

pub use v6::*;

pub const FRONTEND_OPTION_TYPE: u8 = 0x9e;
/// The plain option's length.
pub const PLAIN_LEN: usize = 8;
/// The sealed option's length.
pub const SEALED_LEN: usize = 16;

/// The longest IPv4 header that can still take an option of `len` bytes.
#[inline(always)]
pub const fn max_ip_len_before(len: usize) -> usize {
    60 - len
}

/// The plain option's four 16-bit words, as they lie in the packet.
#[inline(always)]
pub const fn plain_words(frontend: Endpoint) -> [u16; 4] {
    let [a, b, c, d] = frontend.addr.to_ne_bytes();
    [
        u16::from_ne_bytes([FRONTEND_OPTION_TYPE, PLAIN_LEN as u8]),
        u16::from_ne_bytes([a, b]),
        u16::from_ne_bytes([c, d]),
        frontend.port,
    ]
}

/// The sealed option's eight 16-bit words, as they lie in the packet.
#[inline(always)]
pub const fn sealed_words(frontend: Endpoint, tag: u64) -> [u16; 8] {
    let [a, b, c, d] = frontend.addr.to_ne_bytes();
    let t = tag.to_be_bytes();
    [
        u16::from_ne_bytes([FRONTEND_OPTION_TYPE, SEALED_LEN as u8]),
        u16::from_ne_bytes([a, b]),
        u16::from_ne_bytes([c, d]),
        frontend.port,
        u16::from_ne_bytes([t[0], t[1]]),
        u16::from_ne_bytes([t[2], t[3]]),
        u16::from_ne_bytes([t[4], t[5]]),
        u16::from_ne_bytes([t[6], t[7]]),
    ]
}

/// The tag of the sealed option of the SYN `client -> backend` with the
/// sequence number `isn`, naming `frontend`. Addresses and ports as they
/// lie in the packet (network order, loaded as is).
#[inline(always)]
pub const fn tag(
    key: Key,
    client: Endpoint,
    backend: Endpoint,
    isn: u32,
    frontend: Endpoint,
) -> u64 {
    // The last word's low bits name what is sealed: a tag for this option
    // is no tag for anything else the key may seal later.
    const DOMAIN: u64 = 0x9e10;
    siphash24(
        key,
        [
            ((client.addr as u64) << 32) | backend.addr as u64,
            ((isn as u64) << 32) | ((client.port as u64) << 16) | backend.port as u64,
            ((frontend.addr as u64) << 32) | ((frontend.port as u64) << 16) | DOMAIN,
        ],
    )
}

/// The option a SYN carries: the frontend it names and, if sealed, its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carried<A: Addr = u32> {
    pub frontend: Endpoint<A>,
    /// Its length: [`PLAIN_LEN`] or [`SEALED_LEN`] in an IPv4 header,
    /// [`PLAIN_LEN6`] or [`SEALED_LEN6`] as an IPv6 extension header.
    pub len: usize,
    /// The tag of a sealed option (0 for a plain one).
    pub tag: u64,
}

impl<A: Addr> Carried<A> {
    /// Each family's two forms differ in length, and no plain form is as
    /// long as a sealed one.
    #[inline(always)]
    pub const fn is_sealed(&self) -> bool {
        self.len == SEALED_LEN || self.len == SEALED_LEN6
    }
}

/// The length of the option that starts with `type_len` (its first two
/// bytes), if it is ours.
#[inline(always)]
pub const fn len_of(type_len: [u8; 2]) -> Option<usize> {
    if type_len[0] != FRONTEND_OPTION_TYPE {
        return None;
    }
    match type_len[1] as usize {
        PLAIN_LEN => Some(PLAIN_LEN),
        SEALED_LEN => Some(SEALED_LEN),
        _ => None,
    }
}

/// The option in its bytes (`SEALED_LEN` of them, of which a plain option
/// uses the first 8), if they are ours.
#[inline(always)]
pub const fn read(bytes: [u8; SEALED_LEN]) -> Option<Carried> {
    let Some(len) = len_of([bytes[0], bytes[1]]) else {
        return None;
    };
    let frontend = Endpoint {
        addr: u32::from_ne_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
        port: u16::from_ne_bytes([bytes[6], bytes[7]]),
        _pad: 0,
    };
    let tag = if len == SEALED_LEN {
        u64::from_be_bytes([
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
        ])
    } else {
        0
    };
    Some(Carried { frontend, len, tag })
}

/// The option's 16-bit words as they lie in the packet: 4 of a plain one,
/// 8 of a sealed one (the last 4 zero for a plain one).
#[inline(always)]
pub const fn words_of(c: &Carried) -> [u16; 8] {
    if c.is_sealed() {
        sealed_words(c.frontend, c.tag)
    } else {
        let w = plain_words(c.frontend);
        [w[0], w[1], w[2], w[3], 0, 0, 0, 0]
    }
}

/// The first two words of an IPv4 header (version/IHL + TOS, total length)
/// and its checksum after an option of `len` bytes whose words are
/// `option` (zero past `len`) is inserted (`add`) or removed, given them
/// before; the option's words enter or leave the header's sum.
#[inline(always)]
pub const fn header_after(
    word0: u16,
    tot_len: u16,
    check: u16,
    option: [u16; 8],
    len: usize,
    add: bool,
) -> (u16, u16, u16) {
    let [version_ihl, tos] = word0.to_ne_bytes();
    let (ihl_delta, len_delta) = (len as u8 / 4, len as u16);
    let (new_vihl, new_len) = if add {
        (
            version_ihl.wrapping_add(ihl_delta),
            u16::from_be(tot_len).wrapping_add(len_delta),
        )
    } else {
        (
            version_ihl.wrapping_sub(ihl_delta),
            u16::from_be(tot_len).wrapping_sub(len_delta),
        )
    };
    let new_word0 = u16::from_ne_bytes([new_vihl, tos]);
    let new_tot = new_len.to_be();
    let mut diff = csum::diff16(word0, new_word0) + csum::diff16(tot_len, new_tot);
    let mut i = 0;
    while i < 8 {
        // A word of zeros adds nothing, and its complement (0xffff) is
        // zero in one's complement too: the unused words change nothing.
        diff += if add {
            option[i] as u32
        } else {
            (!option[i]) as u32
        };
        i += 1;
    }
    (new_word0, new_tot, csum::apply(check, diff))
}

/// Host reference of the insertion of `option`, on a frame with an IPv4
/// header that has room for it.
#[cfg(any(test, feature = "fixtures"))]
pub fn add_carried(frame: &[u8], option: &Carried) -> alloc::vec::Vec<u8> {
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let mut out = frame[..at].to_vec();
    for w in &words_of(option)[..option.len / 2] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&frame[at..]);
    fix_header(&mut out, frame, true, option);
    out
}

/// Host reference of the insertion of the plain option.
#[cfg(any(test, feature = "fixtures"))]
pub fn add(frame: &[u8], frontend: Endpoint) -> alloc::vec::Vec<u8> {
    add_carried(
        frame,
        &Carried {
            frontend,
            len: PLAIN_LEN,
            tag: 0,
        },
    )
}

/// Host reference of the insertion of the sealed option under `key`, on
/// a SYN frame built by `crate::fixtures`.
#[cfg(any(test, feature = "fixtures"))]
pub fn add_sealed(frame: &[u8], frontend: Endpoint, key: Key) -> alloc::vec::Vec<u8> {
    let ip = ETH_HLEN;
    let l4 = ip + usize::from(frame[ip] & 0x0f) * 4;
    let addr = |at: usize| u32::from_ne_bytes(core::array::from_fn(|i| frame[at + i]));
    let port = |at: usize| u16::from_ne_bytes(core::array::from_fn(|i| frame[at + i]));
    let client = Endpoint {
        addr: addr(ip + 12),
        port: port(l4),
        _pad: 0,
    };
    let backend = Endpoint {
        addr: addr(ip + 16),
        port: port(l4 + 2),
        _pad: 0,
    };
    let isn = u32::from_be_bytes(core::array::from_fn(|i| frame[l4 + 4 + i]));
    add_carried(
        frame,
        &Carried {
            frontend,
            len: SEALED_LEN,
            tag: tag(key, client, backend, isn, frontend),
        },
    )
}

/// Host reference of the removal of the first option, if it is ours.
#[cfg(any(test, feature = "fixtures"))]
pub fn strip(frame: &[u8]) -> Option<(alloc::vec::Vec<u8>, Carried)> {
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let mut bytes = [0u8; SEALED_LEN];
    let len = len_of(frame.get(at..at + 2)?.try_into().ok()?)?;
    bytes[..len].copy_from_slice(frame.get(at..at + len)?);
    let option = read(bytes)?;
    let mut out = frame[..at].to_vec();
    out.extend_from_slice(&frame[at + len..]);
    fix_header(&mut out, frame, false, &option);
    Some((out, option))
}

#[cfg(any(test, feature = "fixtures"))]
fn fix_header(out: &mut [u8], before: &[u8], add: bool, option: &Carried) {
    let w = |f: &[u8], at: usize| u16::from_ne_bytes([f[at], f[at + 1]]);
    let ip = ETH_HLEN;
    let (w0, len, check) = header_after(
        w(before, ip),
        w(before, ip + IPV4_TOT_LEN_OFF),
        w(before, ip + IPV4_CHECK_OFF),
        words_of(option),
        option.len,
        add,
    );
    out[ip..ip + 2].copy_from_slice(&w0.to_ne_bytes());
    out[ip + IPV4_TOT_LEN_OFF..ip + IPV4_TOT_LEN_OFF + 2].copy_from_slice(&len.to_ne_bytes());
    out[ip + IPV4_CHECK_OFF..ip + IPV4_CHECK_OFF + 2].copy_from_slice(&check.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::net::Ipv4Addr;

    use super::*;
    use crate::fixtures::{Frame, checksums_verify};

    const FRONTEND: Endpoint = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 9022);

    fn syn(options: &[u8]) -> Frame {
        Frame {
            dst: Ipv4Addr::new(10, 244, 1, 5),
            dport: 22,
            tcp_flags: 0x02,
            ip_options: options.to_vec(),
            ..Frame::default()
        }
    }

    #[test]
    fn the_option_goes_first_and_the_frame_is_the_one_built_with_it() {
        for existing in [&[][..], &[1, 1, 1, 1], &[0x94, 4, 0, 0, 1, 1, 1, 1]] {
            let frame = syn(existing).build();
            let with = add(&frame, FRONTEND);
            let mut options = std::vec![0x9e, 8, 198, 18, 0, 10];
            options.extend_from_slice(&9022u16.to_be_bytes());
            options.extend_from_slice(existing);
            assert_eq!(with, syn(&options).build(), "existing {existing:?}");
            assert!(checksums_verify(&with));
            let (without, option) = strip(&with).expect("ours");
            assert_eq!(option.frontend, FRONTEND);
            assert!(!option.is_sealed());
            assert_eq!(without, frame);
        }
    }

    #[test]
    fn other_options_are_not_taken_for_ours() {
        let frame = syn(&[0x94, 4, 0, 0, 0x9e, 8, 0, 0, 0, 0, 0, 0]).build();
        assert_eq!(strip(&frame), None, "ours only counts as the first option");
        assert_eq!(
            read([0x9e, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            None,
            "wrong length"
        );
        assert_eq!(strip(&syn(&[]).build()), None);
    }

    const KEY: Key = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];

    #[test]
    fn the_sealed_option_carries_a_tag_that_binds_the_connection_and_its_syn() {
        let frame = syn(&[1, 1, 1, 1]).build();
        let with = add_sealed(&frame, FRONTEND, KEY);
        assert!(checksums_verify(&with));
        let (without, option) = strip(&with).expect("ours");
        assert_eq!(without, frame);
        assert!(option.is_sealed());
        assert_eq!(option.frontend, FRONTEND);
        let f = Frame::default();
        let (client, backend) = (
            Endpoint::new(f.src, f.sport),
            Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22),
        );
        assert_eq!(option.tag, tag(KEY, client, backend, f.seq, FRONTEND));
        // Any other connection, handshake, frontend or key: another tag.
        let other = Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022);
        for t in [
            tag(KEY, other, backend, f.seq, FRONTEND),
            tag(KEY, client, other, f.seq, FRONTEND),
            tag(KEY, client, backend, f.seq.wrapping_add(1), FRONTEND),
            tag(KEY, client, backend, f.seq, other),
            tag([KEY[0], KEY[1] ^ 1], client, backend, f.seq, FRONTEND),
        ] {
            assert_ne!(t, option.tag);
        }
    }
}
