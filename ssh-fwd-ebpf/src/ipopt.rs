//! The frontend option of `ssh_fwd_common::ipopt`: added to a translated SYN
//! as it leaves for the backend's node, read and removed again on that node
//! before the pod sees the SYN. The option always sits right after the
//! 20-byte header, which is where the kernel's "adjust room at the network
//! layer" inserts and removes bytes. IPv6 carries it in a header of its own
//! at the same place (`crate::destopt`); [`Carrier`] is what the callers
//! see of either.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{bpf_adj_room_mode::BPF_ADJ_ROOM_NET, xdp_md},
    helpers::{bpf_skb_adjust_room, bpf_xdp_adjust_head},
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    conntrack::mss::cap_for_mtu,
    ipopt::{self, Carried, PLAIN_LEN, SEALED_LEN, max_ip_len_before},
    maps::Endpoint,
    packet::{ETH_HLEN, IPV4_CHECK_OFF, IPV4_MIN_LEN, IPV4_TOT_LEN_OFF},
    siphash::Key,
};

use crate::{
    family::Family,
    packet::{Headers, Packet, bytes_at, put_word, read, word},
};

/// The frontend option as a family carries it.
pub trait Carrier: Family {
    /// The option first on the SYN with headers `h`, if it is ours.
    fn carried<P: Packet>(p: &P, h: &Headers<Self>) -> Option<Carried<Self>>;
    /// The option naming `frontend`: sealed with `tag` if given.
    fn option(frontend: Endpoint<Self>, tag: Option<u64>) -> Carried<Self>;
    /// The tag of the sealed option of the SYN `client -> backend` with
    /// the sequence number `isn`, naming `frontend`.
    fn tag(
        key: Key,
        client: Endpoint<Self>,
        backend: Endpoint<Self>,
        isn: u32,
        frontend: Endpoint<Self>,
    ) -> u64;
    /// Adds `option` to the skb of the SYN with headers `h`.
    fn add(ctx: &TcContext, h: &Headers<Self>, option: &Carried<Self>) -> Result<(), NotAdded>;
    /// Removes `option` (which [`Carrier::carried`] found) from the packet.
    fn strip<P: Strip>(p: &P, option: &Carried<Self>) -> bool;
    /// The MSS a link of `mtu` bytes carries.
    fn mss_cap(mtu: u32) -> u16;
}

impl Carrier for u32 {
    #[inline(always)]
    fn carried<P: Packet>(p: &P, h: &Headers) -> Option<Carried> {
        carried(p, h.ip_len)
    }

    #[inline(always)]
    fn option(frontend: Endpoint, tag: Option<u64>) -> Carried {
        Carried {
            frontend,
            len: if tag.is_some() { SEALED_LEN } else { PLAIN_LEN },
            tag: tag.unwrap_or(0),
        }
    }

    #[inline(always)]
    fn tag(key: Key, client: Endpoint, backend: Endpoint, isn: u32, frontend: Endpoint) -> u64 {
        ipopt::tag(key, client, backend, isn, frontend)
    }

    #[inline(always)]
    fn add(ctx: &TcContext, h: &Headers, option: &Carried) -> Result<(), NotAdded> {
        add(ctx, h.ip_len, option)
    }

    #[inline(always)]
    fn strip<P: Strip>(p: &P, option: &Carried) -> bool {
        match p.program() {
            Program::Tc(ctx) => strip_skb(ctx, option),
            Program::Xdp(ctx) => strip_xdp(ctx, option),
        }
    }

    #[inline(always)]
    fn mss_cap(mtu: u32) -> u16 {
        cap_for_mtu(mtu)
    }
}

/// The option first in a packet with an IPv4 header of `ip_len` bytes, if
/// it is ours. Its 16 bytes are read whatever its form: a SYN's TCP header
/// follows a plain one.
#[inline(always)]
fn carried<P: Packet>(p: &P, ip_len: usize) -> Option<Carried> {
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let len = ipopt::len_of(read::<P, 2>(p, at)?)?;
    if ip_len < IPV4_MIN_LEN + len {
        return None;
    }
    ipopt::read(read::<P, SEALED_LEN>(p, at)?)
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
fn fix_header<P: Packet>(p: &P, b: &Before, option: &Carried, add: bool) -> Option<()> {
    let (w0, len, check) = ipopt::header_after(
        b.word0,
        b.tot_len,
        b.check,
        ipopt::words_of(option),
        option.len,
        add,
    );
    put_word(p, ETH_HLEN, w0)?;
    put_word(p, ETH_HLEN + IPV4_TOT_LEN_OFF, len)?;
    put_word(p, ETH_HLEN + IPV4_CHECK_OFF, check)
}

/// Why the option could not be added.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum NotAdded {
    /// The IPv4 header has no room left (the client's own options fill
    /// it): nothing changed.
    NoRoom,
    /// The kernel refused to grow the packet: nothing changed.
    Refused,
    /// The packet grew but could not be written: it is half-made.
    Broken,
}

