//! The reverse NAT both reply paths share: a backend's reply gets the
//! frontend the client used as its source, counted against that mapping.

use aya_ebpf::programs::TcContext;
use ssh_fwd_common::maps::{Endpoint, NatTarget};

use crate::{
    counters::{Direction, count_mapping},
    skb::{Field, rewrite},
    track::frontend_for_reply,
};

/// `primary` is the backend's `REVERSE` entry. `Err`: the packet is left
/// half-written and must be dropped.
#[inline(always)]
pub fn restore_frontend(
    ctx: &TcContext,
    l4: usize,
    backend: Endpoint,
    client: Endpoint,
    primary: NatTarget,
) -> Result<(), ()> {
    let target = frontend_for_reply(client, backend, primary);
    rewrite(ctx, l4, Field::Source, backend, target.endpoint).map_err(|_| ())?;
    count_mapping(target.slot, Direction::ToClient, ctx.len() as u64);
    Ok(())
}
