//! Reading headers the same way in XDP and tc: bounds-checked pointers into
//! the packet and the parse step of `ssh_fwd_common::packet::classify`,
//! extended to ICMP errors and to the TCP segment fields the connection
//! tracking needs.

use aya_ebpf::programs::{TcContext, XdpContext};
use ssh_fwd_common::{
    conntrack::Segment,
    ipv6::{
        EXT_HEAD_LEN, IPV6_DADDR_OFF, IPV6_HLEN, IPV6_HOP_LIMIT_OFF, IPV6_MAX_EXT_LEN,
        IPV6_NEXT_HEADER_OFF, IPV6_PAYLOAD_LEN_OFF, IPV6_SADDR_OFF, PassReason, Upper,
        ipv6_payload_len, pass_outcome, walk,
    },
    maps::{Addr, Addr6, Endpoint, Endpoint6},
    outcome::Outcome,
    packet::{
        ETH_HLEN, ETH_P_IP, ETH_TYPE_OFF, IPPROTO_ICMP, IPPROTO_TCP, IPV4_DADDR_OFF, IPV4_FRAG_OFF,
        IPV4_MIN_LEN, IPV4_PROTO_OFF, IPV4_SADDR_OFF, IPV4_TOT_LEN_OFF, IPV4_TTL_OFF, TCP_ACK_OFF,
        TCP_DOFF_OFF, TCP_DPORT_OFF, TCP_FLAGS_OFF, TCP_MIN_LEN, TCP_SEQ_OFF, TCP_SPORT_OFF,
        ipv4_header_len, ipv4_total_len, is_fragment, tcp_payload_of,
    },
};

/// Direct access to a packet's (linear) bytes, for both program types.
pub trait Packet {
    fn data(&self) -> usize;
    fn data_end(&self) -> usize;
    /// The whole frame's length: past `data_end` for an skb whose bytes
    /// are not all linear.
    fn frame_len(&self) -> usize;
    /// The interface the packet arrived on.
    fn arrival_ifindex(&self) -> u32;
}

impl Packet for XdpContext {
    #[inline(always)]
    fn data(&self) -> usize {
        XdpContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        XdpContext::data_end(self)
    }

    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.data_end() - self.data()
    }

    #[inline(always)]
    fn arrival_ifindex(&self) -> u32 {
        // SAFETY: the context pointer is the live xdp_md of this run.
        unsafe { (*self.ctx).ingress_ifindex }
    }
}

/// A packet whose bounds are loaded from its context at every use, by
/// volatile loads. A function that reads nothing of its context but those
/// would otherwise be given them as arguments (the compiler moves the
/// loads into its callers), and the verifier refuses arithmetic on a
/// packet's end passed so.
pub struct Reloaded<'a, C>(pub &'a C);

impl Packet for Reloaded<'_, TcContext> {
    #[inline(always)]
    fn data(&self) -> usize {
        // SAFETY: the context pointer is the live skb of this program run.
        unsafe { core::ptr::read_volatile(&(*self.0.skb.skb).data) as usize }
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        // SAFETY: as for `data`.
        unsafe { core::ptr::read_volatile(&(*self.0.skb.skb).data_end) as usize }
    }

    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.0.frame_len()
    }

    #[inline(always)]
    fn arrival_ifindex(&self) -> u32 {
        self.0.arrival_ifindex()
    }
}

impl Packet for Reloaded<'_, XdpContext> {
    #[inline(always)]
    fn data(&self) -> usize {
        // SAFETY: the context pointer is the live xdp_md of this run.
        unsafe { core::ptr::read_volatile(&(*self.0.ctx).data) as usize }
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        // SAFETY: as for `data`.
        unsafe { core::ptr::read_volatile(&(*self.0.ctx).data_end) as usize }
    }

    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.data_end() - self.data()
    }

    #[inline(always)]
    fn arrival_ifindex(&self) -> u32 {
        self.0.arrival_ifindex()
    }
}

impl Packet for TcContext {
    #[inline(always)]
    fn data(&self) -> usize {
        TcContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        TcContext::data_end(self)
    }

    #[inline(always)]
    fn frame_len(&self) -> usize {
        self.len() as usize
    }

    #[inline(always)]
    fn arrival_ifindex(&self) -> u32 {
        // SAFETY: the context pointer is the live skb of this program run.
        unsafe { (*self.skb.skb).ifindex }
    }
}

