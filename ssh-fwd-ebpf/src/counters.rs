//! Counting. The outcome counters are per CPU (no atomics; userspace
//! sums the CPUs). The per-mapping ones are shared, added to atomically: a
//! per-CPU copy of every mapping's counters would cost `--max-mappings` x
//! 64 bytes on every CPU (268 MB on a 256-CPU node), while the packets of
//! one mapping are few connections' and seldom meet on a cache line.

use ssh_fwd_common::outcome::Outcome;

use crate::maps::{GLOBAL_STATS, MAPPING_CONNS, MAPPING_STATS};

#[inline(always)]
pub fn count(outcome: Outcome) {
    if let Some(counter) = GLOBAL_STATS.get_ptr_mut(outcome as u32) {
        // SAFETY: per-CPU slot, only this CPU writes it while we run.
        unsafe { *counter += 1 };
    }
}

/// Which direction of a mapping a packet travels.
#[derive(Clone, Copy)]
pub enum Direction {
    ToBackend,
    ToClient,
}

#[inline(always)]
pub fn count_mapping(slot: u32, direction: Direction, bytes: u64) {
    let Some(counters) = MAPPING_STATS.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: fields of an element the map lookup returned, valid and
    // 8-byte aligned for the map's lifetime.
    let (packets, bytes_field) = unsafe {
        match direction {
            Direction::ToBackend => (
                &raw mut (*counters).packets_in,
                &raw mut (*counters).bytes_in,
            ),
            Direction::ToClient => (
                &raw mut (*counters).packets_out,
                &raw mut (*counters).bytes_out,
            ),
        }
    };
    add(packets, 1);
    add(bytes_field, bytes);
}

/// Adds `n` to a shared counter (`BPF_XADD`, on every kernel).
#[inline(always)]
fn add(counter: *mut u64, n: u64) {
    // SAFETY: `counter` points into a map element (see the callers).
    unsafe { crate::atomic::add_u64(counter, n) };
}

/// Which connection counter of a mapping to count.
#[derive(Clone, Copy)]
pub enum ConnCounter {
    Opened,
    SourceLimited,
    Denied,
    SynLimited,
}

#[inline(always)]
pub fn count_conns(slot: u32, counter: ConnCounter) {
    let Some(counters) = MAPPING_CONNS.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: fields of an element the map lookup returned.
    let field = unsafe {
        match counter {
            ConnCounter::Opened => &raw mut (*counters).opened,
            ConnCounter::SourceLimited => &raw mut (*counters).source_limited,
            ConnCounter::Denied => &raw mut (*counters).denied,
            ConnCounter::SynLimited => &raw mut (*counters).syn_limited,
        }
    };
    add(field, 1);
}
