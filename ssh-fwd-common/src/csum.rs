//! Incremental Internet checksum updates (RFC 1624, equation 3).
//!
//! All inputs are raw 16-bit words as loaded from packet memory (network order
//! bytes read in native order). One's complement addition is independent of byte
//! order as long as every word is read the same way, so neither side swaps.

/// Folds a 32-bit one's complement accumulator into 16 bits.
#[inline(always)]
pub const fn fold(mut sum: u32) -> u16 {
    // Two rounds are enough: after the first, the carry is at most 1.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// Adds a 32-bit raw value as two 16-bit words to a running sum.
#[inline(always)]
const fn add32(sum: u32, value: u32) -> u32 {
    sum + (value & 0xffff) + (value >> 16)
}

/// The one's complement difference `new - old` for a 32-bit field, ready to be
/// applied with [`apply`]. Computing it once lets the same delta fix both the
/// IPv4 header checksum and the TCP checksum (whose pseudo-header holds the
/// address), as Cilium does.
#[inline(always)]
pub const fn diff32(old: u32, new: u32) -> u32 {
    add32(add32(0, !old), new)
}

/// The one's complement difference `new - old` for a 16-bit field.
#[inline(always)]
pub const fn diff16(old: u16, new: u16) -> u32 {
    (!old as u32 & 0xffff) + new as u32
}

/// Applies a difference from [`diff32`]/[`diff16`] (or their sum) to a stored
/// checksum: `HC' = ~(~HC + ~m + m')`.
#[inline(always)]
pub const fn apply(check: u16, diff: u32) -> u16 {
    // `diff` is at most 4 * 0xffff, so the sum cannot overflow u32.
    !fold((!check as u32 & 0xffff) + fold(diff) as u32)
}

/// Applies a difference to a sum stored as it is, not complemented: the
/// pseudo-header sum a CHECKSUM_PARTIAL packet carries in its checksum
/// field until the sending device completes it (`S' = S + ~m + m'`).
#[inline(always)]
pub const fn add(sum: u16, diff: u32) -> u16 {
    fold(sum as u32 + fold(diff) as u32)
}

/// What to [`add`] to a TCP segment's urgent pointer when its checksum
/// field is both the segment's valid checksum and its pseudo-header sum,
/// and is updated as a sum (`add(field, addr_diff)`) for a destination
/// change of `addr_diff` and `port_diff`: as a checksum the field is then
/// `2 * addr_diff + port_diff` off (it took `+addr_diff`, not
/// `-(addr_diff + port_diff)`), and this change elsewhere in the segment
/// makes up for it. Completing the field as a sum reads the segment as it
/// is, so both readings come out right. Only for a segment without URG,
/// whose urgent pointer TCP does not read (RFC 9293, 3.1).
#[inline(always)]
pub const fn urgent_balance(addr_diff: u32, port_diff: u32) -> u32 {
    let addr = fold(addr_diff) as u32;
    !fold(addr + addr + fold(port_diff) as u32) as u32
}

/// Folds a 64-bit one's complement accumulator into 16 bits.
#[inline(always)]
pub const fn fold64(sum: u64) -> u16 {
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    fold(sum as u32)
}

/// The folded IPv4 pseudo-header sum of a segment of `protocol` that is
/// `len` bytes long, from raw (as loaded) addresses: what a
/// CHECKSUM_PARTIAL packet holds in its checksum field.
#[inline(always)]
pub const fn pseudo_seed(saddr: u32, daddr: u32, protocol: u8, len: u16) -> u16 {
    let proto = u16::from_ne_bytes([0, protocol]) as u32;
    let len = u16::from_ne_bytes(len.to_be_bytes()) as u32;
    fold(add32(add32(0, saddr), daddr) + proto + len)
}

/// Whether two checksum words are the same one's complement number (0 and
/// 0xffff both stand for zero).
#[inline(always)]
pub const fn same(a: u16, b: u16) -> bool {
    a == b || (a == 0 && b == 0xffff) || (a == 0xffff && b == 0)
}

/// Recomputes a checksum from scratch over `data` plus an initial `sum`.
/// Host-side reference for tests and for building packets; the data path never
/// sums whole packets.
pub fn checksum(data: &[u8], mut sum: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for pair in &mut chunks {
        sum += u16::from_ne_bytes([pair[0], pair[1]]) as u32;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if let [last] = chunks.remainder() {
        sum += u16::from_ne_bytes([*last, 0]) as u32;
    }
    !fold(sum)
}

/// The IPv4 pseudo-header sum (raw words), to seed [`checksum`] for a
/// segment of `protocol` (TCP, UDP) that is `len` bytes long.
pub fn pseudo_header_sum(src: [u8; 4], dst: [u8; 4], protocol: u8, len: u16) -> u32 {
    let words = [
        u16::from_ne_bytes([src[0], src[1]]),
        u16::from_ne_bytes([src[2], src[3]]),
        u16::from_ne_bytes([dst[0], dst[1]]),
        u16::from_ne_bytes([dst[2], dst[3]]),
        u16::from_ne_bytes([0, protocol]),
        u16::from_ne_bytes(len.to_be_bytes()),
    ];
    words.iter().map(|w| *w as u32).sum()
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use std::vec::Vec;

    fn word(data: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([data[at], data[at + 1]])
    }

    #[test]
    fn checksum_of_known_ipv4_header_matches_rfc1071_example() {
        // A real IPv4 header (from a capture) whose checksum field is 0xb861.
        let mut header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let sum = checksum(&header, 0);
        assert_eq!(sum.to_ne_bytes(), [0xb8, 0x61]);
        header[10..12].copy_from_slice(&sum.to_ne_bytes());
        assert_eq!(
            checksum(&header, 0),
            0,
            "a header with its checksum sums to zero"
        );
    }

    #[test]
    fn incremental_update_equals_recomputation_on_random_data() {
        let mut rng = StdRng::seed_from_u64(0x55_4d_46_57);
        for round in 0..20_000 {
            let len = rng.random_range(8..200usize) & !1;
            let mut data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            // Field positions: a 32-bit field and a 16-bit field, both aligned
            // like the addresses and ports of a real header.
            let f32_at = rng.random_range(0..(len - 4) / 2) * 2;
            let f16_at = loop {
                let at = rng.random_range(0..(len - 2) / 2) * 2;
                if at + 2 <= f32_at || at >= f32_at + 4 {
                    break at;
                }
            };
            data[0..2].copy_from_slice(&[0, 0]);
            if f32_at < 2 || f16_at < 2 {
                continue; // keep the checksum slot at 0..2 separate
            }
            let check = checksum(&data, 0);
            data[0..2].copy_from_slice(&check.to_ne_bytes());

            let old32 = u32::from_ne_bytes(data[f32_at..f32_at + 4].try_into().unwrap());
            let old16 = word(&data, f16_at);
            let new32: u32 = if round % 7 == 0 { 0 } else { rng.random() };
            let new16: u16 = if round % 11 == 0 {
                0xffff
            } else {
                rng.random()
            };
            data[f32_at..f32_at + 4].copy_from_slice(&new32.to_ne_bytes());
            data[f16_at..f16_at + 2].copy_from_slice(&new16.to_ne_bytes());

            let updated = apply(check, diff32(old32, new32) + diff16(old16, new16));
            data[0..2].copy_from_slice(&updated.to_ne_bytes());
            assert_eq!(
                checksum(&data, 0),
                0,
                "round {round}: stored checksum must verify"
            );
        }
    }

    #[test]
    fn a_partial_seed_moves_with_the_address_as_the_kernel_computes_it() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..20_000 {
            let (src, dst, new_dst): (u32, u32, u32) = (rng.random(), rng.random(), rng.random());
            let len: u16 = rng.random_range(20..9000);
            let seed = pseudo_seed(src, dst, 6, len);
            // The seed is the folded sum the checksum of the segment starts from.
            let reference = pseudo_header_sum(src.to_ne_bytes(), dst.to_ne_bytes(), 6, len);
            assert_eq!(seed, fold(reference));
            assert!(same(
                add(seed, diff32(dst, new_dst)),
                pseudo_seed(src, new_dst, 6, len)
            ));
        }
    }

    #[test]
    fn a_field_both_checksum_and_sum_is_right_as_either_with_the_urgent_pointer_balanced() {
        let mut rng = StdRng::seed_from_u64(0x0a6e);
        for _ in 0..20_000 {
            let (src, dst, new_dst): (u32, u32, u32) = (rng.random(), rng.random(), rng.random());
            let new_port: u16 = rng.random();
            let len = rng.random_range(11..200usize) * 2;
            let mut seg: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            // The field holds the sum, and the word after the urgent
            // pointer makes it the valid checksum too.
            let seed = pseudo_seed(src, dst, 6, len as u16);
            seg[16..18].copy_from_slice(&seed.to_ne_bytes());
            seg[20..22].copy_from_slice(&[0, 0]);
            let rest = !checksum(&seg, 0) as u32;
            let filler = !fold(rest + seed as u32);
            seg[20..22].copy_from_slice(&filler.to_ne_bytes());
            let pseudo =
                |dst: u32| pseudo_header_sum(src.to_ne_bytes(), dst.to_ne_bytes(), 6, len as u16);
            assert_eq!(checksum(&seg, pseudo(dst)), 0);

            let addr_diff = diff32(dst, new_dst);
            let port_diff = diff16(word(&seg, 2), new_port);
            let field = add(word(&seg, 16), addr_diff);
            let urgent = add(word(&seg, 18), urgent_balance(addr_diff, port_diff));
            seg[2..4].copy_from_slice(&new_port.to_ne_bytes());
            seg[16..18].copy_from_slice(&field.to_ne_bytes());
            seg[18..20].copy_from_slice(&urgent.to_ne_bytes());
            assert_eq!(checksum(&seg, pseudo(new_dst)), 0, "as a checksum");
            assert!(
                same(field, pseudo_seed(src, new_dst, 6, len as u16)),
                "as a sum"
            );
        }
    }

    #[test]
    fn zero_has_two_forms() {
        assert!(same(0, 0xffff) && same(0xffff, 0) && same(0x1234, 0x1234));
        assert!(!same(0, 1) && !same(0xfffe, 0xffff));
        assert!(!same(0x1234, !0x1234), "a number and its complement");
        assert_eq!(fold64(0xffff_ffff_ffff_ffff), 0xffff);
        assert_eq!(fold64(0x1_0000_0000), 1);
    }

    #[test]
    fn update_of_identical_value_keeps_checksum_verifying() {
        let data = [0x12u8, 0x34, 0, 0, 0xab, 0xcd, 0xef, 0x01];
        let mut with = data;
        let c = checksum(&with, 0);
        with[2..4].copy_from_slice(&c.to_ne_bytes());
        let same = apply(c, diff32(0x01ef_cdab, 0x01ef_cdab));
        with[2..4].copy_from_slice(&same.to_ne_bytes());
        assert_eq!(checksum(&with, 0), 0);
    }
}