/// A bounds-checked pointer `offset` bytes into the packet, valid for `N`
/// bytes; writable as far as the verifier is concerned.
#[inline(always)]
pub fn bytes_at<P: Packet, const N: usize>(p: &P, offset: usize) -> Option<*mut u8> {
    let start = p.data();
    if start + offset + N > p.data_end() {
        return None;
    }
    Some((start + offset) as *mut u8)
}

/// Reads `N` bytes at `offset` into an array.
#[inline(always)]
pub fn read<P: Packet, const N: usize>(p: &P, offset: usize) -> Option<[u8; N]> {
    let at = bytes_at::<P, N>(p, offset)?;
    // SAFETY: `bytes_at` checked the N bytes are inside the packet.
    Some(unsafe { at.cast::<[u8; N]>().read_unaligned() })
}

/// Reads a raw (network order, as loaded) 16-bit word.
#[inline(always)]
pub fn word<P: Packet>(p: &P, offset: usize) -> Option<u16> {
    read::<P, 2>(p, offset).map(u16::from_ne_bytes)
}

/// Writes a raw 16-bit word.
#[inline(always)]
pub fn put_word<P: Packet>(p: &P, offset: usize, value: u16) -> Option<()> {
    let at = bytes_at::<P, 2>(p, offset)?;
    // SAFETY: `bytes_at` checked the 2 bytes are inside the packet; the
    // program has the packet to itself.
    unsafe { at.cast::<u16>().write_unaligned(value) };
    Some(())
}

/// Writes a raw 32-bit word.
#[inline(always)]
pub fn put_addr<P: Packet>(p: &P, offset: usize, value: u32) -> Option<()> {
    let at = bytes_at::<P, 4>(p, offset)?;
    // SAFETY: as in `put_word`.
    unsafe { at.cast::<u32>().write_unaligned(value) };
    Some(())
}

/// Writes an IPv6 address (four raw words) through one bounds check.
#[inline(always)]
pub fn put_addr6<P: Packet>(p: &P, offset: usize, value: Addr6) -> Option<()> {
    let words = bytes_at::<P, 16>(p, offset)?.cast::<u32>();
    // SAFETY: `bytes_at` checked the 16 bytes are inside the packet; the
    // program has the packet to itself.
    unsafe {
        for (i, w) in value.0.iter().enumerate() {
            words.add(i).write_unaligned(*w);
        }
    }
    Some(())
}

/// The transport of a packet the programs may touch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP segment: `Headers::seg` holds the fields the tracking reads.
    Tcp,
    /// An ICMP message, or ICMPv6 in `Headers<Addr6>` (`crate::icmp` reads
    /// what it needs of errors).
    Icmp,
}

/// The EtherType of the frame (network order, as loaded), if it has one.
#[inline(always)]
pub fn ethertype<P: Packet>(p: &P) -> Option<u16> {
    word(p, ETH_TYPE_OFF)
}

/// The headers of an IP packet that is TCP or ICMP, IPv4 unless said. A
/// plain struct, every field always written: an enum with a payload would
/// leave bytes the compiler may fill with any register, which the verifier
/// refuses.
#[derive(Clone, Copy)]
pub struct Headers<A: Addr = u32> {
    /// The IP headers' length in bytes: IHL * 4, or for IPv6 the fixed
    /// header and the extension headers walked over.
    pub ip_len: usize,
    /// The IP packet's length in bytes (headers and payload): its total
    /// length (IPv6: the fixed header and the payload length), or the
    /// frame's for a BIG TCP packet.
    pub total_len: usize,
    /// The TTL, or the hop limit.
    pub ttl: u8,
    /// A BIG TCP packet (over 64 KiB; its total length field is 0).
    pub big: bool,
    /// Source and destination; ports are 0 for ICMP and ICMPv6.
    pub source: Endpoint<A>,
    pub destination: Endpoint<A>,
    pub transport: Transport,
    /// The TCP segment; all zero for ICMP.
    pub seg: Segment,
}

/// Above the longest IP headers a parse accepts (60 bytes of IPv4, 296 of
/// IPv6): the headers the IPv6 paths read back from their per-CPU scratch
/// carry no bounds the verifier knows, and a masked length has them.
const IP_LEN_MASK: usize = 0x1ff;

