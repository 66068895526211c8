//! The frontend option over IPv6 (`ssh_fwd_common::ipopt::v6`): a
//! Destination Options header of its own, right after the fixed header,
//! added to a translated SYN that has no extension headers as it leaves for
//! the backend's node, read and removed again on that node. The fixed
//! header's next header and payload length follow it in and out.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{bpf_adj_room_mode::BPF_ADJ_ROOM_NET, xdp_md},
    helpers::{bpf_csum_update, bpf_skb_adjust_room, bpf_xdp_adjust_head},
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    conntrack::mss::cap_for_mtu6,
    ipopt::{
        Carried, PLAIN_LEN6, SEALED_LEN6, fixed_after, len_of6, read6, sum_change, tag6, words6,
    },
    ipv6::{IPV6_HLEN, IPV6_NEXT_HEADER_OFF, IPV6_PAYLOAD_LEN_OFF, NEXTHDR_DEST},
    maps::{Addr6, Endpoint6},
    packet::ETH_HLEN,
    siphash::Key,
};

use crate::{
    ipopt::{Carrier, NotAdded, Program, Strip},
    packet::{Headers, Packet, bytes_at, put_word, read, word},
};

/// Where the header sits: right after the fixed header.
const AT: usize = ETH_HLEN + IPV6_HLEN;
const PAYLOAD_LEN: usize = ETH_HLEN + IPV6_PAYLOAD_LEN_OFF;
const NEXT_HEADER: usize = ETH_HLEN + IPV6_NEXT_HEADER_OFF;

impl Carrier for Addr6 {
    #[inline(always)]
    fn carried<P: Packet>(p: &P, h: &Headers<Addr6>) -> Option<Carried<Addr6>> {
        if read::<P, 1>(p, NEXT_HEADER)? != [NEXTHDR_DEST] {
            return None;
        }
        let len = len_of6(read::<P, 4>(p, AT)?)?;
        // The walk went past it: it is whole inside the packet.
        if h.ip_len < IPV6_HLEN + len {
            return None;
        }
        // A plain header's SYN has its TCP header past it: 32 bytes are
        // there for both forms.
        read6(read::<P, SEALED_LEN6>(p, AT)?).map(|(_, option)| option)
    }

    #[inline(always)]
    fn option(frontend: Endpoint6, tag: Option<u64>) -> Carried<Addr6> {
        Carried {
            frontend,
            len: if tag.is_some() {
                SEALED_LEN6
            } else {
                PLAIN_LEN6
            },
            tag: tag.unwrap_or(0),
        }
    }

    #[inline(always)]
    fn tag(key: Key, client: Endpoint6, backend: Endpoint6, isn: u32, frontend: Endpoint6) -> u64 {
        tag6(key, client, backend, isn, frontend)
    }

    #[inline(always)]
    fn add(ctx: &TcContext, h: &Headers<Addr6>, option: &Carried<Addr6>) -> Result<(), NotAdded> {
        add(ctx, h, option)
    }

    #[inline(always)]
    fn strip<P: Strip>(p: &P, option: &Carried<Addr6>) -> bool {
        match p.program() {
            Program::Tc(ctx) => strip_skb(ctx, option),
            Program::Xdp(ctx) => strip_xdp(ctx, option),
        }
    }

    #[inline(always)]
    fn mss_cap(mtu: u32) -> u16 {
        cap_for_mtu6(mtu)
    }
}

/// The fixed header's payload length and next header words, raw.
#[inline(always)]
fn fixed<P: Packet>(p: &P) -> Option<[u16; 2]> {
    Some([word(p, PAYLOAD_LEN)?, word(p, NEXT_HEADER)?])
}

/// Writes the fixed header's two words.
#[inline(always)]
fn put_fixed<P: Packet>(p: &P, words: [u16; 2]) -> Option<()> {
    put_word(p, PAYLOAD_LEN, words[0])?;
    put_word(p, NEXT_HEADER, words[1])
}

