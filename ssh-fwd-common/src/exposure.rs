//! What a node lets through to itself on the way in, before and after any
//! translation, for both families:
//!
//! - **Only frames addressed to it are translated** ([`addressed`]). A
//!   switch floods a frame for a MAC it has not learned (a failed node's,
//!   after a failover) to every port; were every node to translate it, the
//!   pod would get each request once per node, and a denied SYN a RST
//!   from each. A frame for another host's MAC is passed untouched (the
//!   stack drops it, a bridge forwards it to its owner); a broadcast or
//!   multicast one is not translated either.
//! - **An SSH IP exposes only its mapped ports** ([`closes`]). Whatever
//!   addresses the node holds (the SSH IP on `lo`, on the external
//!   interface, or nowhere), a packet to an SSH IP that the programs did
//!   not translate would reach the node's own services: it is dropped,
//!   unless it is ICMP (ping, errors, path MTU discovery). ARP and
//!   neighbour discovery are handled before any of this.

use crate::outcome::Outcome;

/// To whom a frame is addressed, by its destination MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressed {
    /// This interface's own MAC, or the interface has none the programs
    /// know (a device without one, or an agent that has not said): the
    /// frame is the node's to translate.
    Node,
    /// A broadcast or multicast MAC: not translated.
    Group,
    /// Another host's MAC: passed untouched.
    Other,
}

/// Whether a MAC is a group address (broadcast or multicast): the lowest
/// bit of its first byte.
#[inline(always)]
pub const fn is_group(mac: [u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// To whom a frame whose destination MAC is `dst` is addressed, on an
/// interface whose own MAC is `own` (`None`: not known).
#[inline(always)]
pub const fn addressed(dst: [u8; 6], own: Option<[u8; 6]>) -> Addressed {
    if is_group(dst) {
        return Addressed::Group;
    }
    let Some(own) = own else {
        return Addressed::Node;
    };
    let mut i = 0;
    while i < 6 {
        if dst[i] != own[i] {
            return Addressed::Other;
        }
        i += 1;
    }
    Addressed::Node
}

/// Whether a packet the programs counted as `outcome`, to an SSH IP, is
/// dropped (as [`Outcome::UnmappedPort`]) rather than passed to the node.
/// `icmp`: its first header after IP is ICMP or ICMPv6, which passes
/// (the node answers ping, and errors reach the sockets they are about).
///
/// Closed: TCP to a port with no mapping, any other protocol (UDP among
/// them), fragments (the node would reassemble them for itself), IPv6
/// with extension headers the programs do not walk, malformed packets, and
/// a group-addressed frame, which is never translated. Every other outcome
/// is the programs' own work (translated, dropped, answered) or not a
/// packet to the node (`ttl_expired` leaves the TTL to the stack).
#[inline(always)]
pub const fn closes(outcome: Outcome, icmp: bool) -> bool {
    !icmp
        && matches!(
            outcome,
            Outcome::PassNoFrontend
                | Outcome::PassNotTcp
                | Outcome::PassFragment
                | Outcome::PassIpv6Extensions
                | Outcome::Malformed
                | Outcome::PassNotForNode
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const OTHER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const BROADCAST: [u8; 6] = [0xff; 6];
    const IPV4_MULTICAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
    const IPV6_MULTICAST: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

    #[test]
    fn only_a_frame_to_the_interfaces_own_mac_is_the_nodes() {
        assert_eq!(addressed(OWN, Some(OWN)), Addressed::Node);
        assert_eq!(addressed(OTHER, Some(OWN)), Addressed::Other);
        // One byte off, anywhere.
        for i in 0..6 {
            let mut near = OWN;
            near[i] ^= 0x40;
            assert_eq!(addressed(near, Some(OWN)), Addressed::Other, "byte {i}");
        }
    }

    #[test]
    fn broadcast_and_multicast_frames_are_never_translated() {
        for dst in [BROADCAST, IPV4_MULTICAST, IPV6_MULTICAST] {
            assert_eq!(addressed(dst, Some(OWN)), Addressed::Group);
            assert_eq!(addressed(dst, None), Addressed::Group);
        }
    }

    #[test]
    fn an_interface_whose_mac_is_unknown_translates_every_unicast_frame() {
        assert_eq!(addressed(OTHER, None), Addressed::Node);
    }

    #[test]
    fn what_is_not_translated_to_an_ssh_ip_is_dropped_except_icmp() {
        for outcome in [
            Outcome::PassNoFrontend,
            Outcome::PassNotTcp,
            Outcome::PassFragment,
            Outcome::PassIpv6Extensions,
            Outcome::Malformed,
            Outcome::PassNotForNode,
        ] {
            assert!(closes(outcome, false), "{outcome:?}");
            assert!(!closes(outcome, true), "{outcome:?} of ICMP");
        }
    }

    #[test]
    fn the_programs_own_verdicts_are_left_as_they_are() {
        for outcome in [
            Outcome::Dnat,
            Outcome::TtlExpired,
            Outcome::Denied,
            Outcome::ArpAnswered,
            Outcome::UnmappedPort,
        ] {
            assert!(!closes(outcome, false), "{outcome:?}");
        }
    }
}
