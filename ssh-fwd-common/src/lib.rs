//! Everything the ssh-fwd kernel programs and the userspace agent must agree on:
//! map names and capacities, the `#[repr(C)]` key and value layouts, the global
//! outcome counters, and the pure packet math (checksums, header classification)
//! that is unit-tested on the host and compiled into the eBPF programs unchanged.
//!
//! # Byte order contract
//! Every address and port stored in a map key or value is in **network byte
//! order**, exactly as the bytes appear on the wire, so the kernel side can
//! compare and copy packet fields without swapping. Build keys with
//! [`maps::Endpoint::new`] and read them back with [`maps::Endpoint::ip`] and
//! [`maps::Endpoint::port`] (IPv6: [`maps::Endpoint6::new6`] and
//! [`maps::Endpoint6::ip6`]); never fill the raw fields by hand.
#![no_std]

#[cfg(any(test, feature = "fixtures"))]
extern crate alloc;

pub mod arp;
pub mod audit;
pub mod conntrack;
pub mod csum;
pub mod exposure;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures6;
pub mod guard;
pub mod hairpin;
pub mod icmp;
pub mod ipopt;
pub mod ipv6;
pub mod maps;
pub mod ndp;
pub mod outcome;
pub mod packet;
pub mod reset;
pub mod siphash;
pub mod tcp;
