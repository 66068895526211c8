//! `--announce l2` over IPv6: neighbour discovery on an external
//! interface, as `crate::arp` for IPv4. A solicitation for an IPv6 SSH IP
//! the agent put in `ANNOUNCE6` for this interface is answered with the
//! interface's MAC (`ssh_fwd_common::ndp::answer`), written over the
//! solicitation and sent back out where it came in (`XDP_TX`, or in tc a
//! redirect to the arrival interface's egress); another MAC advertising
//! an announced address is another agent's, recorded in `NDP_HEARD` (and,
//! for an entry flagged to yield, the entry removed), or foreign, counted
//! in `NDP_FOREIGN` (`crate::claim`, as for ARP). Every other frame
//! passes.
//!
//! The entry points run this before the IPv6 path, in a function of its
//! own: the frame's copy takes stack room the IPv6 path has not got.
//!
//! Apart from `crate::arp`, not written once with it: a different
//! protocol (ICMPv6 in IPv6, options, a pseudo-header checksum), where
//! ARP is a bare frame; see there.

use aya_ebpf::{
    bindings::{BPF_F_RECOMPUTE_CSUM, TC_ACT_UNSPEC, xdp_action},
    helpers::bpf_redirect,
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    ipv6::{IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_PAYLOAD_LEN_OFF, NEXTHDR_ICMPV6},
    maps::AnnounceKey6,
    ndp::{self, NDP_ADVERT, NDP_FRAME_LEN, NDP_FRAME_LLA_LEN, NDP_SOLICIT},
    outcome::Outcome,
    packet::ETH_HLEN,
};

use crate::{
    claim::{self, claimed},
    counters::count,
    maps::{ANNOUNCE6, NDP_FOREIGN, NDP_HEARD},
    packet::{Packet, bytes_at, read},
};

/// Whether an IPv6 frame is a neighbour solicitation or advertisement (by
/// its next header and ICMPv6 type alone): the frames [`xdp`] and [`tc`]
/// take.
#[inline(always)]
pub fn is_ndp<P: Packet>(p: &P) -> bool {
    let Some(at) = bytes_at::<P, { ETH_HLEN + IPV6_HLEN + 1 }>(p, 0) else {
        return false;
    };
    // SAFETY: inside the range bytes_at checked.
    let (next_header, kind) = unsafe {
        (
            *at.add(ETH_HLEN + IPV6_NEXT_HEADER_OFF),
            *at.add(ETH_HLEN + IPV6_HLEN),
        )
    };
    next_header == NEXTHDR_ICMPV6 && (kind == NDP_SOLICIT || kind == NDP_ADVERT)
}

/// XDP: the verdict for a frame [`is_ndp`] took, counted.
#[inline(never)]
pub fn xdp(ctx: XdpContext) -> u32 {
    let mut frame = [0u8; NDP_FRAME_LLA_LEN];
    let len = match see(&ctx, &mut frame) {
        Ok(len) => len,
        Err(outcome) => {
            count(outcome);
            return xdp_action::XDP_PASS;
        }
    };
    let written = if len == NDP_FRAME_LLA_LEN {
        write::<XdpContext, NDP_FRAME_LLA_LEN>(&ctx, &frame)
    } else {
        write::<XdpContext, NDP_FRAME_LEN>(&ctx, &frame)
    };
    if written.is_none() {
        count(Outcome::NdpFailed);
        return xdp_action::XDP_PASS;
    }
    count(Outcome::NdpAnswered);
    xdp_action::XDP_TX
}

/// Writes the first `N` bytes of `reply` over the frame.
#[inline(always)]
fn write<P: Packet, const N: usize>(p: &P, reply: &[u8; NDP_FRAME_LLA_LEN]) -> Option<()> {
    let at = bytes_at::<P, N>(p, 0)?;
    // SAFETY: bytes_at checked the frame holds these N bytes, and N is at
    // most the reply's length.
    unsafe { core::ptr::copy_nonoverlapping(reply.as_ptr(), at, N) };
    Some(())
}

