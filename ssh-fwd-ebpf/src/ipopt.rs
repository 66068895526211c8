//! The frontend option of `ssh_fwd_common::ipopt`: added to a translated SYN
//! as it leaves for the backend's node, read and removed again on that node
//! before the pod sees the SYN. The option always sits right after the
//! 20-byte header, which is where the kernel's "adjust room at the network
//! layer" inserts and removes bytes.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{bpf_adj_room_mode::BPF_ADJ_ROOM_NET, xdp_md},
    helpers::{bpf_skb_adjust_room, bpf_xdp_adjust_head},
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    ipopt::{self, FRONTEND_OPTION_LEN, MAX_IP_LEN_BEFORE},
    maps::Endpoint,
    packet::{ETH_HLEN, IPV4_CHECK_OFF, IPV4_MIN_LEN, IPV4_TOT_LEN_OFF},
};

use crate::packet::{Packet, bytes_at, put_word, read, word};

/// The frontend in the first option of a packet with an IPv4 header of
/// `ip_len` bytes, if it is ours.
#[inline(always)]
pub fn frontend<P: Packet>(p: &P, ip_len: usize) -> Option<Endpoint> {
    if ip_len < IPV4_MIN_LEN + FRONTEND_OPTION_LEN {
        return None;
    }
    ipopt::read(read::<P, FRONTEND_OPTION_LEN>(p, ETH_HLEN + IPV4_MIN_LEN)?)
}

/// The header words the option's insertion or removal changes, read before.
struct Before {
    word0: u16,
    tot_len: u16,
    check: u16,
}

#[inline(always)]
fn before<P: Packet>(p: &P) -> Option<Before> {
    Some(Before {
        word0: word(p, ETH_HLEN)?,
        tot_len: word(p, ETH_HLEN + IPV4_TOT_LEN_OFF)?,
        check: word(p, ETH_HLEN + IPV4_CHECK_OFF)?,
    })
}

/// Writes the new version/IHL, total length and checksum.
#[inline(always)]
fn fix_header<P: Packet>(p: &P, b: &Before, frontend: Endpoint, add: bool) -> Option<()> {
    let (w0, len, check) =
        ipopt::header_after(b.word0, b.tot_len, b.check, ipopt::words(frontend), add);
    put_word(p, ETH_HLEN, w0)?;
    put_word(p, ETH_HLEN + IPV4_TOT_LEN_OFF, len)?;
    put_word(p, ETH_HLEN + IPV4_CHECK_OFF, check)
}

/// Adds the option carrying `frontend` to an skb whose IPv4 header is
/// `ip_len` bytes. `false`: nothing changed (no room left in the header,
/// or the kernel refused), and the SYN goes on without it.
#[inline(always)]
pub fn add(ctx: &TcContext, ip_len: usize, frontend: Endpoint) -> bool {
    if ip_len > MAX_IP_LEN_BEFORE {
        return false;
    }
    let Some(b) = before(ctx) else {
        return false;
    };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let grown = unsafe {
        bpf_skb_adjust_room(
            ctx.as_ptr().cast(),
            FRONTEND_OPTION_LEN as i32,
            BPF_ADJ_ROOM_NET,
            0,
        )
    };
    if grown != 0 {
        return false;
    }
    let Some(at) = bytes_at::<TcContext, FRONTEND_OPTION_LEN>(ctx, ETH_HLEN + IPV4_MIN_LEN) else {
        return false;
    };
    let words = ipopt::words(frontend);
    // SAFETY: `bytes_at` checked the 8 bytes are inside the packet.
    unsafe { at.cast::<[u16; 4]>().write_unaligned(words) };
    fix_header(ctx, &b, frontend, true).is_some()
}

/// Removes the option (which [`frontend`] found) from an skb.
#[inline(always)]
pub fn strip_skb(ctx: &TcContext, frontend: Endpoint) -> bool {
    let Some(b) = before(ctx) else {
        return false;
    };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let shrunk = unsafe {
        bpf_skb_adjust_room(
            ctx.as_ptr().cast(),
            -(FRONTEND_OPTION_LEN as i32),
            BPF_ADJ_ROOM_NET,
            0,
        )
    };
    shrunk == 0 && fix_header(ctx, &b, frontend, false).is_some()
}

/// The Ethernet header and the 20-byte IPv4 header, moved over the option.
const MOVED: usize = ETH_HLEN + IPV4_MIN_LEN;

/// Removes the option from an XDP frame: the headers before it move up by
/// its length, and the frame starts that much later.
#[inline(always)]
pub fn strip_xdp(ctx: &XdpContext, frontend: Endpoint) -> bool {
    let Some(b) = before(ctx) else {
        return false;
    };
    let Some(from) = bytes_at::<XdpContext, { MOVED + FRONTEND_OPTION_LEN }>(ctx, 0) else {
        return false;
    };
    // Through a copy on the stack: the ranges overlap, and BPF has no
    // memmove, only fixed-size copies.
    let mut headers = [0u8; MOVED];
    // SAFETY: both copies stay inside the MOVED + option bytes checked
    // above and the local array.
    unsafe {
        core::ptr::copy_nonoverlapping(from, headers.as_mut_ptr(), MOVED);
        core::ptr::copy_nonoverlapping(headers.as_ptr(), from.add(FRONTEND_OPTION_LEN), MOVED);
    }
    // SAFETY: the frame of this program run; shrinking the head by bytes
    // that exist is what the helper is for.
    let moved =
        unsafe { bpf_xdp_adjust_head(ctx.as_ptr().cast::<xdp_md>(), FRONTEND_OPTION_LEN as i32) };
    moved == 0 && fix_header(ctx, &b, frontend, false).is_some()
}
