//! tc specifics: parsing an skb whose headers may not all be linear yet,
//! and rewriting an address and port through the kernel's checksum helper,
//! which knows the skb's checksum offload state.
//!
//! [`rewrite`] and [`rewrite6`] stay two functions, joined by [`Rewrite`]
//! for the callers that are written once: their checksum work differs by
//! protocol, not only by the address's width. IPv4 has a header checksum,
//! whose change cancels the address's in `skb->csum`; IPv6 has none, and
//! puts the change back with `bpf_csum_update`.

use aya_ebpf::{
    EbpfContext as _, bindings::BPF_F_PSEUDO_HDR, helpers::bpf_csum_update, programs::TcContext,
};
use ssh_fwd_common::{
    csum,
    ipv6::{IPV6_DADDR_OFF, IPV6_SADDR_OFF},
    maps::{Addr, Addr6, Endpoint, Endpoint6},
    outcome::Outcome,
    packet::{
        ETH_HLEN, IPV4_CHECK_OFF, IPV4_DADDR_OFF, IPV4_MAX_LEN, IPV4_MIN_LEN, IPV4_SADDR_OFF,
        TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_MIN_LEN, TCP_SPORT_OFF,
    },
};

pub use crate::packet::bytes_at;
use crate::packet::{Headers, IPV6_HEADERS_MAX, parse as parse_linear, parse6 as parse6_linear};

/// Longest IPv4 header plus a TCP header, or plus an ICMP error's quote of
/// one: what parsing and ICMP translation need linear.
const HEADERS_MAX: u32 = (ETH_HLEN + IPV4_MAX_LEN + 8 + IPV4_MAX_LEN + TCP_MIN_LEN) as u32;

/// Classifies the skb. Reads the linear data directly (no helper call per
/// field, which cost more than the rest of a miss); only when the headers
/// are not all in the linear part are they pulled in, once.
#[inline(always)]
pub fn parse(ctx: &TcContext) -> Result<Headers, Outcome> {
    match parse_linear(ctx) {
        Some(parsed) => parsed,
        None => {
            // Fails for a packet shorter than its headers: malformed.
            ctx.pull_data(HEADERS_MAX.min(ctx.len()))
                .map_err(|_| Outcome::Malformed)?;
            parse_linear(ctx).unwrap_or(Err(Outcome::Malformed))
        }
    }
}

/// [`parse`] for IPv6.
#[inline(always)]
pub fn parse6(ctx: &TcContext) -> Result<Headers<Addr6>, Outcome> {
    match parse6_linear(ctx) {
        Some(parsed) => parsed,
        None => {
            ctx.pull_data((IPV6_HEADERS_MAX as u32).min(ctx.len()))
                .map_err(|_| Outcome::Malformed)?;
            parse6_linear(ctx).unwrap_or(Err(Outcome::Malformed))
        }
    }
}

/// Which side of the connection [`rewrite`] replaces.
#[derive(Clone, Copy)]
pub enum Field {
    Source,
    Destination,
}

/// Replaces one side's address and port, fixing the IPv4 checksum and the TCP
/// checksum. Only the TCP checksum goes through the kernel's helper: whether
/// the skb's checksum is still to be completed (CHECKSUM_PARTIAL, where only
/// the pseudo-header part changes) or covered by `skb->csum`
/// (CHECKSUM_COMPLETE) is the kernel's to know. The rest is written
/// directly: the address and the IPv4 checksum change by amounts that cancel
/// in the header's sum, and the port by what the helper already took out of
/// the TCP checksum, so `skb->csum` stays as valid as with helper stores.
/// An `Err` after the first helper leaves the packet half-written: drop it.
#[inline(always)]
pub fn rewrite(
    ctx: &TcContext,
    l4: usize,
    field: Field,
    from: Endpoint,
    to: Endpoint,
) -> Result<(), i64> {
    let (addr_off, port_off) = match field {
        Field::Source => (IPV4_SADDR_OFF, TCP_SPORT_OFF),
        Field::Destination => (IPV4_DADDR_OFF, TCP_DPORT_OFF),
    };
    let tcp_check = l4 + TCP_CHECK_OFF;
    ctx.l4_csum_replace(
        tcp_check,
        from.addr as u64,
        to.addr as u64,
        (BPF_F_PSEUDO_HDR | 4) as u64,
    )?;
    ctx.l4_csum_replace(tcp_check, from.port as u64, to.port as u64, 2)?;
    // The helpers may have moved the data: look the headers up again.
    let ip = bytes_at::<TcContext, IPV4_MIN_LEN>(ctx, ETH_HLEN).ok_or(-1i64)?;
    let tcp = bytes_at::<TcContext, TCP_MIN_LEN>(ctx, l4).ok_or(-1i64)?;
    // SAFETY: every write stays inside a range bytes_at checked; the program
    // has the skb to itself (the verifier unclones it first).
    unsafe {
        let check = ip.add(IPV4_CHECK_OFF).cast::<u16>();
        check.write_unaligned(csum::apply(
            check.read_unaligned(),
            csum::diff32(from.addr, to.addr),
        ));
        ip.add(addr_off).cast::<u32>().write_unaligned(to.addr);
        tcp.add(port_off).cast::<u16>().write_unaligned(to.port);
    }
    Ok(())
}

