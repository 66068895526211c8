//! What the node exposes on the way in, for both ingress programs and both
//! families (the rules are `ssh_fwd_common::exposure`'s): a frame for
//! another host's MAC is not translated ([`frame`]), and a packet to an SSH
//! IP that nothing translated is dropped ([`closed`]). Each reads the few
//! bytes it needs at fixed offsets, so it holds for packets the parse
//! gave up on too.

use aya_ebpf::maps::HashMap;
use ssh_fwd_common::{
    exposure::{Addressed, addressed, closes},
    ipv6::{ETH_P_IPV6, IPV6_DADDR_OFF, IPV6_NEXT_HEADER_OFF, NEXTHDR_ICMPV6},
    maps::{Addr, Addr6},
    outcome::Outcome,
    packet::{ETH_HLEN, ETH_P_IP, IPPROTO_ICMP, IPV4_DADDR_OFF, IPV4_PROTO_OFF},
};

use crate::{
    maps::{IFACE_MACS, SSH_IPS, SSH_IPS6},
    packet::{Packet, ethertype, read},
};

/// To whom the frame is addressed: its destination MAC against the MAC
/// the agent wrote for the interface it arrived on.
#[inline(always)]
pub fn frame<P: Packet>(p: &P) -> Addressed {
    // Too short for a MAC: the parse counts it as malformed.
    let Some(dst) = read::<P, 6>(p, 0) else {
        return Addressed::Node;
    };
    // SAFETY: copied out immediately.
    let own = unsafe { IFACE_MACS.get(p.arrival_ifindex()) }.map(|m| m.mac);
    addressed(dst, own)
}

/// What a family supplies: its SSH IPs, and where its packets' destination
/// and first protocol are.
pub trait Exposed: Addr + 'static {
    const ETHERTYPE: u16;
    fn ssh_ips() -> &'static HashMap<Self, u32>;
    /// The destination address, and whether the first header after the IP
    /// header is ICMP (ICMPv6).
    fn destination<P: Packet>(p: &P) -> Option<(Self, bool)>;
}

impl Exposed for u32 {
    const ETHERTYPE: u16 = ETH_P_IP;

    #[inline(always)]
    fn ssh_ips() -> &'static HashMap<u32, u32> {
        &SSH_IPS
    }

    #[inline(always)]
    fn destination<P: Packet>(p: &P) -> Option<(u32, bool)> {
        let [proto] = read::<P, 1>(p, ETH_HLEN + IPV4_PROTO_OFF)?;
        let daddr = read::<P, 4>(p, ETH_HLEN + IPV4_DADDR_OFF)?;
        Some((u32::from_ne_bytes(daddr), proto == IPPROTO_ICMP))
    }
}

impl Exposed for Addr6 {
    const ETHERTYPE: u16 = ETH_P_IPV6;

    #[inline(always)]
    fn ssh_ips() -> &'static HashMap<Addr6, u32> {
        &SSH_IPS6
    }

    #[inline(always)]
    fn destination<P: Packet>(p: &P) -> Option<(Addr6, bool)> {
        let [next] = read::<P, 1>(p, ETH_HLEN + IPV6_NEXT_HEADER_OFF)?;
        let b = read::<P, 16>(p, ETH_HLEN + IPV6_DADDR_OFF)?;
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some((
            Addr6([word(0), word(4), word(8), word(12)]),
            next == NEXTHDR_ICMPV6,
        ))
    }
}

/// `outcome` as counted, or [`Outcome::UnmappedPort`] when the packet is
/// to an SSH IP and `ssh_fwd_common::exposure::closes` says so.
#[inline(always)]
pub fn closed<A: Exposed, P: Packet>(p: &P, outcome: Outcome) -> Outcome {
    // Most packets end here: translated, or the programs' own verdict.
    if !closes(outcome, false) || ethertype(p) != Some(A::ETHERTYPE.to_be()) {
        return outcome;
    }
    let Some((destination, icmp)) = A::destination(p) else {
        return outcome;
    };
    // SAFETY: only tested for presence.
    if !closes(outcome, icmp) || unsafe { A::ssh_ips().get(destination) }.is_none() {
        return outcome;
    }
    Outcome::UnmappedPort
}
