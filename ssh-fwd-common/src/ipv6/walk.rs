//! The walk from the fixed IPv6 header over extension headers to the
//! transport header. One [`step`] per header decides from its type and its
//! first [`EXT_HEAD_LEN`] bytes; [`walk`] repeats it at most
//! [`IPV6_MAX_EXT_HEADERS`] + 1 times over headers no longer than
//! [`IPV6_MAX_EXT_LEN`] in all, so the kernel programs can run the same
//! loop with a bound the verifier sees and an offset it can range-check.

use super::{
    IPV6_HLEN, NEXTHDR_AUTH, NEXTHDR_DEST, NEXTHDR_ESP, NEXTHDR_FRAGMENT, NEXTHDR_HOP,
    NEXTHDR_ICMPV6, NEXTHDR_NONE, NEXTHDR_ROUTING, NEXTHDR_TCP,
};

/// Extension headers a packet may carry and still be rewritten: in RFC
/// 8200 4.1's order, Hop-by-Hop, Destination Options, Routing and
/// Destination Options again are all a packet carries before TCP without
/// a Fragment, AH or ESP header, which are passed anyway. More is an
/// attack on parsers, not traffic.
pub const IPV6_MAX_EXT_HEADERS: usize = 4;

/// The most bytes of extension headers a rewritten packet may carry: a
/// segment routing header with 14 segments (8 + 14 * 16 bytes) and two
/// 8-byte option headers fit. It bounds the transport header's offset for
/// the verifier; a longer chain is passed to the stack.
pub const IPV6_MAX_EXT_LEN: usize = 256;

/// The bytes of an extension header one step reads: next header, header
/// extension length, and for a Routing header its type and segments left.
/// Every header the walk steps over is at least 8 bytes long, so reading 4
/// never refuses a well-formed one.
pub const EXT_HEAD_LEN: usize = 4;

/// Offset of a Routing header's segments left in its first bytes.
const ROUTING_SEGMENTS_LEFT_OFF: usize = 3;

/// The transport protocols the data path handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upper {
    Tcp,
    /// ICMPv6: errors about forwarded connections are translated.
    Icmpv6,
}

/// Why an IPv6 packet is passed to the stack untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassReason {
    /// The EtherType is not IPv6.
    NotIpv6,
    /// Neither TCP nor ICMPv6 follows (UDP, or an extension header the
    /// walk does not step over, such as Mobility or HIP).
    NotTcp,
    /// A Fragment header: any fragment, the first and atomic ones too.
    /// Fragments are the stack's to reassemble.
    Fragment,
    /// An Authentication Header: it covers the addresses, so a rewrite
    /// would break it.
    Authenticated,
    /// ESP: the transport header is encrypted.
    Encrypted,
    /// No Next Header: nothing follows the headers.
    NoNextHeader,
    /// A Routing header with segments left: the destination address is a
    /// waypoint, and the TCP checksum covers the final one (RFC 8200 8.1).
    NotFinalDestination,
    /// More than [`IPV6_MAX_EXT_HEADERS`] extension headers.
    TooManyExtensions,
    /// Extension headers longer than [`IPV6_MAX_EXT_LEN`] in all.
    ExtensionsTooLong,
    /// The frame (or the packet, by its payload length) ends before a
    /// header the data path must read.
    Truncated,
    /// Not a packet the stack would take: version not 6, or a Hop-by-Hop
    /// header after another header (RFC 8200 4.1 puts it first).
    Malformed,
}

/// What one header is to the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// An extension header `len` bytes long, followed by `next_header`.
    Extension { next_header: u8, len: usize },
    /// The transport header starts here.
    Upper(Upper),
    /// Stop: the packet is passed.
    Pass(PassReason),
}

/// Where the transport header of an IPv6 packet starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    pub protocol: Upper,
    /// The fixed header and every extension header, in bytes: the
    /// transport header's offset from the start of the IPv6 header.
    pub ip_headers_len: usize,
}

/// Whether the header `next_header` names is one the walk steps over, and
/// so whether its first [`EXT_HEAD_LEN`] bytes must be read for [`step`].
#[inline(always)]
pub const fn is_extension(next_header: u8) -> bool {
    matches!(next_header, NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST)
}

