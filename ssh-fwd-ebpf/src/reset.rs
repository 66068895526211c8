//! `--deny-action reset`: a segment the allowlist denies is answered with a
//! TCP RST from the frontend, written over the segment's own buffer (the
//! headers from `ssh_fwd_common::reset`, the MAC addresses swapped, the
//! frame cut to 54 bytes) and sent back out where it came in: `XDP_TX`, or
//! in tc a redirect to the arrival interface's egress. The segment never
//! reaches the pod. Only [`Outcome::Denied`] is answered, never a RST; a
//! segment that cannot be answered is dropped ([`Outcome::ResetFailed`]).
//! An IPv6 segment gets its RST from [`xdp6`] and [`tc6`], called by the
//! entry points once the IPv6 path said so.

use aya_ebpf::{
    bindings::{BPF_F_RECOMPUTE_CSUM, TC_ACT_SHOT, xdp_action},
    helpers::{bpf_redirect, bpf_skb_change_tail, bpf_xdp_adjust_tail},
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    ipv6::IPV6_HLEN,
    maps::{Addr, Addr6},
    outcome::Outcome,
    packet::{ETH_HLEN, IPV4_MIN_LEN, TCP_CHECK_OFF},
    reset::{self, RESET_FRAME_LEN, RESET6_FRAME_LEN, Reset, reset_for},
};

use crate::{
    config::deny_reset,
    counters::count,
    packet::{Headers, parse6},
    skb::{self, bytes_at},
};

/// XDP: [`Outcome::DeniedReset`] when the frame now holds the RST (send it
/// with `XDP_TX`); any other outcome: drop it, counted as that.
#[inline(always)]
pub fn xdp(ctx: &XdpContext, h: &Headers, outcome: Outcome) -> Outcome {
    let Some(rst) = wanted(h, outcome) else {
        return outcome;
    };
    count(Outcome::Denied);
    match rewrite_xdp(ctx, h, rst) {
        Some(()) => Outcome::DeniedReset,
        None => Outcome::ResetFailed,
    }
}

/// tc: `Ok(action)` when the RST is on its way back out (counted);
/// `Err(outcome)`: drop the packet, counted as that.
#[inline(always)]
pub fn tc(ctx: &TcContext, h: &Headers, outcome: Outcome) -> Result<i32, Outcome> {
    let Some(rst) = wanted(h, outcome) else {
        return Err(outcome);
    };
    count(Outcome::Denied);
    // SAFETY: the context pointer is the live skb of this program run.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    rewrite_tc(ctx, h, rst).ok_or(Outcome::ResetFailed)?;
    count(Outcome::DeniedReset);
    // SAFETY: a helper call with plain integer arguments.
    Ok(unsafe { bpf_redirect(ifindex, 0) } as i32)
}

/// IPv6: whether a segment dropped as `outcome` is to be answered. The
/// IPv6 path has no stack room for the RST's headers, so it returns
/// [`PENDING_TC`] or [`PENDING_XDP`] and the entry point calls [`tc6`] or
/// [`xdp6`], whose frames are their own.
#[inline(always)]
pub fn wanted6(h: &Headers<Addr6>, outcome: Outcome) -> bool {
    wanted(h, outcome).is_some()
}

/// What the IPv6 path returns to say "answer it with a RST": no tc action
/// or XDP verdict has these values.
pub const PENDING_TC: i32 = i32::MIN;
pub const PENDING_XDP: u32 = u32::MAX;

/// XDP, IPv6: the denied segment answered (`XDP_TX`, counted
/// `denied_reset`), or dropped (`reset_failed`); both counted as denied.
#[inline(never)]
pub fn xdp6(ctx: XdpContext) -> u32 {
    count(Outcome::Denied);
    if rewrite_xdp6(&ctx).is_some() {
        count(Outcome::DeniedReset);
        return xdp_action::XDP_TX;
    }
    count(Outcome::ResetFailed);
    xdp_action::XDP_DROP
}

