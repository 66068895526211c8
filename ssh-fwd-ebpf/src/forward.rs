//! Routing a rewritten packet ourselves: `bpf_fib_lookup`, then a redirect
//! out of the interface the route uses, as a router would, with the TTL
//! decremented (the hop limit for IPv6). The packet skips the node's IP input, netfilter and
//! forwarding. Whatever the lookup cannot settle (no route, forwarding off,
//! MTU exceeded, a TTL about to expire) goes to the stack as before, which
//! also owns the ICMP errors.

use core::mem::{size_of, zeroed};

use crate::{maps::IFACES, skb::bytes_at};
use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup},
    helpers::{
        bpf_csum_update, bpf_fib_lookup as fib_lookup, bpf_redirect, bpf_redirect_neigh,
        bpf_redirect_peer,
    },
    programs::TcContext,
};
use ssh_fwd_common::{
    csum,
    ipv6::{IPV6_NEXT_HEADER_OFF, forwarded_hop_word},
    maps::{Addr, Addr6, Endpoint, Endpoint6},
    packet::{
        ETH_HLEN, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_MIN_LEN, IPV4_TTL_OFF, forwarded_ttl_word,
    },
};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// Where the stack would send a packet, and the TTL or hop limit it must
/// leave with.
pub struct Route {
    ifindex: u32,
    smac: [u8; 6],
    /// Valid when `neighbour_known`.
    dmac: [u8; 6],
    /// The next hop's MAC address is known.
    neighbour_known: bool,
    /// IPv6: the word is (next header, hop limit), and no header checksum
    /// covers it.
    ipv6: bool,
    /// The raw word holding the TTL or hop limit, and what it becomes.
    ttl_word: u16,
    new_ttl_word: u16,
}

impl Route {
    /// The interface the packet would leave through.
    #[inline(always)]
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
}

/// The `IFACE_*` flags the agent recorded for an interface (0 if none).
#[inline(always)]
pub fn iface_flags(ifindex: u32) -> u32 {
    // SAFETY: copied out immediately.
    unsafe { IFACES.get(ifindex) }.copied().unwrap_or(0)
}

/// The route the stack would pick for this packet, now carrying `src -> dst`
/// and arriving on the skb's interface. `None`: leave the packet to the
/// stack (TTL about to expire, no route, forwarding off, MTU exceeded...).
#[inline(always)]
pub fn route(ctx: &TcContext, src: Endpoint, dst: Endpoint) -> Option<Route> {
    let ttl = bytes_at::<TcContext, 2>(ctx, ETH_HLEN + IPV4_TTL_OFF)?;
    // SAFETY: inside the range bytes_at checked.
    let ttl_word = unsafe { ttl.cast::<u16>().read_unaligned() };
    let new_ttl_word = forwarded_ttl_word(ttl_word)?;
    // SAFETY: a plain C struct; all-zero is its documented "no input" state.
    let mut fib: bpf_fib_lookup = unsafe { zeroed() };
    fib.family = AF_INET;
    fib.l4_protocol = IPPROTO_TCP;
    fib.sport = src.port;
    fib.dport = dst.port;
    fib.__bindgen_anon_3.ipv4_src = src.addr;
    fib.__bindgen_anon_4.ipv4_dst = dst.addr;
    lookup(ctx, fib, false, ttl_word, new_ttl_word)
}

/// [`route`] for IPv6.
#[inline(always)]
pub fn route6(ctx: &TcContext, src: Endpoint6, dst: Endpoint6) -> Option<Route> {
    let word = bytes_at::<TcContext, 2>(ctx, ETH_HLEN + IPV6_NEXT_HEADER_OFF)?;
    // SAFETY: inside the range bytes_at checked.
    let ttl_word = unsafe { word.cast::<u16>().read_unaligned() };
    let new_ttl_word = forwarded_hop_word(ttl_word)?;
    // SAFETY: a plain C struct; all-zero is its documented "no input" state.
    let mut fib: bpf_fib_lookup = unsafe { zeroed() };
    fib.family = AF_INET6;
    fib.l4_protocol = IPPROTO_TCP;
    fib.sport = src.port;
    fib.dport = dst.port;
    fib.__bindgen_anon_3.ipv6_src = src.addr.0;
    fib.__bindgen_anon_4.ipv6_dst = dst.addr.0;
    lookup(ctx, fib, true, ttl_word, new_ttl_word)
}