/// [`rewrite`] for IPv6: no header checksum, and the address's change
/// reaches the TCP checksum through its pseudo-header as one difference
/// of the 16 bytes. The helper takes that change out of a
/// CHECKSUM_COMPLETE skb's `csum` as it would for IPv4, where the header
/// checksum cancels the address's own change; here nothing does, so it
/// goes back in (`bpf_csum_update`, a no-op for any other skb). Kernels
/// from 6.16 have a flag for this; the update works on every kernel.
#[inline(always)]
pub fn rewrite6(
    ctx: &TcContext,
    l4: usize,
    field: Field,
    from: Endpoint6,
    to: Endpoint6,
) -> Result<(), i64> {
    let (addr_off, port_off) = match field {
        Field::Source => (IPV6_SADDR_OFF, TCP_SPORT_OFF),
        Field::Destination => (IPV6_DADDR_OFF, TCP_DPORT_OFF),
    };
    let diff = ssh_fwd_common::ipv6::words_diff(from.addr, to.addr);
    let tcp_check = l4 + TCP_CHECK_OFF;
    // Size 0: `to` is a difference already summed.
    ctx.l4_csum_replace(tcp_check, 0, u64::from(diff), BPF_F_PSEUDO_HDR as u64)?;
    // SAFETY: the skb of this program run.
    unsafe { bpf_csum_update(ctx.as_ptr().cast(), diff) };
    ctx.l4_csum_replace(tcp_check, from.port as u64, to.port as u64, 2)?;
    // The helpers may have moved the data: look the headers up again.
    let addr = bytes_at::<TcContext, 16>(ctx, ETH_HLEN + addr_off).ok_or(-1i64)?;
    let tcp = bytes_at::<TcContext, TCP_MIN_LEN>(ctx, l4).ok_or(-1i64)?;
    // SAFETY: every write stays inside a range bytes_at checked; the program
    // has the skb to itself (the verifier unclones it first).
    unsafe {
        let words = addr.cast::<u32>();
        for (i, w) in to.addr.0.iter().enumerate() {
            words.add(i).write_unaligned(*w);
        }
        tcp.add(port_off).cast::<u16>().write_unaligned(to.port);
    }
    Ok(())
}

/// The rewrite of one side of a TCP segment, in the address's family.
pub trait Rewrite: Addr {
    fn rewrite(
        ctx: &TcContext,
        l4: usize,
        field: Field,
        from: Endpoint<Self>,
        to: Endpoint<Self>,
    ) -> Result<(), i64>;
}

impl Rewrite for u32 {
    #[inline(always)]
    fn rewrite(
        ctx: &TcContext,
        l4: usize,
        field: Field,
        from: Endpoint,
        to: Endpoint,
    ) -> Result<(), i64> {
        rewrite(ctx, l4, field, from, to)
    }
}

impl Rewrite for Addr6 {
    #[inline(always)]
    fn rewrite(
        ctx: &TcContext,
        l4: usize,
        field: Field,
        from: Endpoint6,
        to: Endpoint6,
    ) -> Result<(), i64> {
        rewrite6(ctx, l4, field, from, to)
    }
}
