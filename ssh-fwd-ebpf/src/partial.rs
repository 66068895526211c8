//! TCP checksums XDP cannot take at face value. An XDP program does not see
//! an skb's checksum state, and on a veth, a tun device or in generic mode
//! a packet may still be CHECKSUM_PARTIAL: its sender (a local stack with
//! checksum offload, or GRO) left in the field only the pseudo-header sum,
//! for the device that sends the packet on to complete. Updated like a full
//! checksum, that sum comes out wrong wherever it is completed. A field
//! equal to the packet's own pseudo-header sum is such a sum, unless the
//! segment's full checksum is valid too: a full checksum equals that sum by
//! chance once in 65,536 packets, so only then is the segment summed. On a
//! NIC's native XDP no packet is partial and nothing is ever summed but
//! those chance ones.

use core::hint::black_box;

use aya_ebpf::{helpers::bpf_csum_diff, programs::XdpContext};
use ssh_fwd_common::{
    csum,
    packet::{ETH_HLEN, IPPROTO_TCP, IPV4_TOT_LEN_OFF},
};

use crate::packet::{Headers, bytes_at, read, word};

/// Bytes summed per helper call (its most).
const CHUNK: usize = 512;
/// The longest segment summed: a jumbo frame's. Longer ones reach XDP only
/// in generic mode as GSO packets, which are always CHECKSUM_PARTIAL.
const MAX_SUMMED: usize = 9216;

/// Whether `check`, the TCP checksum field of the packet, is the
/// pseudo-header sum of a CHECKSUM_PARTIAL packet.
#[inline(always)]
pub fn is_partial(ctx: &XdpContext, h: &Headers, check: u16) -> bool {
    let Some(tot_len) = word(ctx, ETH_HLEN + IPV4_TOT_LEN_OFF) else {
        return false;
    };
    let len = (u16::from_be(tot_len) as usize).saturating_sub(h.ip_len);
    let seed = csum::pseudo_seed(h.source.addr, h.destination.addr, IPPROTO_TCP, len as u16);
    if !csum::same(check, seed) {
        return false;
    }
    if len > MAX_SUMMED {
        return true;
    }
    // A valid full checksum sums, with the pseudo-header, to zero.
    match segment_sum(ctx, h.l4(), len) {
        Some(sum) => csum::fold64(sum + seed as u64) != 0xffff,
        None => true,
    }
}

/// The one's complement sum (unfolded, raw words) of the `len` bytes at
/// `at`; `None` if they are not all in the packet. Offsets go through
/// `black_box`: rewritten by the compiler into pointer arithmetic they
/// would pass through negative values, which the verifier refuses, and
/// derived from `len` rather than from a loop counter they are one bounded
/// value to the verifier, not one per iteration.
#[inline(always)]
fn segment_sum(ctx: &XdpContext, at: usize, len: usize) -> Option<u64> {
    let mut sum = 0u64;
    let chunks = core::cmp::min(len / CHUNK, MAX_SUMMED / CHUNK);
    for i in 0..MAX_SUMMED / CHUNK {
        if i >= chunks {
            break;
        }
        let chunk = bytes_at::<XdpContext, CHUNK>(ctx, at + black_box(i * CHUNK))?;
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
        sum += u16::from_ne_bytes(read::<XdpContext, 2>(ctx, at + black_box(off))?) as u64;
        off += 2;
    }
    if len - off == 1 {
        let b = read::<XdpContext, 1>(ctx, at + black_box(off))?;
        sum += u16::from_ne_bytes([b[0], 0]) as u64;
    }
    Some(sum)
}
