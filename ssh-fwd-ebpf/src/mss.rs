//! The MSS cap of `ssh_fwd_common::conntrack::mss`: the MTU of the link a
//! SYN from another node came in on, and the pod's SYN-ACK lowered to it.

use aya_ebpf::{EbpfContext, helpers::bpf_check_mtu, programs::TcContext};
use ssh_fwd_common::{
    conntrack::mss,
    packet::{TCP_CHECK_OFF, TCP_DOFF_OFF, TCP_MIN_LEN},
};

use crate::packet::{put_word, read};

/// The MTU of the device the packet arrived on (0 if the kernel cannot
/// say: then nothing is capped).
#[inline(always)]
pub fn link_mtu<C: EbpfContext>(ctx: &C) -> u32 {
    let mut mtu: u32 = 0;
    // SAFETY: the context of this program run, and a pointer to a local
    // the helper reads (0: the packet's own length) and writes.
    let rc = unsafe { bpf_check_mtu(ctx.as_ptr(), 0, &mut mtu, 0, 0) };
    if rc < 0 { 0 } else { mtu }
}

/// Lowers the MSS option of the SYN-ACK whose TCP header is at `l4` to
/// `cap`, if it is the first option and above it. An `Err` after the
/// checksum helper leaves the packet half-written: drop it.
#[inline(always)]
pub fn clamp(ctx: &TcContext, l4: usize, cap: u16) -> Result<(), i64> {
    let Some([doff]) = read::<TcContext, 1>(ctx, l4 + TCP_DOFF_OFF) else {
        return Ok(());
    };
    if doff >> 4 < 6 {
        return Ok(());
    }
    let Some(option) = read::<TcContext, 4>(ctx, l4 + TCP_MIN_LEN) else {
        return Ok(());
    };
    let Some(value) = mss::clamped(option, cap) else {
        return Ok(());
    };
    let old = u16::from_ne_bytes([option[2], option[3]]);
    let new = value.to_be();
    // The checksum takes what the option gives up, so `skb->csum` stays
    // valid as it does for the port rewrite (see `crate::skb::rewrite`).
    ctx.l4_csum_replace(l4 + TCP_CHECK_OFF, u64::from(old), u64::from(new), 2)?;
    put_word(ctx, l4 + TCP_MIN_LEN + 2, new).ok_or(-1)
}
