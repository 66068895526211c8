//! TCP checksums XDP cannot take at face value. An XDP program does not see
//! an skb's checksum state, and on a veth, a tun device or in generic mode
//! a packet may still be CHECKSUM_PARTIAL: its sender (a local stack with
//! checksum offload, or GRO) left in the field only the pseudo-header sum,
//! for the device that sends the packet on to complete. Updated like a full
//! checksum, that sum comes out wrong wherever it is completed. A field
//! equal to the packet's own pseudo-header sum is such a sum, unless the
//! segment's full checksum is valid too: then the field is both, and the
//! bytes cannot say which (one full checksum in 65,536 equals the sum, and
//! one partial segment in 65,536 sums as a valid checksum), so the rewrite
//! must be right as either (`ingress_xdp::dnat`). Only a field equal to
//! the sum is summed: on a NIC's native XDP, where no packet is partial,
//! one packet in 65,536.

use aya_ebpf::programs::XdpContext;
use ssh_fwd_common::{
    csum,
    ipv6::pseudo_seed6,
    maps::{Addr, Addr6},
    packet::IPPROTO_TCP,
};

use crate::{
    packet::Headers,
    sum::{MAX_SUMMED, sum},
};

/// What a TCP checksum field holds, as far as the packet's bytes tell.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A full checksum.
    Checksum,
    /// The pseudo-header sum of a CHECKSUM_PARTIAL packet.
    Sum,
    /// The pseudo-header sum, which is the segment's valid checksum too.
    Both,
}

/// What `check`, the TCP checksum field of the packet, holds.
#[inline(always)]
pub fn field(ctx: &XdpContext, h: &Headers, check: u16) -> Field {
    let len = h.total_len.saturating_sub(h.ip_len);
    let seed = csum::pseudo_seed(h.source.addr, h.destination.addr, IPPROTO_TCP, len as u16);
    field_with(ctx, h, check, seed)
}

/// [`field`] for IPv6, whose pseudo-header holds the 128-bit addresses.
#[inline(always)]
pub fn field6(ctx: &XdpContext, h: &Headers<Addr6>, check: u16) -> Field {
    let len = h.total_len.saturating_sub(h.ip_len);
    let seed = pseudo_seed6(h.source.addr, h.destination.addr, len as u16);
    field_with(ctx, h, check, seed)
}

/// What `check` holds, given the segment's pseudo-header sum `seed`.
#[inline(always)]
fn field_with<A: Addr>(ctx: &XdpContext, h: &Headers<A>, check: u16, seed: u16) -> Field {
    let len = h.total_len.saturating_sub(h.ip_len);
    if !csum::same(check, seed) {
        return Field::Checksum;
    }
    if len > MAX_SUMMED {
        return Field::Sum;
    }
    // A valid full checksum sums, with the pseudo-header, to zero.
    match sum(ctx, h.l4(), len) {
        Some(sum) if csum::fold64(sum + seed as u64) == 0xffff => Field::Both,
        _ => Field::Sum,
    }
}
