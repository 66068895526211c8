//! `ssh_fwd_quota`: the agent's changes to what clients hold
//! (`SOURCES`, `SOURCES6`), made by the kernel with the same atomic add
//! the other programs count with (see `ssh_fwd_common::maps::QuotaChange`).
//! Never attached: the agent runs it on a frame that says the change, with
//! `BPF_PROG_TEST_RUN`.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use ssh_fwd_common::maps::{Addr6, QuotaChange};

use crate::{conntrack, packet::read};

#[xdp]
pub fn ssh_fwd_quota(ctx: XdpContext) -> u32 {
    // One bounds check for the whole frame, then fields of the copy.
    let Some(frame) = read::<_, { QuotaChange::LEN }>(&ctx, 0) else {
        return xdp_action::XDP_ABORTED;
    };
    let word = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&frame[at..at + 8]);
        u64::from_ne_bytes(bytes)
    };
    let (source, delta) = (word(QuotaChange::SOURCE_AT), word(QuotaChange::DELTA_AT));
    let at = QuotaChange::FAMILY_AT;
    match u32::from_ne_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]) {
        QuotaChange::V4 => conntrack::sources_add_to::<u32>(source as u32, delta),
        QuotaChange::V6 => conntrack::sources_add_to::<Addr6>(source, delta),
        _ => return xdp_action::XDP_ABORTED,
    }
    xdp_action::XDP_PASS
}
