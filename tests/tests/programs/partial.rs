//! XDP and checksums still to be completed. A packet an XDP program gets on
//! a veth, a tun device or in generic mode may be CHECKSUM_PARTIAL: its TCP
//! checksum field holds only the pseudo-header sum, which the sending
//! device completes. XDP sees only the bytes, so these frames carry such a
//! sum where a checksum would be, and the program must keep it the sum of
//! the rewritten header, not update it like a checksum.

use ssh_fwd_common::{
    csum,
    fixtures::{Frame, checksums_verify},
    packet::{self, IPPROTO_TCP, Side, TCP_CHECK_OFF},
};
use ssh_fwd_tests::privilege;

use super::{JOB, XDP_PASS, backend, load, test_run_xdp};

const TCP_CHECK: usize = packet::ETH_HLEN + packet::IPV4_MIN_LEN + TCP_CHECK_OFF;

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

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_updates_a_full_checksum_that_equals_the_pseudo_header_sum_by_chance_as_a_checksum() {
    privilege::require();
    let l = load(&[JOB]);
    for (sport, len) in [(42_000, 2), (42_001, 301), (42_002, 1400)] {
        // A payload whose (valid) checksum happens to equal the sum: one
        // frame in 65,536 is such, so one word of the payload is searched.
        let frame = (0..=u16::MAX)
            .map(|w| {
                let mut f = request(sport, len);
                f.payload[..2].copy_from_slice(&w.to_ne_bytes());
                f.build()
            })
            .find(|f| csum::same(check_of(f), seed_of(f)))
            .expect("some payload word makes the checksum equal the sum");
        assert!(checksums_verify(&frame));
        let (verdict, out) = test_run_xdp(&l, &frame);
        assert_eq!(verdict, XDP_PASS);
        assert_eq!(
            out,
            rewritten(&frame),
            "{len} bytes: not the reference rewrite"
        );
        assert!(checksums_verify(&out));
    }
}