/// Adds `option` to the skb of the SYN `h`: only on one without extension
/// headers (a Hop-by-Hop header must stay first, and the kernel inserts
/// right after the fixed header).
#[inline(always)]
fn add(ctx: &TcContext, h: &Headers<Addr6>, option: &Carried<Addr6>) -> Result<(), NotAdded> {
    if h.ip_len != IPV6_HLEN {
        return Err(NotAdded::NoRoom);
    }
    let Some(before) = fixed(ctx) else {
        return Err(NotAdded::Refused);
    };
    let [next, _] = before[1].to_ne_bytes();
    let words = words6(next, option);
    let sealed = option.is_sealed();
    let len = if sealed { SEALED_LEN6 } else { PLAIN_LEN6 };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let grown =
        unsafe { bpf_skb_adjust_room(ctx.as_ptr().cast(), len as i32, BPF_ADJ_ROOM_NET, 0) };
    if grown != 0 {
        return Err(NotAdded::Refused);
    }
    if sealed {
        let Some(to) = bytes_at::<TcContext, SEALED_LEN6>(ctx, AT) else {
            return Err(NotAdded::Broken);
        };
        // SAFETY: `bytes_at` checked the 32 bytes are inside the packet.
        unsafe { to.cast::<[u32; 8]>().write_unaligned(words) };
    } else {
        let Some(to) = bytes_at::<TcContext, PLAIN_LEN6>(ctx, AT) else {
            return Err(NotAdded::Broken);
        };
        let plain = [words[0], words[1], words[2], words[3], words[4], words[5]];
        // SAFETY: `bytes_at` checked the 24 bytes are inside the packet.
        unsafe { to.cast::<[u32; 6]>().write_unaligned(plain) };
    }
    let (payload_len, next_hop) = fixed_after(before[0], before[1], len, NEXTHDR_DEST, true);
    let after = [payload_len, next_hop];
    put_fixed(ctx, after).ok_or(NotAdded::Broken)?;
    csum_update(ctx, sum_change(&words, len, before, after, true));
    Ok(())
}

/// Takes what the program wrote into a CHECKSUM_COMPLETE skb's `csum`
/// (a no-op for any other skb).
#[inline(always)]
fn csum_update(ctx: &TcContext, sum: u32) {
    // SAFETY: the skb of this program run.
    unsafe { bpf_csum_update(ctx.as_ptr().cast(), sum) };
}

/// The header's length, and the fixed header's words with it removed.
#[inline(always)]
fn without<P: Packet>(p: &P, option: &Carried<Addr6>) -> Option<(usize, [u16; 2], [u16; 2])> {
    let before = fixed(p)?;
    let [next] = read::<P, 1>(p, AT)?;
    let len = if option.is_sealed() {
        SEALED_LEN6
    } else {
        PLAIN_LEN6
    };
    let (payload_len, next_hop) = fixed_after(before[0], before[1], len, next, false);
    Some((len, before, [payload_len, next_hop]))
}

/// Removes the header (which [`Carrier::carried`] found) from an skb.
#[inline(always)]
fn strip_skb(ctx: &TcContext, option: &Carried<Addr6>) -> bool {
    let Some((len, before, after)) = without(ctx, option) else {
        return false;
    };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let shrunk =
        unsafe { bpf_skb_adjust_room(ctx.as_ptr().cast(), -(len as i32), BPF_ADJ_ROOM_NET, 0) };
    if shrunk != 0 || put_fixed(ctx, after).is_none() {
        return false;
    }
    csum_update(ctx, sum_change(&[0; 8], 0, before, after, false));
    true
}

/// Removes the header from an XDP frame: the Ethernet and fixed headers
/// move up by its length, and the frame starts that much later.
#[inline(always)]
fn strip_xdp(ctx: &XdpContext, option: &Carried<Addr6>) -> bool {
    let Some((len, _, after)) = without(ctx, option) else {
        return false;
    };
    // A plain header's SYN has its TCP header past it: the longer range
    // is there for both forms.
    let Some(from) = bytes_at::<XdpContext, { AT + SEALED_LEN6 }>(ctx, 0) else {
        return false;
    };
    // BPF has no memmove: the headers move up in chunks no longer than
    // the header they move over (24 or 32 bytes), the last chunk first,
    // so that no chunk overlaps where it goes and each lands only on
    // bytes already moved.
    // SAFETY: every copy stays inside the AT + 32 bytes checked above.
    unsafe {
        let to = from.add(len);
        core::ptr::copy_nonoverlapping(from.add(30), to.add(30), AT - 30);
        core::ptr::copy_nonoverlapping(from.add(6), to.add(6), 24);
        core::ptr::copy_nonoverlapping(from, to, 6);
    }
    // SAFETY: the frame of this program run; dropping bytes that exist
    // from its head is what the helper is for.
    let moved = unsafe { bpf_xdp_adjust_head(ctx.as_ptr().cast::<xdp_md>(), len as i32) };
    moved == 0 && put_fixed(ctx, after).is_some()
}
