//! The largest segment a client may send on a connection that crosses
//! nodes. Its requests enter node A and go on to the pod's node B; if the
//! link between them is narrower than the client's path to A, A would have
//! to answer every full-sized segment with "fragmentation needed", naming a
//! frontend it can only know from state an off-path sender can replace (A
//! sees the handshake's SYN and ACK but never the SYN-ACK, so nothing it
//! holds is beyond a spoofer's reach). Instead B, which tracks the
//! connection, lowers the MSS the pod's SYN-ACK announces to what the link
//! the SYN came in on carries: the client then never sends a segment A
//! cannot forward, and A never needs to say so.
//!
//! B records the cap with the half-open entry, in the upper half of its
//! flags (0: none, as in every entry made before this existed), and applies
//! it when the SYN-ACK leaves. Only the first TCP option is looked at:
//! every common stack (Linux, Windows, the BSDs, macOS) sends the MSS
//! option first.

/// TCP option kind and length of the maximum segment size.
pub const TCPOPT_MSS: u8 = 2;
pub const TCPOLEN_MSS: u8 = 4;
/// The IPv4 and TCP headers without options: an MTU less these is the MSS.
pub const HEADERS_LEN: u32 = 40;
/// The same over IPv6, whose fixed header is 40 bytes.
pub const HEADERS_LEN6: u32 = 60;
/// Where the cap sits in `HalfOpen::flags`.
pub const HALF_OPEN_MSS_SHIFT: u32 = 16;

/// The MSS a link of `mtu` bytes carries over IPv4.
#[inline(always)]
pub const fn cap_for_mtu(mtu: u32) -> u16 {
    cap_below(mtu, HEADERS_LEN)
}

/// The MSS a link of `mtu` bytes carries over IPv6.
#[inline(always)]
pub const fn cap_for_mtu6(mtu: u32) -> u16 {
    cap_below(mtu, HEADERS_LEN6)
}

#[inline(always)]
const fn cap_below(mtu: u32, headers: u32) -> u16 {
    let mss = mtu.saturating_sub(headers);
    if mss > u16::MAX as u32 {
        u16::MAX
    } else {
        mss as u16
    }
}

/// Half-open flags carrying `cap` (0: none).
#[inline(always)]
pub const fn with_cap(flags: u32, cap: u16) -> u32 {
    (flags & ((1 << HALF_OPEN_MSS_SHIFT) - 1)) | ((cap as u32) << HALF_OPEN_MSS_SHIFT)
}

/// The cap half-open flags carry (0: none).
#[inline(always)]
pub const fn cap_of(flags: u32) -> u16 {
    (flags >> HALF_OPEN_MSS_SHIFT) as u16
}

/// The MSS to write over the first TCP option (its four bytes as they lie
/// in the packet), if it is an MSS above `cap`.
#[inline(always)]
pub const fn clamped(option: [u8; 4], cap: u16) -> Option<u16> {
    if cap == 0 || option[0] != TCPOPT_MSS || option[1] != TCPOLEN_MSS {
        return None;
    }
    let mss = u16::from_be_bytes([option[2], option[3]]);
    if mss > cap { Some(cap) } else { None }
}

/// Host reference: the frame (Ethernet, IPv4, TCP) with its first TCP
/// option clamped to `cap` and its TCP checksum updated; `false` if there
/// was nothing to clamp.
#[cfg(any(test, feature = "fixtures"))]
pub fn clamp(frame: &mut [u8], cap: u16) -> bool {
    use crate::packet::{ETH_HLEN, ipv4_header_len};
    let Some(ip_len) = frame.get(ETH_HLEN).copied().and_then(ipv4_header_len) else {
        return false;
    };
    clamp_at(frame, ETH_HLEN + ip_len, cap)
}

/// [`clamp`] of a frame whose TCP header is at `tcp` (IPv6 among them).
#[cfg(any(test, feature = "fixtures"))]
pub fn clamp_at(frame: &mut [u8], tcp: usize, cap: u16) -> bool {
    use crate::{
        csum,
        packet::{TCP_CHECK_OFF, TCP_DOFF_OFF, TCP_MIN_LEN},
    };
    let opt = tcp + TCP_MIN_LEN;
    if frame.len() < opt + 4 || frame[tcp + TCP_DOFF_OFF] >> 4 < 6 {
        return false;
    }
    let option = [frame[opt], frame[opt + 1], frame[opt + 2], frame[opt + 3]];
    let Some(mss) = clamped(option, cap) else {
        return false;
    };
    let old = u16::from_ne_bytes([frame[opt + 2], frame[opt + 3]]);
    let new = mss.to_be();
    let check_at = tcp + TCP_CHECK_OFF;
    let check = u16::from_ne_bytes([frame[check_at], frame[check_at + 1]]);
    let check = csum::apply(check, csum::diff16(old, new));
    frame[check_at..check_at + 2].copy_from_slice(&check.to_ne_bytes());
    frame[opt + 2..opt + 4].copy_from_slice(&new.to_ne_bytes());
    true
}

