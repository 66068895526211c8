//! What the data path believes of a packet before it lets it touch
//! connection state: that the pod will accept it (checksums, a TTL the
//! node forwards, a source a router would forward from), that a "reply"
//! comes from the pod that owns its address, that a frontend option comes
//! from another node, and that its client is within its quota.

use crate::{
    csum,
    maps::{Addr6, Owner},
};

/// Whether `src` (raw, as loaded) is a source no router forwards (RFC 1812
/// 5.3.7, as Linux's martian-source check): 0.0.0.0/8, loopback, multicast,
/// class E (and the limited broadcast), or the destination `dst` itself (a
/// LAND packet). The node's stack would drop it; a redirect past the stack
/// must too.
#[inline(always)]
pub const fn martian_source(src: u32, dst: u32) -> bool {
    let first = src.to_ne_bytes()[0];
    first == 0 || first == 127 || first >= 224 || src == dst
}

/// Whether `src` is an IPv6 source the node would not forward: what
/// Linux's `ip6_rcv_core` drops on input, what `ip6_forward` refuses to
/// forward, and the destination `dst` itself (a LAND packet):
/// - `::`, the unspecified address: only a node without an address yet
///   sends from it, to its own link (RFC 4291 2.5.2); `ip6_forward`.
/// - `::1`, loopback: never leaves a node (RFC 4291 2.5.3);
///   `ip6_rcv_core` drops it off a loopback device.
/// - `ff00::/8`, multicast: never a source (RFC 4291 2.7);
///   `ip6_rcv_core`.
/// - `fe80::/10`, link-local: routers do not forward it (RFC 4291
///   2.5.6); `ip6_forward` answers "not a neighbour" and drops.
/// - `::ffff:0:0/96`, IPv4-mapped: an IPv4 host inside a dual-stack
///   node's API, never on the wire (RFC 4291 2.5.5.2); `ip6_rcv_core`
///   drops it, as `::ffff:127.0.0.1` would otherwise pass for loopback.
///
/// Other blocks RFC 6890 marks as never a source (documentation
/// `2001:db8::/32`, ORCHID) are left to routers, as the kernel leaves them:
/// a pod answers them as the node would.
#[inline(always)]
pub const fn martian_source6(src: Addr6, dst: Addr6) -> bool {
    let [a, b, c, d] = src.0;
    let land = a == dst.0[0] && b == dst.0[1] && c == dst.0[2] && d == dst.0[3];
    // Compared as numbers, most significant byte first: the words are raw.
    let (first, third, last) = (u32::from_be(a), u32::from_be(c), u32::from_be(d));
    let unspecified_or_loopback = a == 0 && b == 0 && third == 0 && last <= 1;
    let v4_mapped = a == 0 && b == 0 && third == 0xffff;
    let multicast = first >> 24 == 0xff;
    let link_local = first & 0xffc0_0000 == 0xfe80_0000;
    land || unspecified_or_loopback || v4_mapped || multicast || link_local
}

/// Whether a packet with this TTL would die at the node, which does not
/// forward it (a router answers with ICMP time exceeded).
#[inline(always)]
pub const fn ttl_expires(ttl: u8) -> bool {
    ttl <= 1
}

/// Whether the TCP checksum field must be summed to be believed. On a
/// virtual interface (`may_be_partial`), a field that holds exactly the
/// pseudo-header sum is taken for a CHECKSUM_PARTIAL packet of a local
/// sender, whose checksum the device never completes (summing it would
/// fail); every other field, and every field on a physical NIC, is summed.
#[inline(always)]
pub const fn tcp_checksum_needs_sum(field: u16, pseudo_seed: u16, may_be_partial: bool) -> bool {
    !(may_be_partial && csum::same(field, pseudo_seed))
}

/// Whose a packet carrying a pod's address is, as the interface it came in
/// by says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// It came from the pod's own interface (or the bridge it is a port
    /// of): the pod sent it.
    Owned,
    /// It came from another interface: another pod (or anything else)
    /// spoofing the address.
    Spoofed,
    /// The agent has not seen the address on any pod interface yet: no
    /// state may move, but nothing proves a spoof either.
    Unknown,
}

/// Whose a packet from a pod address is: `owner` is the address's entry in
/// [`OWNERS`](crate::maps::OWNERS), `ifindex` the interface the packet came
/// in by (a reply program's own device, or an egress program's
/// `ingress_ifindex`).
#[inline(always)]
pub const fn ownership(owner: Option<&Owner>, ifindex: u32) -> Ownership {
    match owner {
        None => Ownership::Unknown,
        Some(o) if o.ifindex == ifindex || (o.master != 0 && o.master == ifindex) => {
            Ownership::Owned
        }
        Some(_) => Ownership::Spoofed,
    }
}

/// What the seal of a frontend option says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// A plain option: no tag.
    None,
    /// A sealed option whose tag is right under this node's key.
    Valid,
    /// A sealed option whose tag is wrong, or that this node, without a
    /// key, cannot check.
    Forged,
}

/// Whether the frontend option of a SYN that arrived on an interface with
/// `iface_flags` may be believed. Only another node adds it. A sealed one
/// proves it; a plain one is believed only on a node without a key
/// (`keyed`: every node of a cluster with a key seals), and only from an
/// interface nothing but other nodes reach: on an external interface (even
/// one that is also a cluster interface) anyone can send it. Under
/// `--cross-node plain` no node adds it.
#[inline(always)]
pub const fn option_trusted(iface_flags: u32, plain: bool, keyed: bool, seal: Seal) -> bool {
    use crate::maps::{IFACE_CLUSTER, IFACE_EXTERNAL};
    if plain {
        return false;
    }
    match seal {
        Seal::Valid => true,
        Seal::Forged => false,
        Seal::None => {
            !keyed && iface_flags & IFACE_CLUSTER != 0 && iface_flags & IFACE_EXTERNAL == 0
        }
    }
}

/// The seal of an option that carries `tag` (`sealed`), against the tag
/// this node computes with its key (`expected`; `None` without a key).
#[inline(always)]
pub const fn seal_of(sealed: bool, tag: u64, expected: Option<u64>) -> Seal {
    if !sealed {
        return Seal::None;
    }
    match expected {
        Some(e) if e == tag => Seal::Valid,
        _ => Seal::Forged,
    }
}

/// What an IPv6 client's quota is counted by: the /64 its address is in,
/// as its first 8 bytes raw (what an 8-byte load of the packet's source
/// gives). A host picks its addresses freely inside its /64 (SLAAC, the
/// temporary addresses of RFC 8981), so a quota per address would bound
/// nothing; a /64 is the smallest block a subscriber is given (RFC 6177),
/// so counting by it holds one host to its quota without counting its
/// neighbours' connections against it.
#[inline(always)]
pub const fn source_key6(src: Addr6) -> u64 {
    let [a, b, c, d] = src.0[0].to_ne_bytes();
    let [e, f, g, h] = src.0[1].to_ne_bytes();
    u64::from_ne_bytes([a, b, c, d, e, f, g, h])
}

/// Whether a client holding `held` connections may open one more under
/// `--conns-per-source` `limit` (0: no limit).
#[inline(always)]
pub const fn within_quota(held: u64, limit: u32) -> bool {
    // The kernel counts down with an atomic add, which cannot stop at
    // zero: a close the agent's recount already left out takes the count
    // below zero, and it reads as a huge number until the next sweep. A
    // count below zero holds nothing.
    limit == 0 || (held as i64) < limit as i64
}
