//! Reading headers the same way in XDP and tc: bounds-checked pointers into
//! the packet and the parse step of `ssh_fwd_common::packet::classify`,
//! extended to ICMP errors and to the TCP segment fields the connection
//! tracking needs.

use aya_ebpf::programs::{TcContext, XdpContext};
use ssh_fwd_common::{
    conntrack::Segment,
    maps::{Addr, Endpoint},
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

/// The transport of a packet the programs may touch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP segment: `Headers::seg` holds the fields the tracking reads.
    Tcp,
    /// An ICMP message (`crate::icmp` reads what it needs of errors).
    Icmp,
}

/// The headers of an IP packet that is TCP or ICMP, IPv4 unless said. A
/// plain struct, every field always written: an enum with a payload would
/// leave bytes the compiler may fill with any register, which the verifier
/// refuses.
#[derive(Clone, Copy)]
pub struct Headers<A: Addr = u32> {
    /// The IPv4 header length in bytes (IHL * 4).
    pub ip_len: usize,
    /// The IPv4 packet's length in bytes (headers and payload): its total
    /// length, or the frame's for a BIG TCP packet.
    pub total_len: usize,
    pub ttl: u8,
    /// A BIG TCP packet (over 64 KiB; its total length field is 0).
    pub big: bool,
    /// Source and destination; ports are 0 for ICMP.
    pub source: Endpoint<A>,
    pub destination: Endpoint<A>,
    pub transport: Transport,
    /// The TCP segment; all zero for ICMP.
    pub seg: Segment,
}

impl<A: Addr> Headers<A> {
    /// Offset of the transport header.
    #[inline(always)]
    pub fn l4(&self) -> usize {
        ETH_HLEN + self.ip_len
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
            return Some(Err(Outcome::PassNotIpv4));
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