impl<A: Addr> Headers<A> {
    /// The IP headers' length, bounded for the verifier (see
    /// [`IP_LEN_MASK`]).
    #[inline(always)]
    pub fn ip_len(&self) -> usize {
        self.ip_len & IP_LEN_MASK
    }

    /// Offset of the transport header.
    #[inline(always)]
    pub fn l4(&self) -> usize {
        ETH_HLEN + self.ip_len()
    }
}

/// Classifies like `ssh_fwd_common::packet::classify`, letting ICMP through
/// too. `None`: the headers reach past the (linear) data.
#[inline(always)]
pub fn parse<P: Packet>(p: &P) -> Option<Result<Headers, Outcome>> {
    let eth = bytes_at::<P, ETH_HLEN>(p, 0)?;
    // SAFETY: every read below stays inside a range checked by bytes_at.
    unsafe {
        if eth.add(ETH_TYPE_OFF).cast::<u16>().read_unaligned() != ETH_P_IP.to_be() {
            return Some(Err(Outcome::PassNotIp));
        }
        let ip = bytes_at::<P, IPV4_MIN_LEN>(p, ETH_HLEN)?;
        let Some(ip_len) = ipv4_header_len(*ip) else {
            return Some(Err(Outcome::Malformed));
        };
        if is_fragment(ip.add(IPV4_FRAG_OFF).cast::<u16>().read_unaligned()) {
            return Some(Err(Outcome::PassFragment));
        }
        let proto = *ip.add(IPV4_PROTO_OFF);
        let ttl = *ip.add(IPV4_TTL_OFF);
        let tot_len = ip.add(IPV4_TOT_LEN_OFF).cast::<u16>().read_unaligned();
        let saddr = ip.add(IPV4_SADDR_OFF).cast::<u32>().read_unaligned();
        let daddr = ip.add(IPV4_DADDR_OFF).cast::<u32>().read_unaligned();
        let l4 = ETH_HLEN + ip_len;
        let endpoint = |addr, port| Endpoint {
            addr,
            port,
            _pad: 0,
        };
        if proto == IPPROTO_ICMP {
            return Some(Ok(Headers {
                ip_len,
                total_len: u16::from_be(tot_len) as usize,
                ttl,
                big: false,
                source: endpoint(saddr, 0),
                destination: endpoint(daddr, 0),
                transport: Transport::Icmp,
                seg: Segment {
                    flags: 0,
                    seq: 0,
                    ack: 0,
                    payload: 0,
                },
            }));
        }
        if proto != IPPROTO_TCP {
            return Some(Err(Outcome::PassNotTcp));
        }
        let Some(total_len) = ipv4_total_len(tot_len, p.frame_len()) else {
            return Some(Err(Outcome::Malformed));
        };
        if total_len < ip_len + TCP_MIN_LEN {
            return Some(Err(Outcome::Malformed));
        }
        let tcp = bytes_at::<P, TCP_MIN_LEN>(p, l4)?;
        let seg = Segment {
            flags: *tcp.add(TCP_FLAGS_OFF),
            seq: u32::from_be(tcp.add(TCP_SEQ_OFF).cast::<u32>().read_unaligned()),
            ack: u32::from_be(tcp.add(TCP_ACK_OFF).cast::<u32>().read_unaligned()),
            payload: tcp_payload_of(total_len, ip_len, *tcp.add(TCP_DOFF_OFF)),
        };
        Some(Ok(Headers {
            ip_len,
            total_len,
            ttl,
            big: tot_len == 0,
            source: endpoint(saddr, tcp.add(TCP_SPORT_OFF).cast::<u16>().read_unaligned()),
            destination: endpoint(daddr, tcp.add(TCP_DPORT_OFF).cast::<u16>().read_unaligned()),
            transport: Transport::Tcp,
            seg,
        }))
    }
}

/// The most a parse of IPv6 reads: the fixed header, the extension headers
/// walked over and a TCP header with options.
pub const IPV6_HEADERS_MAX: usize = ETH_HLEN + IPV6_HLEN + IPV6_MAX_EXT_LEN + 60;

