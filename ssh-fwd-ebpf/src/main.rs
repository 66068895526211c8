//! The ssh-fwd data path. The programs share the maps in [`maps`]:
//! - `ssh_fwd_ingress_xdp` / `ssh_fwd_ingress_tc`: DNAT `frontend -> backend`
//!   with connection tracking on the node's external (and cluster)
//!   interfaces (one of the two is attached), learning the frontend of SYNs
//!   other nodes translated, and translating ICMP errors to frontends;
//! - `ssh_fwd_egress_tc`: reverse NAT of tracked connections' replies as
//!   they leave, the frontend option on translated SYNs leaving for another
//!   node, and ICMP errors quoting backends;
//! - `ssh_fwd_reply_tc`: the same reverse NAT earlier, on the host end of
//!   each pod's interface, redirecting the reply straight out;
//! - `ssh_fwd_connect4` / `ssh_fwd_getpeername4` and their `6` twins:
//!   hairpin for clients in the cluster, at the socket (cgroup v2), from
//!   the same `FRONTENDS` (and `FRONTENDS6`);
//! - `ssh_fwd_quota`: never attached; the agent runs it to change what a
//!   client holds (`SOURCES`, `SOURCES6`), so that only the kernel writes
//!   those counts.
//!
//! IPv4 and IPv6 take the same paths over their own tables (`FRONTENDS6`
//! and the rest), each in a function of its own in every packet program
//! (`crate::family`); an IPv6 connection's backend must be on the node its
//! frontend's traffic reaches (the frontend option is IPv4's).
//!
//! Kernel code only parses, looks up, rewrites and counts; the decisions
//! (connection tracking) and checksum math come from `ssh-fwd-common`,
//! where they are tested on the host.
#![no_std]
#![no_main]
// BPF inline assembly, for the atomic flag updates in `atomic`.
#![feature(asm_experimental_arch)]

mod arp;
mod atomic;
mod audit;
mod backend;
mod claim;
mod config;
mod conntrack;
mod counters;
mod destopt;
mod egress_tc;
mod exposure;
mod family;
mod forward;
mod guard;
mod hairpin;
mod icmp;
mod icmp6;
mod ingress_tc;
mod ingress_xdp;
mod ipopt;
mod maps;
mod mss;
mod ndp;
mod packet;
mod partial;
mod quota;
mod reply_tc;
mod reset;
mod skb;
mod sum;
mod verify;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // The verifier rejects any path that could reach this; it exists only to
    // satisfy no_std.
    loop {}
}

/// The programs are MIT or GPL-2.0 (`ssh-fwd-ebpf/LICENSE-GPL-2.0`): the
/// kernel lets only GPL-compatible programs call its GPL-only helpers, and
/// takes this string as such.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