#[inline(always)]
fn rewrite_xdp6(ctx: &XdpContext) -> Option<()> {
    let h = parse6(ctx)?.ok()?;
    let headers = reset::headers6(h.destination, h.source, reset_for(&h.seg)?);
    write_xdp::<{ reset::RESET6_HEADERS_LEN }, RESET6_FRAME_LEN>(ctx, &headers)
}

/// tc, IPv6: the denied segment answered (a redirect back out of the
/// arrival interface, counted `denied_reset`), or dropped
/// (`reset_failed`); both counted as denied. As [`rewrite_tc`] for IPv4;
/// a segment whose checksum a device is still to complete must have its
/// TCP header where the RST's goes, so one behind extension headers is
/// not answered.
#[inline(never)]
pub fn tc6(ctx: TcContext) -> i32 {
    count(Outcome::Denied);
    // SAFETY: the context pointer is the live skb of this program run.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    if rewrite_tc6(&ctx).is_none() {
        count(Outcome::ResetFailed);
        return TC_ACT_SHOT;
    }
    count(Outcome::DeniedReset);
    // SAFETY: a helper call with plain integer arguments.
    unsafe { bpf_redirect(ifindex, 0) as i32 }
}

#[inline(always)]
fn rewrite_tc6(ctx: &TcContext) -> Option<()> {
    // SAFETY: the context pointer is the live skb of this program run.
    if unsafe { (*ctx.skb.skb).vlan_present } != 0 {
        return None;
    }
    let h = skb::parse6(ctx).ok()?;
    let mut headers = reset::headers6(h.destination, h.source, reset_for(&h.seg)?);
    if checksum_partial(ctx, h.l4())? {
        if h.ip_len != IPV6_HLEN {
            return None;
        }
        let seed = reset::pseudo_seed6_reset(h.destination, h.source).to_ne_bytes();
        headers[IPV6_HLEN + TCP_CHECK_OFF] = seed[0];
        headers[IPV6_HLEN + TCP_CHECK_OFF + 1] = seed[1];
    }
    write_tc::<{ reset::RESET6_HEADERS_LEN }, RESET6_FRAME_LEN>(ctx, &headers)
}

/// The RST to send for a segment dropped as `outcome`, if one is sent.
#[inline(always)]
fn wanted<A: Addr>(h: &Headers<A>, outcome: Outcome) -> Option<Reset> {
    if outcome != Outcome::Denied || !deny_reset() {
        return None;
    }
    reset_for(&h.seg)
}

/// Cuts the frame to the RST's length and writes it. `None` once the frame
/// may be cut: it must be dropped.
#[inline(always)]
fn rewrite_xdp(ctx: &XdpContext, h: &Headers, rst: Reset) -> Option<()> {
    let headers = reset::headers(h.destination, h.source, rst);
    write_xdp::<{ reset::RESET_HEADERS_LEN }, RESET_FRAME_LEN>(ctx, &headers)
}

/// Cuts the frame to `F` bytes (Ethernet and the `H` bytes of `headers`),
/// swaps its MAC addresses and writes `headers` after them. `None` once
/// the frame may be cut: it must be dropped.
#[inline(always)]
fn write_xdp<const H: usize, const F: usize>(ctx: &XdpContext, headers: &[u8; H]) -> Option<()> {
    const { assert!(F == ETH_HLEN + H) };
    let len = (ctx.data_end() - ctx.data()) as i32;
    // SAFETY: a helper on the live context; the parser found at least the
    // F bytes kept.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, F as i32 - len) } != 0 {
        return None;
    }
    let frame = bytes_at::<XdpContext, F>(ctx, 0)?;
    // SAFETY: every access stays inside the range bytes_at checked.
    unsafe {
        swap_macs(frame);
        core::ptr::copy_nonoverlapping(headers.as_ptr(), frame.add(ETH_HLEN), H);
    }
    Some(())
}