/// Adds `option` to an skb whose IPv4 header is `ip_len` bytes.
#[inline(always)]
fn add(ctx: &TcContext, ip_len: usize, option: &Carried) -> Result<(), NotAdded> {
    let sealed = option.is_sealed();
    let len = if sealed { SEALED_LEN } else { PLAIN_LEN };
    if ip_len > max_ip_len_before(len) {
        return Err(NotAdded::NoRoom);
    }
    let Some(b) = before(ctx) else {
        return Err(NotAdded::Refused);
    };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let grown =
        unsafe { bpf_skb_adjust_room(ctx.as_ptr().cast(), len as i32, BPF_ADJ_ROOM_NET, 0) };
    if grown != 0 {
        return Err(NotAdded::Refused);
    }
    let at = ETH_HLEN + IPV4_MIN_LEN;
    let words = ipopt::words_of(option);
    if sealed {
        let Some(to) = bytes_at::<TcContext, SEALED_LEN>(ctx, at) else {
            return Err(NotAdded::Broken);
        };
        // SAFETY: `bytes_at` checked the 16 bytes are inside the packet.
        unsafe { to.cast::<[u16; 8]>().write_unaligned(words) };
    } else {
        let Some(to) = bytes_at::<TcContext, PLAIN_LEN>(ctx, at) else {
            return Err(NotAdded::Broken);
        };
        let plain = [words[0], words[1], words[2], words[3]];
        // SAFETY: `bytes_at` checked the 8 bytes are inside the packet.
        unsafe { to.cast::<[u16; 4]>().write_unaligned(plain) };
    }
    fix_header(ctx, &b, option, true).ok_or(NotAdded::Broken)
}

/// The program a packet is in: removing the option takes the kernel's
/// help, which differs between them.
pub enum Program<'a> {
    Tc(&'a TcContext),
    Xdp(&'a XdpContext),
}

/// A packet the option can be removed from ([`Carrier::strip`]).
pub trait Strip: Packet {
    fn program(&self) -> Program<'_>;
}

impl Strip for TcContext {
    #[inline(always)]
    fn program(&self) -> Program<'_> {
        Program::Tc(self)
    }
}

impl Strip for XdpContext {
    #[inline(always)]
    fn program(&self) -> Program<'_> {
        Program::Xdp(self)
    }
}

/// Removes the option (which [`carried`] found) from an skb.
#[inline(always)]
fn strip_skb(ctx: &TcContext, option: &Carried) -> bool {
    let Some(b) = before(ctx) else {
        return false;
    };
    let len = if option.is_sealed() {
        SEALED_LEN
    } else {
        PLAIN_LEN
    };
    // SAFETY: the skb of this program run; the helper checks the rest.
    let shrunk =
        unsafe { bpf_skb_adjust_room(ctx.as_ptr().cast(), -(len as i32), BPF_ADJ_ROOM_NET, 0) };
    shrunk == 0 && fix_header(ctx, &b, option, false).is_some()
}

/// The Ethernet header and the 20-byte IPv4 header, moved over the option.
const MOVED: usize = ETH_HLEN + IPV4_MIN_LEN;

/// Removes the option from an XDP frame: the headers before it move up by
/// its length, and the frame starts that much later.
#[inline(always)]
fn strip_xdp(ctx: &XdpContext, option: &Carried) -> bool {
    let Some(b) = before(ctx) else {
        return false;
    };
    // A plain option's frame has a TCP header past it: the longer range
    // is there for both forms.
    let Some(from) = bytes_at::<XdpContext, { MOVED + SEALED_LEN }>(ctx, 0) else {
        return false;
    };
    let len = if option.is_sealed() {
        SEALED_LEN
    } else {
        PLAIN_LEN
    };
    // Through a copy on the stack: the ranges overlap, and BPF has no
    // memmove, only fixed-size copies.
    let mut headers = [0u8; MOVED];
    // SAFETY: both copies stay inside the MOVED + 16 bytes checked above
    // (`len` is 8 or 16) and the local array.
    unsafe {
        core::ptr::copy_nonoverlapping(from, headers.as_mut_ptr(), MOVED);
        core::ptr::copy_nonoverlapping(headers.as_ptr(), from.add(len), MOVED);
    }
    // SAFETY: the frame of this program run; shrinking the head by bytes
    // that exist is what the helper is for.
    let moved = unsafe { bpf_xdp_adjust_head(ctx.as_ptr().cast::<xdp_md>(), len as i32) };
    moved == 0 && fix_header(ctx, &b, option, false).is_some()
}
