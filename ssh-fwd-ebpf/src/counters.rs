//! Per-CPU counting: no atomics needed, userspace sums the CPUs.

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
    // SAFETY: per-CPU slot, only this CPU writes it while we run.
    let counters = unsafe { &mut *counters };
    match direction {
        Direction::ToBackend => {
            counters.packets_in += 1;
            counters.bytes_in += bytes;
        }
        Direction::ToClient => {
            counters.packets_out += 1;
            counters.bytes_out += bytes;
        }
    }
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
    // SAFETY: per-CPU slot, only this CPU writes it while we run.
    let counters = unsafe { &mut *counters };
    match counter {
        ConnCounter::Opened => counters.opened += 1,
        ConnCounter::SourceLimited => counters.source_limited += 1,
        ConnCounter::Denied => counters.denied += 1,
        ConnCounter::SynLimited => counters.syn_limited += 1,
    }
}