/// One step of the walk: what the header `next_header` names is, given
/// its first bytes `head`. `head` is read only for an extension header
/// ([`is_extension`]); for any other, pass zeros.
#[inline(always)]
pub const fn step(next_header: u8, head: [u8; EXT_HEAD_LEN]) -> Step {
    match next_header {
        NEXTHDR_TCP => Step::Upper(Upper::Tcp),
        NEXTHDR_ICMPV6 => Step::Upper(Upper::Icmpv6),
        NEXTHDR_FRAGMENT => Step::Pass(PassReason::Fragment),
        NEXTHDR_AUTH => Step::Pass(PassReason::Authenticated),
        NEXTHDR_ESP => Step::Pass(PassReason::Encrypted),
        NEXTHDR_NONE => Step::Pass(PassReason::NoNextHeader),
        NEXTHDR_ROUTING if head[ROUTING_SEGMENTS_LEFT_OFF] != 0 => {
            Step::Pass(PassReason::NotFinalDestination)
        }
        // Hdr Ext Len counts 8-octet units after the first 8 (RFC 8200 4.3).
        NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST => Step::Extension {
            next_header: head[0],
            len: (head[1] as usize + 1) * 8,
        },
        _ => Step::Pass(PassReason::NotTcp),
    }
}

/// Where a [`walk`] stopped: the transport header's protocol and offset,
/// or why the packet is passed. Flat, every field always written: a
/// `Result` carrying an offset leaves the offset undefined on its error
/// path, and the verifier refuses a program that spills such a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walked {
    /// The headers walked over, the fixed header included: the transport
    /// header's offset from the start of the IPv6 header when `upper` is
    /// `Ok`.
    pub ip_headers_len: usize,
    pub upper: Result<Upper, PassReason>,
}

impl Walked {
    /// The walk's result as a `Result`.
    #[inline(always)]
    pub fn transport(self) -> Result<Transport, PassReason> {
        self.upper.map(|protocol| Transport {
            protocol,
            ip_headers_len: self.ip_headers_len,
        })
    }
}

/// The walk from the fixed header, whose next header field is
/// `first_next_header`, to the transport header. `head_at(offset)` reads
/// the [`EXT_HEAD_LEN`] bytes at `offset` from the start of the IPv6
/// header, or `None` past the packet's end; it is called only for offsets
/// within [`IPV6_HLEN`] + [`IPV6_MAX_EXT_LEN`]. The headers the walk does
/// not read (the last extension header's body, the transport header) are
/// the caller's to bounds-check.
#[inline(always)]
pub fn walk<R>(first_next_header: u8, mut head_at: R) -> Walked
where
    R: FnMut(usize) -> Option<[u8; EXT_HEAD_LEN]>,
{
    let mut next_header = first_next_header;
    let mut offset = IPV6_HLEN;
    let mut seen = 0;
    let stop = |offset, reason| Walked {
        ip_headers_len: offset,
        upper: Err(reason),
    };
    // One step per extension header and one for the header after them.
    while seen <= IPV6_MAX_EXT_HEADERS {
        let mut head = [0; EXT_HEAD_LEN];
        if is_extension(next_header) {
            if seen == IPV6_MAX_EXT_HEADERS {
                return stop(offset, PassReason::TooManyExtensions);
            }
            if next_header == NEXTHDR_HOP && seen != 0 {
                return stop(offset, PassReason::Malformed);
            }
            head = match head_at(offset) {
                Some(head) => head,
                None => return stop(offset, PassReason::Truncated),
            };
        }
        match step(next_header, head) {
            Step::Extension {
                next_header: next,
                len,
            } => {
                offset += len;
                if offset > IPV6_HLEN + IPV6_MAX_EXT_LEN {
                    return stop(IPV6_HLEN, PassReason::ExtensionsTooLong);
                }
                next_header = next;
            }
            Step::Upper(protocol) => {
                return Walked {
                    ip_headers_len: offset,
                    upper: Ok(protocol),
                };
            }
            Step::Pass(reason) => return stop(offset, reason),
        }
        seen += 1;
    }
    // Unreached: the last round returns before reading. Kept as the loop's
    // bound for the verifier.
    stop(offset, PassReason::TooManyExtensions)
}
