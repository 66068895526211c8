//! Builders for well-formed Ethernet/IPv4/TCP frames with correct checksums,
//! for packet tests on the host and through BPF_PROG_TEST_RUN.

use alloc::{vec, vec::Vec};
use core::net::Ipv4Addr;

use crate::{csum, packet};

/// An Internet checksum computed apart from [`csum`], for tests to check
/// it against: big-endian words, summed in 64 bits, folded at the end. 0
/// over data with its checksum in it.
pub fn reference_checksum(data: &[u8]) -> u16 {
    let mut sum: u64 = data
        .chunks(2)
        .map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Describes one frame. `Default` is a plain TCP segment with no options.
#[derive(Clone, Debug)]
pub struct Frame {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub payload: Vec<u8>,
    /// IPv4 option bytes (padded with NOPs to a multiple of 4).
    pub ip_options: Vec<u8>,
    pub protocol: u8,
    /// Raw flags + fragment offset, host order.
    pub frag: u16,
    pub ttl: u8,
    pub tcp_flags: u8,
    pub seq: u32,
    pub ack: u32,
}

impl Default for Frame {
    fn default() -> Self {
        Self {
            src: Ipv4Addr::new(192, 0, 2, 2),
            dst: Ipv4Addr::new(198, 18, 0, 10),
            sport: 40_000,
            dport: 8022,
            payload: Vec::new(),
            ip_options: Vec::new(),
            protocol: packet::IPPROTO_TCP,
            frag: 0x4000, // DF
            ttl: 64,
            tcp_flags: 0x18, // PSH|ACK
            seq: 0x0102_0304,
            ack: 0x0a0b_0c0d,
        }
    }
}

impl Frame {
    /// The frame's bytes, checksums computed from scratch.
    pub fn build(&self) -> Vec<u8> {
        let mut options = self.ip_options.clone();
        while !options.len().is_multiple_of(4) {
            options.push(1); // NOP
        }
        let ip_len = packet::IPV4_MIN_LEN + options.len();
        let mut l4 = Vec::new();
        if self.protocol == packet::IPPROTO_TCP {
            l4.extend_from_slice(&self.sport.to_be_bytes());
            l4.extend_from_slice(&self.dport.to_be_bytes());
            l4.extend_from_slice(&self.seq.to_be_bytes());
            l4.extend_from_slice(&self.ack.to_be_bytes());
            l4.push(5 << 4);
            l4.push(self.tcp_flags);
            l4.extend_from_slice(&64_240u16.to_be_bytes()); // window
            l4.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
        } else {
            l4.extend_from_slice(&self.sport.to_be_bytes());
            l4.extend_from_slice(&self.dport.to_be_bytes());
            l4.extend_from_slice(&[0, 8, 0, 0]);
        }
        l4.extend_from_slice(&self.payload);
        if self.protocol == packet::IPPROTO_TCP {
            let seed = csum::pseudo_header_sum(
                self.src.octets(),
                self.dst.octets(),
                packet::IPPROTO_TCP,
                l4.len() as u16,
            );
            let check = csum::checksum(&l4, seed);
            l4[packet::TCP_CHECK_OFF..packet::TCP_CHECK_OFF + 2]
                .copy_from_slice(&check.to_ne_bytes());
        }

        let mut out = Vec::with_capacity(packet::ETH_HLEN + ip_len + l4.len());
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // dst MAC
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // src MAC
        out.extend_from_slice(&packet::ETH_P_IP.to_be_bytes());
        let ip_start = out.len();
        out.push(0x40 | (ip_len / 4) as u8);
        out.push(0);
        out.extend_from_slice(&((ip_len + l4.len()) as u16).to_be_bytes());
        out.extend_from_slice(&0x1234u16.to_be_bytes());
        out.extend_from_slice(&self.frag.to_be_bytes());
        out.push(self.ttl);
        out.push(self.protocol);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.src.octets());
        out.extend_from_slice(&self.dst.octets());
        out.extend_from_slice(&options);
        let check = csum::checksum(&out[ip_start..], 0);
        out[ip_start + packet::IPV4_CHECK_OFF..ip_start + packet::IPV4_CHECK_OFF + 2]
            .copy_from_slice(&check.to_ne_bytes());
        out.extend_from_slice(&l4);
        out
    }
}

/// An ICMP error (destination unreachable or time exceeded) quoting the
/// first `quote_len` bytes of `about`'s IP packet, as a router sends it.
#[derive(Clone, Debug)]
pub struct IcmpError {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub icmp_type: u8,
    pub code: u8,
    /// Next-hop MTU (fragmentation needed), 0 otherwise.
    pub mtu: u16,
    pub about: Frame,
    pub quote_len: usize,
}

impl IcmpError {
    /// The frame's bytes, checksums computed from scratch.
    pub fn build(&self) -> Vec<u8> {
        let offending = self.about.build();
        let ip = &offending[packet::ETH_HLEN..];
        let quote = &ip[..self.quote_len.min(ip.len())];
        let mut icmp = vec![self.icmp_type, self.code, 0, 0, 0, 0];
        icmp.extend_from_slice(&self.mtu.to_be_bytes());
        icmp.extend_from_slice(quote);
        let check = csum::checksum(&icmp, 0);
        icmp[2..4].copy_from_slice(&check.to_ne_bytes());
        let mut out = Vec::with_capacity(packet::ETH_HLEN + packet::IPV4_MIN_LEN + icmp.len());
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
        out.extend_from_slice(&packet::ETH_P_IP.to_be_bytes());
        let ip_start = out.len();
        out.push(0x45);
        out.push(0xc0);
        out.extend_from_slice(&((packet::IPV4_MIN_LEN + icmp.len()) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.push(64);
        out.push(packet::IPPROTO_ICMP);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.src.octets());
        out.extend_from_slice(&self.dst.octets());
        let check = csum::checksum(&out[ip_start..], 0);
        out[ip_start + packet::IPV4_CHECK_OFF..ip_start + packet::IPV4_CHECK_OFF + 2]
            .copy_from_slice(&check.to_ne_bytes());
        out.extend_from_slice(&icmp);
        out
    }
}

/// Whether the IPv4 header and TCP checksums of `frame` verify from scratch.
pub fn checksums_verify(frame: &[u8]) -> bool {
    let Ok(tcp) = packet::classify(frame) else {
        return false;
    };
    let ip = &frame[packet::ETH_HLEN..tcp.l4_off];
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let l4 = &frame[tcp.l4_off..packet::ETH_HLEN + total];
    let src: [u8; 4] = ip[12..16].try_into().unwrap_or_default();
    let dst: [u8; 4] = ip[16..20].try_into().unwrap_or_default();
    let seed = csum::pseudo_header_sum(src, dst, packet::IPPROTO_TCP, l4.len() as u16);
    csum::checksum(ip, 0) == 0 && csum::checksum(l4, seed) == 0
}

/// An ARP request from `sha`/`spa` asking who holds `tpa`, broadcast and
/// padded to the 60 bytes of a minimum Ethernet frame, as a NIC sends it.
pub fn arp_request(sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut frame = vec![0u8; 60];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&sha);
    frame[12..14].copy_from_slice(&crate::arp::ETH_P_ARP.to_be_bytes());
    frame[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    frame[22..28].copy_from_slice(&sha);
    frame[28..32].copy_from_slice(&spa.octets());
    frame[38..42].copy_from_slice(&tpa.octets());
    frame
}
