//! XDP ingress: rewrite `frontend -> backend` in place and hand the packet to
//! the stack, which routes it to the pod.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
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

use crate::{
    counters::{Direction, count, count_mapping},
    maps::FRONTENDS,
    track::remember_frontend,
};

#[xdp]
pub fn ssh_fwd_ingress_xdp(ctx: XdpContext) -> u32 {
    count(dnat(&ctx));
    // Every outcome passes: a packet we do not own is the stack's business.
    xdp_action::XDP_PASS
}

/// A bounds-checked pointer `offset` bytes into the packet, valid for `N` bytes.
#[inline(always)]
fn bytes_at<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<*mut u8> {
    let start = ctx.data();
    if start + offset + N > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *mut u8)
}

#[inline(always)]
fn dnat(ctx: &XdpContext) -> Outcome {
    let Some(eth) = bytes_at::<ETH_HLEN>(ctx, 0) else {
        return Outcome::Malformed;
    };
    // SAFETY: all reads and writes below stay inside ranges checked by bytes_at.
    unsafe {
        if eth.add(ETH_TYPE_OFF).cast::<u16>().read_unaligned() != ETH_P_IP.to_be() {
            return Outcome::PassNotIpv4;
        }
        let Some(ip) = bytes_at::<IPV4_MIN_LEN>(ctx, ETH_HLEN) else {
            return Outcome::Malformed;
        };
        let Some(ip_len) = ipv4_header_len(*ip) else {
            return Outcome::Malformed;
        };
        if is_fragment(ip.add(IPV4_FRAG_OFF).cast::<u16>().read_unaligned()) {
            return Outcome::PassFragment;
        }
        if *ip.add(IPV4_PROTO_OFF) != IPPROTO_TCP {
            return Outcome::PassNotTcp;
        }
        let Some(tcp) = bytes_at::<TCP_MIN_LEN>(ctx, ETH_HLEN + ip_len) else {
            return Outcome::Malformed;
        };

        let daddr = ip.add(IPV4_DADDR_OFF).cast::<u32>();
        let dport = tcp.add(TCP_DPORT_OFF).cast::<u16>();
        let frontend = Endpoint {
            addr: daddr.read_unaligned(),
            port: dport.read_unaligned(),
            _pad: 0,
        };
        let Some(target) = FRONTENDS.get(frontend).copied() else {
            return Outcome::PassNoFrontend;
        };
        let client = Endpoint {
            addr: ip.add(IPV4_SADDR_OFF).cast::<u32>().read_unaligned(),
            port: tcp.add(TCP_SPORT_OFF).cast::<u16>().read_unaligned(),
            _pad: 0,
        };
        remember_frontend(ctx, client, frontend, &target);

        let backend = target.endpoint;
        let addr_diff = csum::diff32(frontend.addr, backend.addr);
        let port_diff = csum::diff16(frontend.port, backend.port);
        let ip_check = ip.add(IPV4_CHECK_OFF).cast::<u16>();
        ip_check.write_unaligned(csum::apply(ip_check.read_unaligned(), addr_diff));
        let tcp_check = tcp.add(TCP_CHECK_OFF).cast::<u16>();
        tcp_check.write_unaligned(csum::apply(
            tcp_check.read_unaligned(),
            addr_diff + port_diff,
        ));
        daddr.write_unaligned(backend.addr);
        dport.write_unaligned(backend.port);

        let bytes = (ctx.data_end() - ctx.data()) as u64;
        count_mapping(target.slot, Direction::ToBackend, bytes);
    }
    Outcome::Dnat
}