/// Cuts the skb to `F` bytes, stores `headers` (the `H` bytes after the
/// Ethernet header) through the helper that keeps the skb's checksum
/// state true, and swaps the MAC addresses.
#[inline(always)]
fn write_tc<const H: usize, const F: usize>(ctx: &TcContext, headers: &[u8; H]) -> Option<()> {
    const { assert!(F == ETH_HLEN + H) };
    // SAFETY: a helper on the live skb.
    if unsafe { bpf_skb_change_tail(ctx.skb.skb, F as u32, 0) } != 0 {
        return None;
    }
    ctx.store(ETH_HLEN, headers, BPF_F_RECOMPUTE_CSUM as u64)
        .ok()?;
    // No skb checksum covers the Ethernet header.
    let frame = bytes_at::<TcContext, ETH_HLEN>(ctx, 0)?;
    // SAFETY: inside the range bytes_at checked; the helpers above made the
    // skb writable.
    unsafe { swap_macs(frame) };
    Some(())
}

/// The same through the skb helpers, which keep the kernel's checksum
/// state true: the IPv4 and TCP headers are stored with
/// `BPF_F_RECOMPUTE_CSUM` (a CHECKSUM_COMPLETE skb's sum follows them), and
/// a segment whose checksum a device is still to complete
/// (CHECKSUM_PARTIAL, from a local sender over a veth) gets the RST's
/// pseudo-header sum in its checksum field instead of the checksum, as the
/// device expects. A frame whose VLAN tag the device took off is not
/// answered: where its tag would go back on is not this program's to know.
#[inline(always)]
fn rewrite_tc(ctx: &TcContext, h: &Headers, rst: Reset) -> Option<()> {
    // SAFETY: the context pointer is the live skb of this program run.
    if unsafe { (*ctx.skb.skb).vlan_present } != 0 {
        return None;
    }
    let mut headers = reset::headers(h.destination, h.source, rst);
    if checksum_partial(ctx, h.l4())? {
        // The device completes the checksum where the segment's TCP header
        // was: the RST's must start there too.
        if h.ip_len != IPV4_MIN_LEN {
            return None;
        }
        let seed = reset::pseudo_seed(h.destination, h.source).to_ne_bytes();
        headers[IPV4_MIN_LEN + TCP_CHECK_OFF] = seed[0];
        headers[IPV4_MIN_LEN + TCP_CHECK_OFF + 1] = seed[1];
    }
    write_tc::<{ reset::RESET_HEADERS_LEN }, RESET_FRAME_LEN>(ctx, &headers)
}

/// Whether the skb's TCP checksum is still to be completed
/// (CHECKSUM_PARTIAL), which tc cannot read: the kernel's helper moves the
/// field for a change of the segment's bytes unless it is. The field is
/// zeroed, probed, and put back to zero, the skb's own sum kept true.
#[inline(always)]
fn checksum_partial(ctx: &TcContext, l4: usize) -> Option<bool> {
    let at = l4 + TCP_CHECK_OFF;
    ctx.store(at, &0u16, BPF_F_RECOMPUTE_CSUM as u64).ok()?;
    ctx.l4_csum_replace(at, 0, 1, 2).ok()?;
    let probed: u16 = ctx.load(at).ok()?;
    ctx.l4_csum_replace(at, 1, 0, 2).ok()?;
    Some(probed == 0)
}

/// Swaps the destination and source MAC addresses at `frame`.
///
/// # Safety
/// `frame` points at 12 writable bytes.
#[inline(always)]
unsafe fn swap_macs(frame: *mut u8) {
    // SAFETY: the caller's promise.
    unsafe {
        let dst = frame.cast::<[u8; 6]>().read_unaligned();
        let src = frame.add(6).cast::<[u8; 6]>().read_unaligned();
        frame.cast::<[u8; 6]>().write_unaligned(src);
        frame.add(6).cast::<[u8; 6]>().write_unaligned(dst);
    }
}
