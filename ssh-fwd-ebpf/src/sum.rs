//! The one's complement sum over a packet's bytes, for XDP's test of a
//! checksum still to be completed (`crate::partial`).

use core::hint::black_box;

use aya_ebpf::helpers::bpf_csum_diff;

use crate::packet::{Packet, bytes_at, read};

/// Bytes summed per helper call (its most).
const CHUNK: usize = 512;
/// The longest segment summed: a jumbo frame's. A longer one comes only
/// through GRO or GSO, whose checksums the kernel has checked or will
/// complete.
pub const MAX_SUMMED: usize = 9216;

/// The one's complement sum (unfolded, raw words) of the `len` bytes at
/// `at`; `None` if they are not all in the packet (or not all linear).
/// Offsets go through `black_box`: rewritten by the compiler into pointer
/// arithmetic they would pass through negative values, which the verifier
/// refuses, and derived from `len` rather than from a loop counter they
/// are one bounded value to the verifier, not one per iteration.
#[inline(always)]
pub fn sum<P: Packet>(p: &P, at: usize, len: usize) -> Option<u64> {
    if len > MAX_SUMMED {
        return None;
    }
    let mut sum = 0u64;
    let chunks = core::cmp::min(len / CHUNK, MAX_SUMMED / CHUNK);
    for i in 0..MAX_SUMMED / CHUNK {
        if i >= chunks {
            break;
        }
        let chunk = bytes_at::<P, CHUNK>(p, at + black_box(i * CHUNK))?;
        // SAFETY: `bytes_at` checked the CHUNK bytes are in the packet; the
        // helper only reads them (no `from` buffer).
        let s = unsafe { bpf_csum_diff(core::ptr::null_mut(), 0, chunk.cast(), CHUNK as u32, 0) };
        sum += u64::try_from(s).ok()?;
    }
    let mut off = black_box(chunks * CHUNK);
    for _ in 0..CHUNK / 2 {
        if len - off < 2 {
            break;
        }
        sum += u16::from_ne_bytes(read::<P, 2>(p, at + black_box(off))?) as u64;
        off += 2;
    }
    if len - off == 1 {
        let b = read::<P, 1>(p, at + black_box(off))?;
        sum += u16::from_ne_bytes([b[0], 0]) as u64;
    }
    Some(sum)
}
