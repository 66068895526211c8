//! skb parsing and rewriting shared by the tc programs. Headers are read
//! directly from the linear data (pulled in if they are not); stores go
//! through the skb helpers, and checksums through `l3/l4_csum_replace`, so
//! pending checksum offload (CHECKSUM_PARTIAL) stays correct.

use aya_ebpf::{bindings::BPF_F_PSEUDO_HDR, programs::TcContext};
use ssh_fwd_common::{
    csum,
    maps::Endpoint,
    outcome::Outcome,
    packet::{
        ETH_HLEN, ETH_P_IP, ETH_TYPE_OFF, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_DADDR_OFF,
        IPV4_FRAG_OFF, IPV4_MIN_LEN, IPV4_PROTO_OFF, IPV4_SADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF,
        TCP_MIN_LEN, TCP_SPORT_OFF, ipv4_header_len, is_fragment,
    },
};

/// The TCP/IPv4 headers of an skb the programs may rewrite.
#[derive(Clone, Copy)]
pub struct Tcp4 {
    /// Offset of the TCP header.
    pub l4: usize,
    pub source: Endpoint,
    pub destination: Endpoint,
}

/// Longest IPv4 header plus the TCP ports: what parsing needs linear.
const HEADERS_MAX: u32 = (ETH_HLEN + 60 + TCP_MIN_LEN) as u32;

/// Classifies the skb like `ssh_fwd_common::packet::classify` and reads both
/// endpoints. Reads the linear data directly (no helper call per field, which
/// cost more than the rest of a miss); only when the headers are not all in
/// the linear part are they pulled in, once.
#[inline(always)]
pub fn parse(ctx: &TcContext) -> Result<Tcp4, Outcome> {
    match parse_linear(ctx) {
        Some(parsed) => parsed,
        None => {
            // Fails for a packet shorter than its headers: malformed.
            ctx.pull_data(HEADERS_MAX.min(ctx.len()))
                .map_err(|_| Outcome::Malformed)?;
            parse_linear(ctx).unwrap_or(Err(Outcome::Malformed))
        }
    }
}

/// A bounds-checked pointer `offset` bytes into the linear data, valid for
/// `N` bytes; writable as far as the verifier is concerned (it unclones the
/// skb of a program that writes).
#[inline(always)]
pub fn bytes_at<const N: usize>(ctx: &TcContext, offset: usize) -> Option<*mut u8> {
    let start = ctx.data();
    if start + offset + N > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *mut u8)
}

/// `None`: the headers reach past the linear data.
#[inline(always)]
fn parse_linear(ctx: &TcContext) -> Option<Result<Tcp4, Outcome>> {
    let eth = bytes_at::<ETH_HLEN>(ctx, 0)?;
    // SAFETY: every read below stays inside a range checked by bytes_at.
    unsafe {
        if eth.add(ETH_TYPE_OFF).cast::<u16>().read_unaligned() != ETH_P_IP.to_be() {
            return Some(Err(Outcome::PassNotIpv4));
        }
        let ip = bytes_at::<IPV4_MIN_LEN>(ctx, ETH_HLEN)?;
        let Some(ip_len) = ipv4_header_len(*ip) else {
            return Some(Err(Outcome::Malformed));
        };
        if is_fragment(ip.add(IPV4_FRAG_OFF).cast::<u16>().read_unaligned()) {
            return Some(Err(Outcome::PassFragment));
        }
        if *ip.add(IPV4_PROTO_OFF) != IPPROTO_TCP {
            return Some(Err(Outcome::PassNotTcp));
        }
        let l4 = ETH_HLEN + ip_len;
        if (ctx.len() as usize) < l4 + TCP_MIN_LEN {
            return Some(Err(Outcome::Malformed));
        }
        let tcp = bytes_at::<TCP_MIN_LEN>(ctx, l4)?;
        Some(Ok(Tcp4 {
            l4,
            source: Endpoint {
                addr: ip.add(IPV4_SADDR_OFF).cast::<u32>().read_unaligned(),
                port: tcp.add(TCP_SPORT_OFF).cast::<u16>().read_unaligned(),
                _pad: 0,
            },
            destination: Endpoint {
                addr: ip.add(IPV4_DADDR_OFF).cast::<u32>().read_unaligned(),
                port: tcp.add(TCP_DPORT_OFF).cast::<u16>().read_unaligned(),
                _pad: 0,
            },
        }))
    }
}

/// Which side of the connection [`rewrite`] replaces.
#[derive(Clone, Copy)]
pub enum Field {
    Source,
    Destination,
}

/// Replaces one side's address and port, fixing the IPv4 checksum and the TCP
/// checksum. Only the TCP checksum goes through the kernel's helper: whether
/// the skb's checksum is still to be completed (CHECKSUM_PARTIAL, where only
/// the pseudo-header part changes) or covered by `skb->csum`
/// (CHECKSUM_COMPLETE) is the kernel's to know. The rest is written
/// directly: the address and the IPv4 checksum change by amounts that cancel
/// in the header's sum, and the port by what the helper already took out of
/// the TCP checksum, so `skb->csum` stays as valid as with helper stores.
/// An `Err` after the first helper leaves the packet half-written: drop it.
#[inline(always)]
pub fn rewrite(
    ctx: &TcContext,
    l4: usize,
    field: Field,
    from: Endpoint,
    to: Endpoint,
) -> Result<(), i64> {
    let (addr_off, port_off) = match field {
        Field::Source => (IPV4_SADDR_OFF, TCP_SPORT_OFF),
        Field::Destination => (IPV4_DADDR_OFF, TCP_DPORT_OFF),
    };
    let tcp_check = l4 + TCP_CHECK_OFF;
    ctx.l4_csum_replace(
        tcp_check,
        from.addr as u64,
        to.addr as u64,
        (BPF_F_PSEUDO_HDR | 4) as u64,
    )?;
    ctx.l4_csum_replace(tcp_check, from.port as u64, to.port as u64, 2)?;
    // The helpers may have moved the data: look the headers up again.
    let ip = bytes_at::<IPV4_MIN_LEN>(ctx, ETH_HLEN).ok_or(-1i64)?;
    let tcp = bytes_at::<TCP_MIN_LEN>(ctx, l4).ok_or(-1i64)?;
    // SAFETY: every write stays inside a range bytes_at checked; the program
    // has the skb to itself (the verifier unclones it first).
    unsafe {
        let check = ip.add(IPV4_CHECK_OFF).cast::<u16>();
        check.write_unaligned(csum::apply(
            check.read_unaligned(),
            csum::diff32(from.addr, to.addr),
        ));
        ip.add(addr_off).cast::<u32>().write_unaligned(to.addr);
        tcp.add(port_off).cast::<u16>().write_unaligned(to.port);
    }
    Ok(())
}
