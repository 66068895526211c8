//! The frontend a connection was opened through, carried to the backend's
//! node in an IPv4 option of its SYN, so that the node that answers tracks
//! the connection and restores the right frontend, while the client's
//! address reaches the pod unchanged (as Cilium's DSR does with an option).
//!
//! Only the SYN carries it, so the option never costs MTU on data packets.
//! It is the first option, right after the 20-byte header: the node that
//! adds it inserts 8 bytes there, and the node that reads it removes them
//! again before the pod sees the SYN.
//!
//! ```text
//! type 0x9e (copied, class 0, number 30: RFC 4727's experimental option)
//! len  8
//! frontend address (4 bytes, network order), frontend port (2 bytes)
//! ```

#[cfg(any(test, feature = "fixtures"))]
use crate::packet::{ETH_HLEN, IPV4_CHECK_OFF, IPV4_MIN_LEN, IPV4_TOT_LEN_OFF};
use crate::{csum, maps::Endpoint};

pub const FRONTEND_OPTION_TYPE: u8 = 0x9e;
pub const FRONTEND_OPTION_LEN: usize = 8;
/// The longest IPv4 header that can still take the option (IHL 13).
pub const MAX_IP_LEN_BEFORE: usize = 60 - FRONTEND_OPTION_LEN;

/// The option's four 16-bit words, as they lie in the packet.
#[inline(always)]
pub const fn words(frontend: Endpoint) -> [u16; 4] {
    let [a, b, c, d] = frontend.addr.to_ne_bytes();
    [
        u16::from_ne_bytes([FRONTEND_OPTION_TYPE, FRONTEND_OPTION_LEN as u8]),
        u16::from_ne_bytes([a, b]),
        u16::from_ne_bytes([c, d]),
        frontend.port,
    ]
}

/// The frontend in the option's bytes, if they are the option.
#[inline(always)]
pub const fn read(bytes: [u8; FRONTEND_OPTION_LEN]) -> Option<Endpoint> {
    if bytes[0] != FRONTEND_OPTION_TYPE || bytes[1] != FRONTEND_OPTION_LEN as u8 {
        return None;
    }
    Some(Endpoint {
        addr: u32::from_ne_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
        port: u16::from_ne_bytes([bytes[6], bytes[7]]),
        _pad: 0,
    })
}

/// The first two words of an IPv4 header (version/IHL + TOS, total length)
/// and its checksum after the option is inserted (`add`) or removed, given
/// them before; the option's words enter or leave the header's sum.
#[inline(always)]
pub const fn header_after(
    word0: u16,
    tot_len: u16,
    check: u16,
    option: [u16; 4],
    add: bool,
) -> (u16, u16, u16) {
    let [version_ihl, tos] = word0.to_ne_bytes();
    let (ihl_delta, len_delta) = (FRONTEND_OPTION_LEN as u8 / 4, FRONTEND_OPTION_LEN as u16);
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
    while i < 4 {
        diff += if add {
            option[i] as u32
        } else {
            (!option[i]) as u32
        };
        i += 1;
    }
    (new_word0, new_tot, csum::apply(check, diff))
}

/// Host reference of the insertion, on a frame with an IPv4 header of at
/// most [`MAX_IP_LEN_BEFORE`] bytes.
#[cfg(any(test, feature = "fixtures"))]
pub fn add(frame: &[u8], frontend: Endpoint) -> alloc::vec::Vec<u8> {
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let mut out = frame[..at].to_vec();
    for w in words(frontend) {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&frame[at..]);
    fix_header(&mut out, frame, true, frontend);
    out
}

/// Host reference of the removal of the first option, if it is ours.
#[cfg(any(test, feature = "fixtures"))]
pub fn strip(frame: &[u8]) -> Option<(alloc::vec::Vec<u8>, Endpoint)> {
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let frontend = read(frame.get(at..at + FRONTEND_OPTION_LEN)?.try_into().ok()?)?;
    let mut out = frame[..at].to_vec();
    out.extend_from_slice(&frame[at + FRONTEND_OPTION_LEN..]);
    fix_header(&mut out, frame, false, frontend);
    Some((out, frontend))
}

#[cfg(any(test, feature = "fixtures"))]
fn fix_header(out: &mut [u8], before: &[u8], add: bool, frontend: Endpoint) {
    let w = |f: &[u8], at: usize| u16::from_ne_bytes([f[at], f[at + 1]]);
    let ip = ETH_HLEN;
    let (w0, len, check) = header_after(
        w(before, ip),
        w(before, ip + IPV4_TOT_LEN_OFF),
        w(before, ip + IPV4_CHECK_OFF),
        words(frontend),
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
            let (without, frontend) = strip(&with).expect("ours");
            assert_eq!(frontend, FRONTEND);
            assert_eq!(without, frame);
        }
    }

    #[test]
    fn other_options_are_not_taken_for_ours() {
        let frame = syn(&[0x94, 4, 0, 0, 0x9e, 8, 0, 0, 0, 0, 0, 0]).build();
        assert_eq!(strip(&frame), None, "ours only counts as the first option");
        assert_eq!(read([0x9e, 4, 0, 0, 0, 0, 0, 0]), None, "wrong length");
        assert_eq!(strip(&syn(&[]).build()), None);
    }
}
