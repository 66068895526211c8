//! Whether a client segment may write connection state: the checks the
//! pod's stack will apply to it, made before the data path believes it
//! (`ssh_fwd_common::conntrack::trust`). A segment the pod would drop (a
//! wrong IPv4 or TCP checksum) or the node would not forward (a martian
//! source) never creates, refreshes, advances or ends anything. The
//! checks cost a copy and a sum of the segment, so they run only for the
//! segments that would write (SYNs, claims, FINs and RSTs, not the data of
//! a tracked connection), and only up to [`CHECKED_MAX`] bytes of segment
//! (the kernel has checked a GRO packet already): a longer one is
//! forwarded and writes nothing (a FIN with much data is then not noted,
//! and its connection goes by the half-closed timeout).
//!
//! An IPv4 header without options is summed in place, and so is a TCP
//! segment of the lengths nearly every segment that writes has (one
//! `bpf_csum_diff` call on the packet). Anything else is copied with the
//! kernel's load helper into a per-CPU scratch buffer (the stack has no
//! room for it) and summed by one `bpf_csum_diff` call: a loop over packet
//! bytes of varying length multiplies the paths the verifier walks past its
//! limit.

use aya_ebpf::{
    EbpfContext as _,
    bindings::xdp_md,
    helpers::{bpf_csum_diff, bpf_skb_load_bytes, bpf_xdp_load_bytes},
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    conntrack::trust::{martian_source, martian_source6, tcp_checksum_needs_sum},
    csum,
    ipv6::pseudo_seed6,
    maps::{Addr6, IFACE_VIRTUAL},
    outcome::Outcome,
    packet::{ETH_HLEN, IPPROTO_TCP, IPV4_MAX_LEN, IPV4_MIN_LEN, TCP_CHECK_OFF, TCP_MIN_LEN},
};

use crate::{
    forward::iface_flags,
    maps::SCRATCH,
    packet::{Headers, Packet, bytes_at, read, word},
};

/// The longest TCP segment (header and payload) checked: a SYN's or an
/// ACK's headers with their options, and the first bytes of data (sshd's
/// and ssh's banners fit).
pub const CHECKED_MAX: usize = ssh_fwd_common::maps::SCRATCH_LEN;

/// The scratch buffer: whole 4-byte words, for the checksum helper.
type Buf = [u32; CHECKED_MAX / 4];

/// What the checks say of a segment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The pod will accept it as far as its headers go: it may write.
    Trusted,
    /// The pod (or the node) would drop it: drop it, counted as this.
    Refused(Outcome),
    /// It could not be checked here (a segment too long): forward it, but
    /// it writes nothing.
    Unverified,
}

/// What the program type adds to the checks.
pub trait Checked: Packet {
    /// Copies `len` bytes (1 to `buf`'s size) at `offset` of the frame into
    /// `buf`, wherever they lie in the packet.
    fn load(&self, offset: usize, buf: &mut Buf, len: usize) -> bool;
}

/// `len` if it is in `1..=CHECKED_MAX`, computed so that the verifier
/// knows the bounds from the arithmetic: a 6.1 verifier learns nothing
/// from `len != 0` about a scalar whose range starts at 0, and refuses the
/// load helper's size as possibly zero.
#[inline(always)]
fn bounded(len: usize) -> Option<usize> {
    const _: () = assert!(CHECKED_MAX.is_power_of_two());
    if len == 0 || len > CHECKED_MAX {
        return None;
    }
    Some(((len - 1) & (CHECKED_MAX - 1)) + 1)
}

impl Checked for XdpContext {
    #[inline(always)]
    fn load(&self, offset: usize, buf: &mut Buf, len: usize) -> bool {
        let Some(len) = bounded(len) else {
            return false;
        };
        // SAFETY: the frame of this program run, and `len` bytes of room.
        unsafe {
            bpf_xdp_load_bytes(
                self.as_ptr().cast::<xdp_md>(),
                offset as u32,
                buf.as_mut_ptr().cast(),
                len as u32,
            ) == 0
        }
    }
}

impl Checked for TcContext {
    #[inline(always)]
    fn load(&self, offset: usize, buf: &mut Buf, len: usize) -> bool {
        let Some(len) = bounded(len) else {
            return false;
        };
        // SAFETY: the skb of this program run, and `len` bytes of room.
        unsafe {
            bpf_skb_load_bytes(
                self.as_ptr(),
                offset as u32,
                buf.as_mut_ptr().cast(),
                len as u32,
            ) == 0
        }
    }
}

/// Copies `len` bytes at `offset` into `buf` and sums them (folded) with
/// `seed`. The last word is zeroed first: its padding is zero, as the
/// checksum pads an odd byte.
#[inline(always)]
fn load_and_sum<P: Checked>(
    p: &P,
    buf: &mut Buf,
    offset: usize,
    len: usize,
    seed: u32,
) -> Option<u16> {
    // Masked, not compared: the compiler drops a comparison it can prove,
    // and the verifier then cannot.
    buf[(len / 4) & (buf.len() - 1)] = 0;
    if !p.load(offset, buf, len) {
        return None;
    }
    let words = (len + 3) & !3;
    if words == 0 || words > CHECKED_MAX {
        return None;
    }
    // SAFETY: `words` bytes of `buf`, which has CHECKED_MAX.
    unsafe { sum_at(buf.as_mut_ptr().cast(), words, seed) }
}