/// tc: the action for a frame [`is_ndp`] took, counted. A frame whose
/// VLAN tag the device took off is not answered, as for ARP.
#[inline(never)]
pub fn tc(ctx: TcContext) -> i32 {
    let mut frame = [0u8; NDP_FRAME_LLA_LEN];
    let len = match see(&ctx, &mut frame) {
        Ok(len) => len,
        Err(outcome) => {
            count(outcome);
            return TC_ACT_UNSPEC;
        }
    };
    // SAFETY: the context pointer is the live skb of this program run.
    let (vlan, ifindex) = unsafe { ((*ctx.skb.skb).vlan_present, (*ctx.skb.skb).ifindex) };
    let stored = if vlan != 0 {
        Err(-1)
    } else if len == NDP_FRAME_LLA_LEN {
        ctx.store(0, &frame, BPF_F_RECOMPUTE_CSUM as u64)
    } else {
        let short = frame.as_ptr().cast::<[u8; NDP_FRAME_LEN]>();
        // SAFETY: the first NDP_FRAME_LEN bytes of `frame`.
        ctx.store(0, unsafe { &*short }, BPF_F_RECOMPUTE_CSUM as u64)
    };
    if stored.is_err() {
        count(Outcome::NdpFailed);
        return TC_ACT_UNSPEC;
    }
    count(Outcome::NdpAnswered);
    // SAFETY: a helper call with plain integer arguments.
    unsafe { bpf_redirect(ifindex, 0) as i32 }
}

/// Copies the first `N` bytes of the frame into `frame`.
#[inline(always)]
fn load<P: Packet, const N: usize>(p: &P, frame: &mut [u8; NDP_FRAME_LLA_LEN]) -> Option<()> {
    let at = bytes_at::<P, N>(p, 0)?;
    // SAFETY: bytes_at checked the N bytes; `frame` has room for them.
    unsafe { core::ptr::copy_nonoverlapping(at.cast_const(), frame.as_mut_ptr(), N) };
    Some(())
}

/// Reads a neighbour discovery frame into `frame` and decides: `Ok(len)`
/// when `frame` holds the advertisement to send back in place of the
/// frame's `len` bytes; `Err`: passed, counted as this.
#[inline(always)]
fn see<P: Packet>(p: &P, frame: &mut [u8; NDP_FRAME_LLA_LEN]) -> Result<usize, Outcome> {
    // Counted as what it is, as without `--announce`: an ICMPv6 packet,
    // IP but not TCP (an ARP frame not ours is `PassNotIp`, not being IP).
    let not_ours = Outcome::PassNotTcp;
    let payload = read::<P, 2>(p, ETH_HLEN + IPV6_PAYLOAD_LEN_OFF).ok_or(not_ours)?;
    let len = ETH_HLEN + IPV6_HLEN + u16::from_be_bytes(payload) as usize;
    let loaded = if len == NDP_FRAME_LLA_LEN {
        load::<P, NDP_FRAME_LLA_LEN>(p, frame)
    } else if len == NDP_FRAME_LEN {
        load::<P, NDP_FRAME_LEN>(p, frame)
    } else {
        None
    };
    loaded.ok_or(not_ours)?;
    let seen = ndp::parse(frame, len).ok_or(not_ours)?;
    let key = AnnounceKey6 {
        ifindex: p.arrival_ifindex(),
        addr: seen.target,
    };
    // SAFETY: copied out immediately.
    let ours = (unsafe { ANNOUNCE6.get(key) }).copied().ok_or(not_ours)?;
    if seen.claims_target() {
        let maps = claim::Maps {
            announce: &ANNOUNCE6,
            heard: &NDP_HEARD,
            foreign: &NDP_FOREIGN,
        };
        if claimed(&maps, &key, &ours, &seen.target, seen.mac) {
            return Err(Outcome::NdpHeard);
        }
        return Err(not_ours);
    }
    if !seen.asks() {
        return Err(not_ours);
    }
    ndp::answer(frame, &seen, ours.mac);
    Ok(len)
}