/// Looks `fib` up for the packet, arriving on the skb's interface.
#[inline(always)]
fn lookup(
    ctx: &TcContext,
    mut fib: bpf_fib_lookup,
    ipv6: bool,
    ttl_word: u16,
    new_ttl_word: u16,
) -> Option<Route> {
    // SAFETY: the context pointer is the live skb of this program run.
    fib.ifindex = unsafe { (*ctx.skb.skb).ifindex };
    // tot_len 0: for an skb the kernel checks the MTU itself, GSO-aware.
    // SAFETY: `fib` is a valid, initialised lookup struct of the size given.
    let rc = unsafe {
        fib_lookup(
            ctx.as_ptr(),
            &mut fib,
            size_of::<bpf_fib_lookup>() as i32,
            0,
        )
    } as u32;
    if rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH {
        return None;
    }
    // Only what the redirect needs is kept: the lookup's 64 bytes would
    // hold stack room across the connection tracking.
    Some(Route {
        ifindex: fib.ifindex,
        smac: fib.smac,
        dmac: fib.dmac,
        neighbour_known: rc == BPF_FIB_LKUP_RET_SUCCESS,
        ipv6,
        ttl_word,
        new_ttl_word,
    })
}

/// The route lookup in the address's family.
pub trait Routed: Addr {
    fn route(ctx: &TcContext, src: Endpoint<Self>, dst: Endpoint<Self>) -> Option<Route>;
}

impl Routed for u32 {
    #[inline(always)]
    fn route(ctx: &TcContext, src: Endpoint, dst: Endpoint) -> Option<Route> {
        route(ctx, src, dst)
    }
}

impl Routed for Addr6 {
    #[inline(always)]
    fn route(ctx: &TcContext, src: Endpoint6, dst: Endpoint6) -> Option<Route> {
        route6(ctx, src, dst)
    }
}

/// How [`send`] handed the packet on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Out of the route's interface.
    Out,
    /// Straight into the network namespace behind the route's interface.
    IntoPeer,
}

/// Decrements the TTL, writes the next hop's MAC addresses and redirects the
/// packet along `route`; returns the tc action. With `peer_ok` (the route's
/// interface is a pod's veth end) the packet is delivered straight to the
/// peer's ingress, which skips the veth's transmit path and one softirq
/// pass. `None`: the headers are not where they must be, nothing was
/// written, and the stack should route the packet.
///
/// The writes are direct: the TTL and the IPv4 checksum change by amounts
/// that cancel in the header's sum (so even a CHECKSUM_COMPLETE skb stays
/// valid), and no skb checksum covers the Ethernet header. Four helper
/// calls cost more than the rest of the redirect. IPv6 has no header
/// checksum to cancel the hop limit's change: a CHECKSUM_COMPLETE skb's
/// `csum` is told (`bpf_csum_update`, a no-op for any other skb).
#[inline(always)]
pub fn send(ctx: &TcContext, route: &Route, peer_ok: bool) -> Option<(i32, Sent)> {
    let frame = bytes_at::<TcContext, { ETH_HLEN + IPV4_MIN_LEN }>(ctx, 0)?;
    let diff = csum::diff16(route.ttl_word, route.new_ttl_word);
    if route.ipv6 {
        // SAFETY: inside the range bytes_at checked (an IPv6 header is
        // longer than the IPv4 one); the skb is this program run's.
        unsafe {
            frame
                .add(ETH_HLEN + IPV6_NEXT_HEADER_OFF)
                .cast::<u16>()
                .write_unaligned(route.new_ttl_word);
            bpf_csum_update(ctx.as_ptr().cast(), diff);
        }
    } else {
        // SAFETY: every write stays inside the range bytes_at checked; the
        // program has the skb to itself (the verifier unclones it first).
        unsafe {
            let check = frame.add(ETH_HLEN + IPV4_CHECK_OFF).cast::<u16>();
            check.write_unaligned(csum::apply(check.read_unaligned(), diff));
            frame
                .add(ETH_HLEN + IPV4_TTL_OFF)
                .cast::<u16>()
                .write_unaligned(route.new_ttl_word);
        }
    }
    if !route.neighbour_known {
        // No neighbour entry yet: the kernel resolves it (and queues the
        // packet meanwhile), as the stack's own output path would.
        // SAFETY: a NULL parameter block asks the helper to look up the
        // next hop itself.
        let action = unsafe { bpf_redirect_neigh(route.ifindex, core::ptr::null_mut(), 0, 0) };
        return Some((action as i32, Sent::Out));
    }
    // SAFETY: as above; the MACs are the first 12 bytes of the frame.
    unsafe {
        core::ptr::copy_nonoverlapping(route.dmac.as_ptr(), frame, 6);
        core::ptr::copy_nonoverlapping(route.smac.as_ptr(), frame.add(6), 6);
    }
    // SAFETY: helper calls with plain integer arguments.
    Some(unsafe {
        if peer_ok {
            (bpf_redirect_peer(route.ifindex, 0) as i32, Sent::IntoPeer)
        } else {
            (bpf_redirect(route.ifindex, 0) as i32, Sent::Out)
        }
    })
}