/// The one's complement sum (folded) of the `len` bytes at `at` (a
/// multiple of 4, as the helper wants) and `seed`, in one `bpf_csum_diff`
/// call.
///
/// # Safety
/// `at` points at `len` bytes the program may read: a buffer of its own,
/// or packet data it checked the bounds of.
#[inline(always)]
unsafe fn sum_at(at: *mut u32, len: usize, seed: u32) -> Option<u16> {
    // SAFETY: the caller vouches for the bytes; the helper only reads them
    // (no `from` buffer).
    let s = unsafe { bpf_csum_diff(core::ptr::null_mut(), 0, at, len as u32, seed) };
    Some(csum::fold64(u64::try_from(s).ok()?))
}

/// The one's complement sum (folded) of the `len` bytes at `offset` and
/// `seed`, copied into the scratch buffer first.
#[inline(always)]
fn summed<P: Checked>(p: &P, offset: usize, len: usize, seed: u32) -> Option<u16> {
    let buf = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's value of the scratch map, for this program run.
    load_and_sum(p, unsafe { &mut *buf }, offset, len, seed)
}

/// The TCP segment of `len` bytes at `l4` summed with `seed`: in place for
/// the lengths nearly every segment that writes has (a bare ACK, one with
/// timestamps, a SYN with Linux's options), one helper call on the packet
/// itself; any other through the scratch buffer.
#[inline(always)]
fn tcp_sum<P: Checked>(p: &P, l4: usize, len: usize, seed: u32) -> Option<u16> {
    let in_place = match len {
        20 => in_place::<P, 20>(p, l4, seed),
        32 => in_place::<P, 32>(p, l4, seed),
        40 => in_place::<P, 40>(p, l4, seed),
        _ => None,
    };
    in_place.or_else(|| summed(p, l4, len, seed))
}

/// The `N` bytes at `offset` summed with `seed` where they lie, if they are
/// all in the packet's linear data. `N` is a multiple of 4, as the helper
/// wants.
#[inline(always)]
fn in_place<P: Packet, const N: usize>(p: &P, offset: usize, seed: u32) -> Option<u16> {
    let at = bytes_at::<P, N>(p, offset)?;
    // SAFETY: `bytes_at` checked the N bytes are inside the packet.
    unsafe { sum_at(at.cast(), N, seed) }
}

/// Whether the IPv4 header of `len` bytes sums right. The common header
/// without options is read in place (no helper call); one with options
/// goes through the scratch buffer.
#[inline(always)]
fn ip_header_sums<P: Checked>(p: &P, len: usize) -> bool {
    if len == IPV4_MIN_LEN {
        let Some(header) = read::<P, IPV4_MIN_LEN>(p, ETH_HLEN) else {
            return false;
        };
        let mut sum = 0u64;
        for pair in header.chunks_exact(2) {
            sum += u64::from(u16::from_ne_bytes([pair[0], pair[1]]));
        }
        return csum::fold64(sum) == 0xffff;
    }
    len <= IPV4_MAX_LEN && summed(p, ETH_HLEN, len, 0) == Some(0xffff)
}

/// The checks of a client segment with headers `h`, before it writes
/// state.
#[inline(always)]
pub fn client_segment<P: Checked>(p: &P, h: &Headers) -> Verdict {
    if martian_source(h.source.addr, h.destination.addr) {
        return Verdict::Refused(Outcome::MartianSource);
    }
    let ip_len = h.ip_len;
    if !ip_header_sums(p, ip_len) {
        return Verdict::Refused(Outcome::BadChecksum);
    }
    let len = h.total_len.saturating_sub(ip_len);
    tcp_segment(p, h.l4(), len, |len| {
        csum::pseudo_seed(h.source.addr, h.destination.addr, IPPROTO_TCP, len)
    })
}

/// [`client_segment`] for IPv6: no header checksum to check, and the TCP
/// checksum's pseudo-header holds the 128-bit addresses.
#[inline(always)]
pub fn client_segment6<P: Checked>(p: &P, h: &Headers<Addr6>) -> Verdict {
    if martian_source6(h.source.addr, h.destination.addr) {
        return Verdict::Refused(Outcome::MartianSource);
    }
    let len = h.total_len.saturating_sub(h.ip_len);
    tcp_segment(p, h.l4(), len, |len| {
        pseudo_seed6(h.source.addr, h.destination.addr, len)
    })
}

/// Whether the TCP segment of `len` bytes at `l4` sums right with the
/// pseudo-header sum `seed` gives for its length.
#[inline(always)]
fn tcp_segment<P: Checked>(p: &P, l4: usize, len: usize, seed: impl FnOnce(u16) -> u16) -> Verdict {
    if !(TCP_MIN_LEN..=CHECKED_MAX).contains(&len) {
        return Verdict::Unverified;
    }
    let Some(field) = word(p, l4 + TCP_CHECK_OFF) else {
        return Verdict::Unverified;
    };
    let seed = seed(len as u16);
    // The interface is looked up only for a field that may be a partial
    // sum: never, or by chance, on a physical NIC.
    if csum::same(field, seed)
        && !tcp_checksum_needs_sum(
            field,
            seed,
            iface_flags(p.arrival_ifindex()) & IFACE_VIRTUAL != 0,
        )
    {
        return Verdict::Trusted;
    }
    match tcp_sum(p, l4, len, u32::from(seed)) {
        Some(0xffff) => Verdict::Trusted,
        Some(_) => Verdict::Refused(Outcome::BadChecksum),
        None => Verdict::Unverified,
    }
}