/// Test frames: a frame built with its TCP options as the payload
/// (`fixtures::Frame` writes no TCP options) turned into one whose TCP
/// header holds them, checksum updated.
#[cfg(any(test, feature = "fixtures"))]
pub fn payload_as_options(frame: &mut [u8]) {
    use crate::packet::{ETH_HLEN, ipv4_header_len};
    let ip_len = ipv4_header_len(frame[ETH_HLEN]).unwrap_or(0);
    payload_as_options_at(frame, ETH_HLEN + ip_len);
}

/// [`payload_as_options`] of a frame whose TCP header is at `tcp`.
#[cfg(any(test, feature = "fixtures"))]
pub fn payload_as_options_at(frame: &mut [u8], tcp: usize) {
    use crate::{
        csum,
        packet::{TCP_CHECK_OFF, TCP_DOFF_OFF, TCP_MIN_LEN},
    };
    let words = (frame.len() - tcp) / 4;
    assert!(words <= 15 && frame.len() - tcp == words * 4 && words * 4 >= TCP_MIN_LEN);
    let (doff, check) = (tcp + TCP_DOFF_OFF, tcp + TCP_CHECK_OFF);
    let old = u16::from_ne_bytes([frame[doff], frame[doff + 1]]);
    frame[doff] = (words as u8) << 4;
    let new = u16::from_ne_bytes([frame[doff], frame[doff + 1]]);
    let sum = u16::from_ne_bytes([frame[check], frame[check + 1]]);
    let sum = csum::apply(sum, csum::diff16(old, new));
    frame[check..check + 2].copy_from_slice(&sum.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_links_mtu_less_the_headers_and_rides_in_the_upper_flags() {
        assert_eq!(cap_for_mtu(1280), 1240);
        assert_eq!(cap_for_mtu6(1280), 1220);
        assert_eq!(cap_for_mtu(1500), 1460);
        assert_eq!(cap_for_mtu(65_536), 65_496);
        assert_eq!(cap_for_mtu(u32::MAX), u16::MAX);
        assert_eq!(cap_for_mtu(20), 0);
        let flags = with_cap(1, 1240);
        assert_eq!((flags & 0xffff, cap_of(flags)), (1, 1240));
        assert_eq!(cap_of(with_cap(flags, 0)), 0);
        assert_eq!(cap_of(1), 0, "an entry without a cap");
    }

    #[test]
    fn only_a_first_option_that_is_an_mss_above_the_cap_is_lowered() {
        let mss = |v: u16| {
            let [a, b] = v.to_be_bytes();
            [TCPOPT_MSS, TCPOLEN_MSS, a, b]
        };
        assert_eq!(clamped(mss(1460), 1240), Some(1240));
        assert_eq!(clamped(mss(1240), 1240), None);
        assert_eq!(clamped(mss(536), 1240), None);
        assert_eq!(clamped(mss(1460), 0), None, "no cap");
        assert_eq!(clamped([1, 2, 4, 5], 1240), None, "a NOP first");
        assert_eq!(clamped([3, 3, 7, 1], 1240), None, "window scale first");
    }

    #[test]
    fn the_host_reference_keeps_the_tcp_checksum_valid() {
        use crate::{
            conntrack::{TCP_ACK, TCP_SYN},
            fixtures::{Frame, checksums_verify},
        };
        let mut frame = Frame {
            tcp_flags: TCP_SYN | TCP_ACK,
            payload: alloc::vec![TCPOPT_MSS, TCPOLEN_MSS, 0x05, 0xb4],
            ..Frame::default()
        }
        .build();
        payload_as_options(&mut frame);
        assert!(checksums_verify(&frame));
        assert!(clamp(&mut frame, 1240));
        assert!(checksums_verify(&frame));
        assert_eq!(&frame[frame.len() - 2..], &1240u16.to_be_bytes());
        assert!(!clamp(&mut frame, 1240), "nothing left to lower");
    }
}
