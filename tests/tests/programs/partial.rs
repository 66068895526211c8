//! XDP and checksums still to be completed. A packet an XDP program gets on
//! a veth, a tun device or in generic mode may be CHECKSUM_PARTIAL: its TCP
//! checksum field holds only the pseudo-header sum, which the sending
//! device completes. XDP sees only the bytes, so these frames carry such a
//! sum where a checksum would be, and the program must keep it the sum of
//! the rewritten header, not update it like a checksum. Once in 65,536
//! segments the sum is also the segment's valid checksum, and the bytes
//! cannot tell which it is: the rewrite must be right as either.

use ssh_fwd_common::{
    conntrack::TCP_URG,
    csum,
    fixtures::{Frame, checksums_verify},
    packet::{self, IPPROTO_TCP, Side, TCP_CHECK_OFF, TCP_URG_PTR_OFF},
};
use ssh_fwd_tests::privilege;

use super::{JOB, XDP_PASS, backend, load, test_run_xdp};

const TCP_CHECK: usize = packet::ETH_HLEN + packet::IPV4_MIN_LEN + TCP_CHECK_OFF;
const TCP_URGENT: usize = packet::ETH_HLEN + packet::IPV4_MIN_LEN + TCP_URG_PTR_OFF;

/// The raw pseudo-header sum of a frame's TCP segment (no IP options).
fn seed_of(frame: &[u8]) -> u16 {
    let ip = &frame[packet::ETH_HLEN..];
    let raw = |at: usize| u32::from_ne_bytes(ip[at..at + 4].try_into().expect("4 bytes"));
    let total = u16::from_be_bytes([ip[2], ip[3]]);
    csum::pseudo_seed(
        raw(12),
        raw(16),
        IPPROTO_TCP,
        total - packet::IPV4_MIN_LEN as u16,
    )
}

fn check_of(frame: &[u8]) -> u16 {
    u16::from_ne_bytes([frame[TCP_CHECK], frame[TCP_CHECK + 1]])
}

/// A request of `len` payload bytes from client port `sport`.
fn request(sport: u16, len: usize) -> Frame {
    Frame {
        sport,
        payload: (0..len).map(|i| (i * 7 + 3) as u8).collect(),
        ..Frame::default()
    }
}

/// The reference rewrite of a frame with a full checksum.
fn rewritten(frame: &[u8]) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let tcp = packet::classify(&expected).expect("classify");
    packet::rewrite(&mut expected, tcp, Side::Destination, backend());
    expected
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_keeps_a_checksum_still_to_be_completed_the_pseudo_header_sum_of_the_new_header() {
    privilege::require();
    let l = load(&[JOB]);
    // Header only, an odd length, and one longer than a summed chunk.
    for (sport, len) in [(41_000, 0), (41_001, 301), (41_002, 1400)] {
        let full = request(sport, len).build();
        let mut partial = full.clone();
        partial[TCP_CHECK..TCP_CHECK + 2].copy_from_slice(&seed_of(&full).to_ne_bytes());
        let (verdict, out) = test_run_xdp(&l, &partial);
        assert_eq!(verdict, XDP_PASS);
        // As the full-checksum frame is rewritten, but with the new sum.
        let mut expected = rewritten(&full);
        let new_seed = seed_of(&expected);
        expected[TCP_CHECK..TCP_CHECK + 2].copy_from_slice(&new_seed.to_ne_bytes());
        assert_eq!(out, expected, "{len} bytes: not the reference rewrite");
        assert!(csum::same(check_of(&out), seed_of(&out)));
    }
}

/// A request (with `flags` added) whose valid checksum happens to equal its
/// pseudo-header sum: the bytes of a full-checksum segment and of a
/// CHECKSUM_PARTIAL one alike, which completing leaves as they are. One
/// segment in 65,536 of either kind is such, so one payload word is
/// searched.
fn checksum_and_sum(sport: u16, len: usize, flags: u8) -> Vec<u8> {
    let frame = (0..=u16::MAX)
        .map(|w| {
            let mut f = request(sport, len);
            f.tcp_flags |= flags;
            f.payload[..2].copy_from_slice(&w.to_ne_bytes());
            f.build()
        })
        .find(|f| csum::same(check_of(f), seed_of(f)))
        .expect("some payload word makes the checksum equal the sum");
    assert!(checksums_verify(&frame));
    frame
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_rewrites_a_field_that_is_both_checksum_and_sum_right_as_either() {
    privilege::require();
    let l = load(&[JOB]);
    for (sport, len) in [(42_000, 2), (42_001, 301), (42_002, 1400)] {
        let frame = checksum_and_sum(sport, len, 0);
        let (verdict, out) = test_run_xdp(&l, &frame);
        assert_eq!(verdict, XDP_PASS);
        // Right as a full checksum, and as the new header's sum, which the
        // device completes into the right checksum.
        assert!(checksums_verify(&out), "{len} bytes: wrong as a checksum");
        assert!(
            csum::same(check_of(&out), seed_of(&out)),
            "{len} bytes: not the new header's sum"
        );
        // The reference rewrite but for the checksum and the urgent
        // pointer, which TCP does not read without URG.
        let mut expected = rewritten(&frame);
        expected[TCP_CHECK..TCP_URGENT + 2].copy_from_slice(&out[TCP_CHECK..TCP_URGENT + 2]);
        assert_eq!(out, expected, "{len} bytes: more than those changed");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_updates_such_a_field_as_a_checksum_when_the_urgent_pointer_is_read() {
    privilege::require();
    let l = load(&[JOB]);
    for (sport, len) in [(43_000, 2), (43_001, 301)] {
        let frame = checksum_and_sum(sport, len, TCP_URG);
        let (verdict, out) = test_run_xdp(&l, &frame);
        assert_eq!(verdict, XDP_PASS);
        assert_eq!(
            out,
            rewritten(&frame),
            "{len} bytes: not the reference rewrite"
        );
    }
}
