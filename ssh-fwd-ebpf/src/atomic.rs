//! Atomic updates of a connection entry's flags in place: both directions
//! of a connection move them, on any CPU (see
//! `ssh_fwd_common::conntrack::store`).

use core::arch::asm;

use ssh_fwd_common::{
    conntrack::store::AtomicFlags,
    maps::{Addr, Conn, Endpoint},
};

/// BPF atomics on an entry's flags. The programs are built for the
/// baseline BPF CPU, which has 64-bit atomic OR (also returning what it
/// found) and AND (Linux 5.12) but
/// no 32-bit ones (those need ALU32), so they work on the aligned 8-byte
/// word the flags share with `slot` (its upper half, little-endian): the
/// slot's half of the mask leaves it as it is. Rust's atomic types offer
/// no read-modify-write on BPF (the target has no compare-and-swap), hence
/// the instruction itself.
pub struct Bpf;

/// The offset of the word holding `slot` and `flags` in a [`Conn`] of
/// either family (`ssh_fwd_common::maps` asserts, for both, that they fill
/// one aligned 8-byte word).
#[inline(always)]
const fn slot_flags<A: Addr>() -> usize {
    core::mem::offset_of!(Conn<Endpoint<A>>, slot)
}

impl<A: Addr> AtomicFlags<Endpoint<A>> for Bpf {
    #[inline(always)]
    unsafe fn or(conn: *mut Conn<Endpoint<A>>, bits: u32) -> u32 {
        let word = conn.cast::<u8>().wrapping_add(slot_flags::<A>());
        let mut found = u64::from(bits) << 32;
        // SAFETY: an aligned word inside the entry the caller vouches for.
        unsafe {
            asm!(
                "{1} = atomic_fetch_or((u64 *)({0} + 0), {1})",
                in(reg) word,
                inout(reg) found,
                options(nostack),
            );
        }
        (found >> 32) as u32
    }

    #[inline(always)]
    unsafe fn and(conn: *mut Conn<Endpoint<A>>, bits: u32) {
        let word = conn.cast::<u8>().wrapping_add(slot_flags::<A>());
        let mask = (u64::from(bits) << 32) | u64::from(u32::MAX);
        // SAFETY: as above.
        unsafe {
            asm!("lock *(u64 *)({0} + 0) &= {1}", in(reg) word, in(reg) mask, options(nostack));
        }
    }
}

/// Adds `n` to the `u64` at `at`, atomically (`u64::MAX` subtracts one).
///
/// # Safety
/// `at` points at an aligned `u64` valid for writes (a map value, for the
/// rest of the program run).
#[inline(always)]
pub unsafe fn add_u64(at: *mut u64, n: u64) {
    // SAFETY: the caller vouches for `at`.
    unsafe {
        asm!("lock *(u64 *)({0} + 0) += {1}", in(reg) at, in(reg) n, options(nostack));
    }
}
