//! The ssh-fwd data path. Three programs share the maps in [`maps`]:
//! - `ssh_fwd_ingress_xdp` / `ssh_fwd_ingress_tc`: DNAT `frontend -> backend`
//!   on the node's external interface (one of the two is attached);
//! - `ssh_fwd_egress_tc`: reverse NAT `backend -> frontend` on replies, on
//!   the external interface;
//! - `ssh_fwd_reply_tc`: the same reverse NAT earlier, on the host end of
//!   each pod's interface, for replies routed out of an external interface,
//!   which it then redirects there directly.
//!
//! Kernel code only parses, looks up, rewrites and counts; the decisions and
//! checksum math come from `ssh-fwd-common`, where they are tested on the host.
#![no_std]
#![no_main]

mod counters;
mod egress_tc;
mod forward;
mod ingress_tc;
mod ingress_xdp;
mod maps;
mod reply_tc;
mod reverse;
mod skb;
mod track;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // The verifier rejects any path that could reach this; it exists only to
    // satisfy no_std.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