/// Reads an IPv6 address at `offset` as four raw words.
#[inline(always)]
fn addr6<P: Packet>(p: &P, offset: usize) -> Option<Addr6> {
    let at = bytes_at::<P, 16>(p, offset)?;
    let words = at.cast::<u32>();
    // SAFETY: `bytes_at` checked the 16 bytes are inside the packet.
    unsafe {
        Some(Addr6([
            words.read_unaligned(),
            words.add(1).read_unaligned(),
            words.add(2).read_unaligned(),
            words.add(3).read_unaligned(),
        ]))
    }
}

/// The IPv6 twin of [`parse`]: the fixed header, the extension headers
/// walked over as `ssh_fwd_common::ipv6::walk` says, then TCP or ICMPv6.
/// Anything else is counted as the walk's reason
/// (`ssh_fwd_common::ipv6::pass_outcome`). `None`: the headers reach past
/// the (linear) data.
#[inline(always)]
pub fn parse6<P: Packet>(p: &P) -> Option<Result<Headers<Addr6>, Outcome>> {
    let ip = bytes_at::<P, IPV6_HLEN>(p, ETH_HLEN)?;
    // SAFETY: every read below stays inside the range bytes_at checked.
    let (version, payload_raw, next_header, hop_limit) = unsafe {
        (
            *ip >> 4,
            ip.add(IPV6_PAYLOAD_LEN_OFF).cast::<u16>().read_unaligned(),
            *ip.add(IPV6_NEXT_HEADER_OFF),
            *ip.add(IPV6_HOP_LIMIT_OFF),
        )
    };
    if version != 6 {
        return Some(Err(Outcome::Malformed));
    }
    let total_len = IPV6_HLEN + ipv6_payload_len(payload_raw, p.frame_len());
    if ETH_HLEN + total_len > p.frame_len() {
        return Some(Err(Outcome::Malformed));
    }
    let mut beyond_linear = false;
    let walked = walk(next_header, |at| {
        if at + EXT_HEAD_LEN > total_len {
            return None;
        }
        let head = read::<P, EXT_HEAD_LEN>(p, ETH_HLEN + at);
        beyond_linear |= head.is_none();
        head
    });
    let upper = match walked.upper {
        Ok(upper) => upper,
        Err(PassReason::Truncated) if beyond_linear => return None,
        Err(reason) => return Some(Err(pass_outcome(reason))),
    };
    let ip_len = walked.ip_headers_len;
    let source = addr6(p, ETH_HLEN + IPV6_SADDR_OFF)?;
    let destination = addr6(p, ETH_HLEN + IPV6_DADDR_OFF)?;
    let endpoint = |addr, port| Endpoint6 {
        addr,
        port,
        _pad: [0; 3],
    };
    if upper == Upper::Icmpv6 {
        return Some(Ok(Headers {
            ip_len,
            total_len,
            ttl: hop_limit,
            big: false,
            source: endpoint(source, 0),
            destination: endpoint(destination, 0),
            transport: Transport::Icmp,
            seg: Segment {
                flags: 0,
                seq: 0,
                ack: 0,
                payload: 0,
            },
        }));
    }
    if total_len < ip_len + TCP_MIN_LEN {
        return Some(Err(Outcome::Malformed));
    }
    // Masked for the verifier: the walk keeps the offset within the
    // extension headers' bound, which the mask does not lower.
    let l4 = ETH_HLEN + (ip_len & 0x1ff);
    let tcp = bytes_at::<P, TCP_MIN_LEN>(p, l4)?;
    // SAFETY: every read below stays inside the range bytes_at checked.
    unsafe {
        let seg = Segment {
            flags: *tcp.add(TCP_FLAGS_OFF),
            seq: u32::from_be(tcp.add(TCP_SEQ_OFF).cast::<u32>().read_unaligned()),
            ack: u32::from_be(tcp.add(TCP_ACK_OFF).cast::<u32>().read_unaligned()),
            payload: tcp_payload_of(total_len, ip_len, *tcp.add(TCP_DOFF_OFF)),
        };
        Some(Ok(Headers {
            ip_len,
            total_len,
            ttl: hop_limit,
            big: payload_raw == 0 && total_len > u16::MAX as usize,
            source: endpoint(
                source,
                tcp.add(TCP_SPORT_OFF).cast::<u16>().read_unaligned(),
            ),
            destination: endpoint(
                destination,
                tcp.add(TCP_DPORT_OFF).cast::<u16>().read_unaligned(),
            ),
            transport: Transport::Tcp,
            seg,
        }))
    }
}
