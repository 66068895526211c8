//! After the DNAT, send the packet straight out of the interface the route to
//! the backend uses (bpf_fib_lookup, then a redirect), so it skips the node's
//! IP input, netfilter and forwarding - as a router would, with the TTL
//! decremented. Whatever the lookup cannot settle (no route, forwarding off,
//! MTU exceeded, a TTL about to expire) goes to the stack as before, which
//! also owns the ICMP errors.

use core::mem::{size_of, zeroed};

use crate::skb::bytes_at;
use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup},
    helpers::{bpf_fib_lookup as fib_lookup, bpf_redirect, bpf_redirect_neigh},
    programs::TcContext,
};
use ssh_fwd_common::{
    maps::Endpoint,
    packet::{ETH_HLEN, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_TTL_OFF, forwarded_ttl_word},
};

const AF_INET: u8 = 2;

/// The two ends of a DNATed packet, as now written in it.
#[derive(Clone, Copy)]
pub struct Flow {
    pub client: Endpoint,
    pub backend: Endpoint,
}

/// The route lookup the stack would do for this packet arriving on `ifindex`.
#[inline(always)]
fn lookup(ctx_ptr: *mut core::ffi::c_void, flow: Flow, ifindex: u32) -> (i64, bpf_fib_lookup) {
    // SAFETY: a plain C struct; all-zero is its documented "no input" state.
    let mut fib: bpf_fib_lookup = unsafe { zeroed() };
    fib.family = AF_INET;
    fib.l4_protocol = IPPROTO_TCP;
    fib.sport = flow.client.port;
    fib.dport = flow.backend.port;
    fib.ifindex = ifindex;
    fib.__bindgen_anon_3.ipv4_src = flow.client.addr;
    fib.__bindgen_anon_4.ipv4_dst = flow.backend.addr;
    // tot_len 0: for an skb the kernel checks the MTU itself, GSO-aware.
    // SAFETY: `fib` is a valid, initialised lookup struct of the size given.
    let rc = unsafe { fib_lookup(ctx_ptr, &mut fib, size_of::<bpf_fib_lookup>() as i32, 0) };
    (rc, fib)
}

/// tc ingress: the tc action if the packet was redirected, `None` if the
/// stack should route it.
#[inline(always)]
pub fn redirect_tc(ctx: &TcContext, flow: Flow) -> Option<i32> {
    let ttl = bytes_at::<2>(ctx, ETH_HLEN + IPV4_TTL_OFF)?;
    // SAFETY: inside the range bytes_at checked.
    let ttl_word = unsafe { ttl.cast::<u16>().read_unaligned() };
    let new_ttl_word = forwarded_ttl_word(ttl_word)?;
    // SAFETY: the context pointer is the live skb of this program run.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let (rc, fib) = lookup(ctx.as_ptr(), flow, ifindex);
    let rc = rc as u32;
    if rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH {
        return None;
    }
    // From here on the packet is ours to route: decrement the TTL.
    ctx.l3_csum_replace(
        ETH_HLEN + IPV4_CHECK_OFF,
        ttl_word as u64,
        new_ttl_word as u64,
        2,
    )
    .ok()?;
    ctx.store(ETH_HLEN + IPV4_TTL_OFF, &new_ttl_word, 0).ok()?;
    let action = if rc == BPF_FIB_LKUP_RET_SUCCESS {
        // The neighbour is known: write the Ethernet header, send directly.
        ctx.store(0, &fib.dmac, 0).ok()?;
        ctx.store(6, &fib.smac, 0).ok()?;
        // SAFETY: a helper call with plain integer arguments.
        unsafe { bpf_redirect(fib.ifindex, 0) }
    } else {
        // No neighbour entry yet: the kernel resolves it (and queues the
        // packet meanwhile), as the stack's own output path would.
        // SAFETY: a NULL parameter block asks the helper to look up the
        // next hop itself.
        unsafe { bpf_redirect_neigh(fib.ifindex, core::ptr::null_mut(), 0, 0) }
    };
    Some(action as i32)
}
