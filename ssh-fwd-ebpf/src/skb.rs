//! skb parsing and rewriting shared by the tc programs. Loads and stores go
//! through the skb helpers, and checksums through `l3/l4_csum_replace`, so
//! non-linear skbs and pending checksum offload (CHECKSUM_PARTIAL) are handled.

use aya_ebpf::{bindings::BPF_F_PSEUDO_HDR, programs::TcContext};
use ssh_fwd_common::{
    maps::Endpoint,
    outcome::Outcome,
    packet::{
        ETH_HLEN, ETH_P_IP, ETH_TYPE_OFF, IPPROTO_TCP, IPV4_CHECK_OFF, IPV4_DADDR_OFF,
        IPV4_FRAG_OFF, IPV4_PROTO_OFF, IPV4_SADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_MIN_LEN,
        TCP_SPORT_OFF, ipv4_header_len, is_fragment,
    },
};

/// Classifies the skb like `ssh_fwd_common::packet::classify` and returns the
/// offset of the TCP header.
#[inline(always)]
pub fn parse(ctx: &TcContext) -> Result<usize, Outcome> {
    let ether_type: u16 = ctx.load(ETH_TYPE_OFF).map_err(|_| Outcome::Malformed)?;
    if ether_type != ETH_P_IP.to_be() {
        return Err(Outcome::PassNotIpv4);
    }
    let version_ihl: u8 = ctx.load(ETH_HLEN).map_err(|_| Outcome::Malformed)?;
    let ip_len = ipv4_header_len(version_ihl).ok_or(Outcome::Malformed)?;
    let frag: u16 = ctx
        .load(ETH_HLEN + IPV4_FRAG_OFF)
        .map_err(|_| Outcome::Malformed)?;
    if is_fragment(frag) {
        return Err(Outcome::PassFragment);
    }
    let proto: u8 = ctx
        .load(ETH_HLEN + IPV4_PROTO_OFF)
        .map_err(|_| Outcome::Malformed)?;
    if proto != IPPROTO_TCP {
        return Err(Outcome::PassNotTcp);
    }
    let l4 = ETH_HLEN + ip_len;
    if (ctx.len() as usize) < l4 + TCP_MIN_LEN {
        return Err(Outcome::Malformed);
    }
    Ok(l4)
}

#[inline(always)]
pub fn read_endpoint(ctx: &TcContext, addr_off: usize, port_off: usize) -> Result<Endpoint, i64> {
    Ok(Endpoint {
        addr: ctx.load(ETH_HLEN + addr_off)?,
        port: ctx.load(port_off)?,
        _pad: 0,
    })
}

/// Which side of the connection [`rewrite`] replaces.
#[derive(Clone, Copy)]
pub enum Field {
    Source,
    Destination,
}

/// Replaces one side's address and port, fixing the IPv4 checksum and the TCP
/// checksum (pseudo-header aware, so CHECKSUM_PARTIAL skbs stay correct).
#[inline(always)]
pub fn rewrite(
    ctx: &TcContext,
    l4: usize,
    field: Field,
    from: Endpoint,
    to: Endpoint,
) -> Result<(), i64> {
    let (addr_off, port_off) = match field {
        Field::Source => (ETH_HLEN + IPV4_SADDR_OFF, l4 + TCP_SPORT_OFF),
        Field::Destination => (ETH_HLEN + IPV4_DADDR_OFF, l4 + TCP_DPORT_OFF),
    };
    let tcp_check = l4 + TCP_CHECK_OFF;
    ctx.l4_csum_replace(
        tcp_check,
        from.addr as u64,
        to.addr as u64,
        (BPF_F_PSEUDO_HDR | 4) as u64,
    )?;
    ctx.l4_csum_replace(tcp_check, from.port as u64, to.port as u64, 2)?;
    ctx.l3_csum_replace(
        ETH_HLEN + IPV4_CHECK_OFF,
        from.addr as u64,
        to.addr as u64,
        4,
    )?;
    ctx.store(addr_off, &to.addr, 0)?;
    ctx.store(port_off, &to.port, 0)?;
    Ok(())
}
